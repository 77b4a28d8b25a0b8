# syntax=docker/dockerfile:1
# transcoderd: build with the official Swift image, run on Debian slim with only the runtime libraries.
# Both images are build arguments so the build can point at local copies (see scripts/container-test).
ARG SWIFT_IMAGE=swift:6.3-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${SWIFT_IMAGE} AS builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        pkg-config libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev libavfilter-dev \
        libx264-dev libsqlite3-dev libssl-dev libseccomp-dev libpq-dev libcurl4-openssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The manifest names every target (tests and benches too), so the whole tree minus .dockerignore is copied.
COPY . .
RUN swift build -c release --product transcoderd --static-swift-stdlib \
    && install -D -m 0755 "$(swift build -c release --show-bin-path)/transcoderd" /out/transcoderd

FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libavformat59 libavcodec59 libavutil57 libswscale6 libswresample4 libavfilter8 libx264-164 libsqlite3-0 libssl3 \
        libseccomp2 libpq5 libcurl4 \
        ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 transcoderd \
    && useradd --system --uid 10001 --gid transcoderd --home-dir /data --shell /usr/sbin/nologin transcoderd \
    && mkdir -p /data && chown transcoderd:transcoderd /data
COPY --from=builder /out/transcoderd /usr/local/bin/transcoderd
ENV TRANSCODER_HOST=0.0.0.0 \
    TRANSCODER_PORT=8080 \
    TRANSCODER_DATA=/data
USER 10001:10001
WORKDIR /data
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 CMD ["/usr/local/bin/transcoderd", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/transcoderd"]
CMD ["serve"]
