"""Gateway settings (environment variables with the ENGRAM_ prefix)."""

from __future__ import annotations

from urllib.parse import urlparse

from pydantic import Field

from kit.config import CommonSettings


class GatewaySettings(CommonSettings):
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8080
    public_url: str | None = Field(None, description="externally visible base URL; default http://host:port")
    allowed_hosts: list[str] = Field(default_factory=list, description="extra Host header values accepted")
    command_timeout_s: float = 15.0
    token_cache_ttl_s: float = 30.0

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.gateway_host}:{self.gateway_port}").rstrip("/")

    @property
    def mcp_url(self) -> str:
        return self.base_url + "/mcp"

    def host_allowlist(self) -> list[str]:
        netloc = urlparse(self.base_url).netloc
        hosts = {netloc, f"127.0.0.1:{self.gateway_port}", f"localhost:{self.gateway_port}", "127.0.0.1:*", "localhost:*"}
        return sorted(hosts | set(self.allowed_hosts))
