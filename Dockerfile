# syntax=docker/dockerfile:1
#
# One image for every Engram service; the command picks the service:
#   docker run engram serve gateway|auth|memory
# Configuration is ENGRAM_* environment variables (see docs/deployment.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# A fixed numeric uid/gid, so Kubernetes can verify runAsNonRoot without a user database.
RUN groupadd --system --gid 10001 engram \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/engram --create-home \
      --shell /usr/sbin/nologin engram \
 && mkdir -p /data \
 && chown 10001:10001 /data

WORKDIR /src

# Dependencies first, in their own layer: only pyproject.toml decides it, so editing the source
# does not reinstall onnxruntime & co. Empty package folders let the project itself build.
COPY pyproject.toml ./
RUN mkdir -p contracts kit services deploy \
 && pip install --no-cache-dir . \
 && pip uninstall -y engram \
 && rm -rf contracts kit services deploy build *.egg-info

# Then the source, installed without touching the dependencies again.
COPY contracts/ contracts/
COPY kit/ kit/
COPY services/ services/
COPY deploy/ deploy/
RUN pip install --no-cache-dir --no-deps . \
 && cd / && rm -rf /src

ENV ENGRAM_HOME=/data \
    ENGRAM_GATEWAY_HOST=0.0.0.0 \
    HOME=/home/engram
VOLUME /data
WORKDIR /data
USER 10001:10001

# The gateway's HTTP port (MCP at /mcp, REST at /v1, /healthz, /readyz). auth and memory listen on
# nothing: they talk only to NATS.
EXPOSE 8080

ENTRYPOINT ["engram"]
CMD ["serve", "gateway"]
