# syntax=docker/dockerfile:1
#
# One image for every Engram service; the command picks the service:
#   docker run engram serve gateway|auth|memory
# Configuration is ENGRAM_* environment variables (see docs/deployment.md).
#
# BASE_IMAGE: any Debian-like image with Python 3.11 and pip. `make compose-test` builds one from
# Debian's packages where no registry is reachable (deploy/images/build.py); Docker users keep the
# default.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

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

# In a container every HTTP server binds all interfaces: the gateway and auth's OAuth server.
ENV ENGRAM_HOME=/data \
    ENGRAM_GATEWAY_HOST=0.0.0.0 \
    ENGRAM_AUTH_HOST=0.0.0.0 \
    HOME=/home/engram
VOLUME /data
WORKDIR /data
USER 10001:10001

# The gateway's HTTP port (MCP at /mcp, REST at /v1, /healthz, /readyz).
EXPOSE 8080
# auth's OAuth 2.1 authorization server (/authorize, /token, /register, /revoke, /login, /consent,
# /signup, /.well-known/oauth-authorization-server). memory listens on nothing: it talks only to NATS.
EXPOSE 8081

ENTRYPOINT ["engram"]
CMD ["serve", "gateway"]
