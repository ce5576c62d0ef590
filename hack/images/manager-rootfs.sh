#!/bin/sh
# Lays out the manager image's root file system in DIR, from files alone, as the Dockerfile's base
# (gcr.io/distroless/static:nonroot) has it: the static manager at /manager (and the history at
# /history, where SRC has it), the user nonroot
# (65532) and its group, the CA certificates of this machine (Debian's ca-certificates), and a
# /tmp. No shell, no package manager: nothing to run in it but the operator's programs.
#
#	hack/images/manager-rootfs.sh DIR [SRC]
#
# SRC is the source tree the manager is built from, this one unless given.
#
# The files' modes do not depend on the caller's umask: the image's user, 65532, must read and
# run them whoever built it. (Its home, root's here where distroless gives it to nonroot, is never
# written: the root file system is read-only.)
set -eu
umask 022
dir=$1
rm -rf "$dir"
mkdir -p "$dir/etc/ssl/certs" "$dir/home/nonroot" "$dir/tmp"
chmod 1777 "$dir/tmp"
"$(dirname "$0")/../manager-build.sh" "$dir/manager" "${2:-.}"
chmod 0755 "$dir/manager"
if [ -d "${2:-.}/cmd/history" ]; then
	"$(dirname "$0")/../manager-build.sh" "$dir/history" "${2:-.}" ./cmd/history
	chmod 0755 "$dir/history"
fi
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
cat > "$dir/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat > "$dir/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
GROUP
