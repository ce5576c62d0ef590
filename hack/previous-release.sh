#!/bin/sh
# Writes the release an install is upgraded from in test/e2e/installed: the sources of commit REV
# (config/, charts/ and all) in DIR, and the manager's image built from them by this tree's
# scripts, as make image builds this tree's, into ARCHIVE tagged IMG; DIR/REVISION names the
# commit, written last.
#
#	hack/previous-release.sh REV DIR IMG ARCHIVE
#
# A shallow clone is deepened by one commit to find REV. A clone that still lacks it gets this
# tree's own HEAD instead, and says so: the upgrade is then from the same sources to another
# image, which still rolls every pod (the test logs the commit it upgraded from).
set -eu
rev=$1 dir=$2 img=$3 archive=$4
found() { commit=$(git rev-parse --verify --quiet "$rev^{commit}"); }
if ! found && [ "$(git rev-parse --is-shallow-repository)" = true ]; then
	git fetch --quiet --deepen=1 2>/dev/null || true
fi
if ! found; then
	echo "previous-release: no commit $rev in this clone: upgrading from HEAD's sources instead" >&2
	commit=$(git rev-parse --verify HEAD)
fi
rm -rf "$dir"
mkdir -p "$dir"
git archive "$commit" | tar -x -C "$dir"
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
hack/images/manager-rootfs.sh "$rootfs/root" "$dir"
"${IMAGES_TOOL:?}" -rootfs "$rootfs/root" -tag "$img" -entrypoint /manager -user 65532:65532 -workdir / \
	-arch "$("${GO:-go}" env GOARCH)" -o "$archive"
echo "$commit" > "$dir/REVISION"
