# Builds the manager (and the history, /history) as static binaries on a distroless, non-root base. `make image` builds the
# same image without Docker: the same build script, and the same files laid out by
# hack/images/manager-rootfs.sh (a test compares its user and entrypoint with these lines).
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Download the modules first, so the layer is cached while only the sources change.
COPY go.mod go.sum ./
RUN go mod download

COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
COPY hack/manager-build.sh hack/

RUN GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} hack/manager-build.sh history . ./cmd/history
RUN GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} hack/manager-build.sh manager

FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager .
COPY --from=builder /workspace/history .
USER 65532:65532

ENTRYPOINT ["/manager"]
