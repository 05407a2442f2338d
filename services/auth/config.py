"""Auth service settings (environment variables with the ENGRAM_ prefix)."""

from __future__ import annotations

from pydantic import Field

from kit.config import CommonSettings


class AuthSettings(CommonSettings):
    auth_schema: str = "auth"
    auth_host: str = Field("127.0.0.1", description="bind address of the OAuth authorization server")
    auth_port: int = Field(8081, ge=0, le=65535)
    auth_public_url: str | None = Field(None, description="the issuer: externally visible URL; default http://host:port")
    # The MCP URL tokens are issued for (RFC 8707 audience). ENGRAM_RESOURCE_URL wins; otherwise it
    # is derived exactly as the gateway derives its own: ENGRAM_PUBLIC_URL (or gateway host:port) + /mcp.
    resource_url: str | None = None
    public_url: str | None = Field(None, description="the gateway's public base URL (shared with the gateway)")
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8080
    allow_signup: bool = Field(False, description="let people create an account on the sign-in page")

    @property
    def issuer(self) -> str:
        return (self.auth_public_url or f"http://{self.auth_host}:{self.auth_port}").rstrip("/")

    @property
    def resource(self) -> str:
        if self.resource_url:
            return self.resource_url.rstrip("/")
        return (self.public_url or f"http://{self.gateway_host}:{self.gateway_port}").rstrip("/") + "/mcp"

    # Production mode (kit/config.py, docs/security.md): the issuer and the token audience are
    # URLs clients use, so they must be https.
    def public_urls(self) -> list[tuple[str, str]]:
        audience = "ENGRAM_RESOURCE_URL" if self.resource_url else "ENGRAM_PUBLIC_URL (the token audience)"
        return [("ENGRAM_AUTH_PUBLIC_URL", self.issuer), (audience, self.resource)]
