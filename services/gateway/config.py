"""Gateway settings (environment variables with the ENGRAM_ prefix)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from kit.config import CommonSettings
from kit.edge import host_allowlist


class GatewaySettings(CommonSettings):
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8080
    gateway_metrics_port: int = Field(0, ge=0, le=65535, description="this replica's own /metrics port (0: off)")
    public_url: str | None = Field(None, description="externally visible base URL; default http://host:port")
    allowed_hosts: list[str] = Field(default_factory=list, description="extra Host header values accepted")
    command_timeout_s: float = 15.0
    token_cache_ttl_s: float = 30.0
    rate_limit_per_minute: float = Field(600.0, gt=0, description="requests per minute per API key / OAuth grant")
    rate_limit_burst: int = Field(60, ge=1, description="requests allowed at once before the rate applies")
    anonymous_rate_limit_per_minute: float = Field(120.0, gt=0, description="unauthenticated requests per minute per address")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="largest request body accepted (413 above)")
    rate_limit_bytes_per_token: int = Field(
        10_000, ge=1, description="a request costs one rate-limit token plus one per started N bytes of body beyond the first N"
    )
    trusted_proxies: str = Field(
        "", description="comma-separated addresses/CIDRs of reverse proxies whose X-Forwarded-For/-Proto is believed; "
        "empty: the socket peer is the client"
    )
    header_timeout_s: float = Field(10.0, gt=0, description="a request's headers must arrive within this (else 408, closed)")
    keep_alive_timeout_s: int = Field(
        65, ge=1, description="an idle keep-alive connection is closed after this; keep it above the clients' and any "
        "proxy's own idle expiry (httpx 5 s, Node 4 s, AWS ALB 60 s), or a request sent as the server closes is lost"
    )
    body_idle_timeout_s: float = Field(
        30.0, gt=0, description="a request body may pause at most this long between chunks (else the connection is closed)"
    )
    auth_public_url: str = Field("http://127.0.0.1:8081", description="the OAuth authorization server (issuer)")
    auth_metadata_url: str | None = Field(
        None, description="where the gateway fetches the RFC 8414 metadata it re-serves; default from auth_public_url"
    )

    @property
    def issuer(self) -> str:
        return self.auth_public_url.rstrip("/")

    @property
    def authorization_server_metadata_url(self) -> str:
        return self.auth_metadata_url or self.issuer + "/.well-known/oauth-authorization-server"

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.gateway_host}:{self.gateway_port}").rstrip("/")

    @property
    def mcp_url(self) -> str:
        return self.base_url + "/mcp"

    def host_allowlist(self) -> list[str]:
        return host_allowlist(self.base_url, self.gateway_port, self.allowed_hosts)

    # Production mode (kit/config.py, docs/security.md): the gateway never connects to Postgres,
    # and both URLs it gives clients must be https.
    uses_database: ClassVar[bool] = False

    def public_urls(self) -> list[tuple[str, str]]:
        return [("ENGRAM_PUBLIC_URL", self.base_url), ("ENGRAM_AUTH_PUBLIC_URL", self.issuer)]
