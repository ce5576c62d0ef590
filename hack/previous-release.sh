#!/bin/sh
# Writes the release an install is upgraded from in test/e2e/installed: the sources of commit REV
# (config/, charts/ and all) in DIR, with the commit's name in DIR/REVISION, and the manager's
# image built from them, the way make image builds this tree's, into ARCHIVE tagged IMG.
#
#	hack/previous-release.sh REV DIR IMG ARCHIVE
#
# A clone without REV (a shallow one) gets this tree's own HEAD instead, and says so: the upgrade
# is then from the same sources to another image, which still rolls every pod.
set -eu
rev=$1 dir=$2 img=$3 archive=$4
if ! commit=$(git rev-parse --verify --quiet "$rev^{commit}"); then
	echo "previous-release: no commit $rev in this clone (a shallow one?): upgrading from HEAD instead" >&2
	commit=$(git rev-parse --verify HEAD)
fi
rm -rf "$dir"
mkdir -p "$dir"
git archive "$commit" | tar -x -C "$dir"
echo "$commit" > "$dir/REVISION"
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
# The commit's own scripts build its binary, as its make image would have.
(cd "$dir" && hack/images/manager-rootfs.sh "$rootfs/root")
"${IMAGES_TOOL:?}" -rootfs "$rootfs/root" -tag "$img" -entrypoint /manager -user 65532:65532 -workdir / \
	-arch "$("${GO:-go}" env GOARCH)" -o "$archive"
