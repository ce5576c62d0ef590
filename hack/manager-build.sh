#!/bin/sh
# Builds the manager as its image ships it: a static binary (no C library needed on a bare base),
# without local paths or debug symbols. The one build command of the image: the Dockerfile and
# `make image` (which needs no Docker) both run it, so the two images hold the same binary.
#
#	hack/manager-build.sh OUT
set -eu
CGO_ENABLED=0 GOOS="${GOOS:-linux}" GOARCH="${GOARCH:-amd64}" exec go build -trimpath -ldflags="-s -w" -o "$1" ./cmd
