# syntax=docker/dockerfile:1
# The dshd server. Build: docker build -t dshd .   (docker-compose.yml runs it with PostgreSQL)
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/dshd ./cmd/server

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dshd /usr/local/bin/dshd
ENV DSHD_ADDR=:8080
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/dshd"]
CMD ["serve"]
