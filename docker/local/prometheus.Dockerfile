# Prometheus from Debian's package, for machines that reach Debian's archive but no container
# registry: tests/test_containers.py runs docker/compose.yaml with it (PROMETHEUS_IMAGE).
# Users keep the official prom/prometheus image, the compose file's default.
#
#   podman build -f docker/local/prometheus.Dockerfile \
#     --build-arg BASE_IMAGE=localhost/dask-metrics-base:bookworm -t <name> docker/local
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# wget: the compose file's healthcheck, as in the official image (busybox's there).
# The versions are the base's Debian release's (a test image, rebuilt with its base).
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus wget \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus /etc/prometheus/rules \
 && chown 65534:65534 /prometheus
USER 65534:65534
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
