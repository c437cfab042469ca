# syntax=docker/dockerfile:1
#
# nodeagent image: a static Go binary on distroless.
#   docker build --build-arg VERSION=v0.1.0 -t nodeagent:v0.1.0 .
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...

ARG GO_VERSION=1.26

# --- build ----------------------------------------------------------------
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=v0.0.0-dev
WORKDIR /src

# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .
# Static (no cgo, so no libc needed at run time), reproducible paths, no symbol
# table; the version is stamped into pkg/version. grpcnotrace: see test/framework.AgentBuildTags.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -tags grpcnotrace \
      -ldflags "-s -w -X github.com/nodeagent/nodeagent/pkg/version.gitVersion=${VERSION}" \
      -o /out/nodeagent ./cmd/nodeagent

# --- run ------------------------------------------------------------------
# distroless/static: CA certificates, tzdata and /etc/passwd, no shell, no libc.
# Not the :nonroot variant: the agent must run as root (uid 0) to connect to
# the CRI socket, /run/containerd/containerd.sock, which containerd creates
# root:root 0660. Root here is uid 0 without capabilities: the DaemonSet drops
# them all, forbids privilege escalation and mounts the root filesystem
# read-only (deploy/kubernetes/daemonset.yaml).
FROM gcr.io/distroless/static-debian12:latest
COPY --from=builder /out/nodeagent /usr/local/bin/nodeagent
USER 0:0
ENTRYPOINT ["/usr/local/bin/nodeagent"]
