# Static binary on a distroless base: no shell, no package manager, runs as non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/reverbgo ./cmd/reverbgo

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/reverbgo /usr/local/bin/reverbgo
COPY config.yaml /etc/reverbgo/config.yaml
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/reverbgo"]
CMD ["start", "--config", "/etc/reverbgo/config.yaml"]
