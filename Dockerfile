# policyd as a container image: a static binary on a distroless base, running as
# a non-root user. Build: docker build -t policyd .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/policyd ./cmd/policyd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/policyd /usr/local/bin/policyd
EXPOSE 7433
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/policyd"]
CMD ["serve", "--listen", "0.0.0.0:7433", "--log-format", "json"]
