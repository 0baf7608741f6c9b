# Static binary on a distroless base: no shell, no package manager, runs as non-root.
FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/reverbgo ./cmd/reverbgo

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/reverbgo /usr/local/bin/reverbgo
COPY config.yaml /etc/reverbgo/config.yaml
EXPOSE 8080
# The image has no curl: the binary checks its own /up (same config and environment as
# start, so REVERB_SERVER_PORT etc. apply; https with the configured certificate when
# server.tls is set). Check the config before shipping: reverbgo config check --config FILE.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/reverbgo", "healthcheck", "--config", "/etc/reverbgo/config.yaml", "--timeout", "4s"]
ENTRYPOINT ["/usr/local/bin/reverbgo"]
CMD ["start", "--config", "/etc/reverbgo/config.yaml"]
