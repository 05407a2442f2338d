"""Auth service settings (environment variables with the ENGRAM_ prefix)."""

from __future__ import annotations

from pydantic import Field, field_validator

from kit.config import CommonSettings
from kit.edge import TrustedProxies, host_allowlist
from services.auth.domain import oauth as rules


class AuthSettings(CommonSettings):
    auth_schema: str = "auth"
    auth_host: str = Field("127.0.0.1", description="bind address of the OAuth authorization server")
    auth_port: int = Field(8081, ge=0, le=65535)
    auth_metrics_port: int = Field(0, ge=0, le=65535, description="/metrics port (0: off)")
    auth_public_url: str | None = Field(None, description="the issuer: externally visible URL; default http://host:port")
    # The MCP URL tokens are issued for (RFC 8707 audience). ENGRAM_RESOURCE_URL wins; otherwise it
    # is derived exactly as the gateway derives its own: ENGRAM_PUBLIC_URL (or gateway host:port) + /mcp.
    resource_url: str | None = None
    public_url: str | None = Field(None, description="the gateway's public base URL (shared with the gateway)")
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8080
    allow_signup: bool = Field(False, description="let people create an account on the sign-in page")
    allowed_hosts: list[str] = Field(default_factory=list, description="extra Host header values accepted")

    # Abuse resistance of the authorization server (issue 21).
    trusted_proxies: str = Field(
        "", description="comma-separated addresses/networks of reverse proxies whose X-Forwarded-For is believed; "
        "empty: the socket peer is the client",
    )
    auth_rate_limit_per_minute: float = Field(300, gt=0, description="requests per client address per minute, every endpoint")
    auth_rate_limit_burst: int = Field(300, ge=1, description="requests one address may make at once")
    auth_register_per_hour: float = Field(30, gt=0, description="client registrations per address per hour")
    auth_register_burst: int = Field(30, ge=1, description="client registrations one address may make at once")
    oauth_max_redirect_uris: int = Field(10, ge=1, le=100, description="redirect URIs one client may register")
    oauth_max_uri_chars: int = Field(2000, ge=100, le=8192, description="length of each registered URI")
    oauth_max_text_chars: int = Field(200, ge=20, le=2000, description="length of client_name and other text fields")
    oauth_app_schemes: str = Field(
        "cursor", description="private-use redirect schemes without a dot still accepted (comma-separated)"
    )
    auth_purge_interval_s: float = Field(600, gt=0, description="how often expired OAuth rows are deleted")
    auth_unused_client_days: float = Field(7, gt=0, description="delete clients registered this long ago that never got a grant")
    auth_header_timeout_s: float = Field(10, gt=0, description="a connection must send its request headers within this")
    auth_keep_alive_s: int = Field(
        65, ge=1, description="idle keep-alive connections are closed after this (above clients' own expiry, see the gateway's)"
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, value: str) -> str:
        TrustedProxies(value)  # a bad entry stops the service at start, naming it
        return value

    @property
    def trusted_proxy_networks(self) -> TrustedProxies:
        return TrustedProxies(self.trusted_proxies)

    @property
    def metadata_limits(self) -> rules.MetadataLimits:
        return rules.MetadataLimits(redirect_uris=self.oauth_max_redirect_uris, uri_chars=self.oauth_max_uri_chars,
                                    text_chars=self.oauth_max_text_chars)

    @property
    def app_schemes(self) -> tuple[str, ...]:
        return tuple(s.strip().lower() for s in self.oauth_app_schemes.split(",") if s.strip())

    @property
    def issuer(self) -> str:
        return (self.auth_public_url or f"http://{self.auth_host}:{self.auth_port}").rstrip("/")

    def host_allowlist(self) -> list[str]:
        """The Host values the authorization server answers (the gateway's rule: kit.edge.host_allowlist)."""
        return host_allowlist(self.issuer, self.auth_port, self.allowed_hosts)

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
