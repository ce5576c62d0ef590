#!/bin/sh
# Builds the manager as its image ships it: a static binary (no C library needed on a bare base),
# without local paths or debug symbols. The one build command of the image: the Dockerfile and
# `make image` (which needs no Docker) both run it, so the two images' binaries are built alike
# (from the same sources; with the Go of golang:1.26 in the one, this machine's in the other). For
# GOARCH's architecture, this machine's unless set. SRC is the source tree, this one unless given
# (make previous-release builds another commit's). PKG is the program: the manager (./cmd) unless
# given; the history is ./cmd/history.
#
#	hack/manager-build.sh OUT [SRC [PKG]]
set -eu
case $1 in
/*) out=$1 ;;
*) out=$PWD/$1 ;;
esac
CGO_ENABLED=0 GOOS="${GOOS:-linux}" exec "${GO:-go}" -C "${2:-.}" build -trimpath -ldflags="-s -w" -o "$out" "${3:-./cmd}"
