# syntax=docker/dockerfile:1
#
# idemgate image: a static binary on distroless, running as nonroot (65532).
#
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t idemgate .
#   docker run -v "$PWD/examples:/etc/idemgate:ro" -p 8080:8080 -p 9090:9090 idemgate
#
# The config is read from /etc/idemgate/idemgate.yaml: mount a directory
# there (in Kubernetes, a ConfigMap volume without subPath, so that edits reach
# the file). Linted offline by deploy/test (BuildKit's parser and linter).

# GO_VERSION is the Go release of the build stage (go.mod asks for 1.26).
ARG GO_VERSION=1.26

# build compiles a static binary on the build platform for the target one.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
# VERSION is what `idemgate version` prints.
ARG VERSION=dev
# REVISION is the source commit: idemgate_build_info's revision label.
ARG REVISION=
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/idemgate ./cmd/idemgate

# Releases pin this by digest (static-debian13:nonroot@sha256:...). The
# static image has CA certificates, tzdata, /tmp and the nonroot user, and
# no shell: ENTRYPOINT, CMD and HEALTHCHECK are in exec form.
FROM gcr.io/distroless/static-debian13:nonroot
# OCI image annotations (github.com/opencontainers/image-spec, annotations.md):
# VERSION as above, REVISION the source commit, CREATED the build time (RFC 3339).
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="idemgate" \
      org.opencontainers.image.description="Idempotency reverse proxy: makes an unmodified HTTP API's writes safe to retry" \
      org.opencontainers.image.url="https://github.com/idemgate/idemgate" \
      org.opencontainers.image.source="https://github.com/idemgate/idemgate" \
      org.opencontainers.image.documentation="https://github.com/idemgate/idemgate/blob/main/README.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="idemgate" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="gcr.io/distroless/static-debian13:nonroot"
COPY --from=build /out/idemgate /idemgate
USER 65532:65532
# public listener, admin listener (/healthz, /readyz, /metrics)
EXPOSE 8080 9090
# Docker only (Kubernetes ignores HEALTHCHECK and uses the chart's probes).
# It probes :9090/readyz; if admin_listen is moved, set IDEMGATE_ADMIN_LISTEN,
# which idemgate itself reads too.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/idemgate", "healthcheck"]
ENTRYPOINT ["/idemgate"]
CMD ["--config=/etc/idemgate/idemgate.yaml"]
