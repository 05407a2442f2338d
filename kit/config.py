"""Settings shared by every service: where the bus, the database and the data folder are.

Each service extends ``CommonSettings`` with its own prefix-free fields; every variable is read
from the environment with the ``ENGRAM_`` prefix. Defaults run the embedded stack.

Production mode (``ENGRAM_ENV=production``) is one rule, :func:`production_problems`, which every
service applies at start through :meth:`CommonSettings.check_production`: it refuses an
unauthenticated bus, a missing or well-known database password and plain-http public URLs, and says
which setting is wrong and how to fix it (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.subjects import DEFAULT_NAMESPACE, Names

T = TypeVar("T")


ENVIRONMENTS = ("development", "production")

KNOWN_DEFAULT_PASSWORDS = frozenset({
    "postgres", "password", "engram", "changeme", "change-me", "secret", "admin", "root", "123456",
    # the examples shipped in deploy/compose (.env.example, the compose fallback) and deploy/k8s
    "engram-dev-password", "dev-only-change-me",
    "dev-only-change-me-nats", "dev-only-change-me-routes", "dev-only-change-me-qdrant",
})
"""Passwords production mode refuses in the database and NATS URLs (compared case-insensitively)."""


def default_home() -> Path:
    return Path(os.environ.get("ENGRAM_HOME") or Path.home() / ".engram")


class CommonSettings(BaseSettings):
    """Connection settings every service needs."""

    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore", env_ignore_empty=True)

    env: str = Field("development", description="development | production")
    home: Path = Field(default_factory=default_home, description="data folder")
    nats_url: str = "nats://127.0.0.1:4222"
    database_url: str = "postgresql://postgres@127.0.0.1:5432/engram"
    namespace: str = DEFAULT_NAMESPACE
    stream_replicas: int = Field(1, ge=1, le=5)
    log_level: str = "INFO"
    stall_warning_ms: float = Field(
        250, ge=0, description="log a warning when the event loop was blocked this long (0: off)"
    )
    metrics_host: str = Field("127.0.0.1", description="bind address of the /metrics port (kit/metrics.py)")

    uses_database: ClassVar[bool] = True
    """Whether the service connects to Postgres (the gateway does not: its password is not checked)."""

    @property
    def names(self) -> Names:
        return Names(self.namespace)

    def public_urls(self) -> list[tuple[str, str]]:
        """(setting, value) of the URLs browsers and clients use, which production requires to be
        https. None here; the gateway and auth name theirs."""
        return []

    def check_production(self) -> None:
        """Refuse to start (SystemExit naming every wrong setting) when ENGRAM_ENV is neither
        development nor production, or is production and :func:`production_problems` finds any."""
        service = type(self).__name__.removesuffix("Settings").lower() or "engram"
        if self.env not in ENVIRONMENTS:
            raise SystemExit(
                f"engram {service}: ENGRAM_ENV={self.env!r} is neither 'development' nor 'production'; "
                "set one of them (production enforces the checks in docs/security.md)."
            )
        problems = production_problems(self)
        if problems:
            raise SystemExit(
                f"engram {service}: refusing to start with ENGRAM_ENV=production:\n"
                + "\n".join(f"  - {p}" for p in problems)
                + "\nFix these settings (see docs/security.md, \"Production mode\"), or run with "
                "ENGRAM_ENV=development on a machine and network you trust."
            )


def _nats_url_has_credentials(url: str) -> bool:
    """user:password@ or a token (token@) in a NATS URL."""
    try:
        return bool(urlsplit(url).username)
    except ValueError:
        return False


def _nats_password(url: str) -> str | None:
    """The password (or token) a nats:// URL carries, decoded; None if none."""
    try:
        split = urlsplit(url)
    except ValueError:
        return None
    secret = split.password if split.password is not None else split.username
    return unquote(secret) if secret else None


def _database_password(url: str) -> str | None:
    """The password a postgresql:// URL carries (userinfo or ``?password=``), decoded; None if none."""
    try:
        split = urlsplit(url)
    except ValueError:
        return None
    if split.password is not None:
        return unquote(split.password)
    values = parse_qs(split.query).get("password")
    return values[-1] if values else None


def production_problems(settings: CommonSettings) -> list[str]:
    """What production mode refuses in ``settings``, one sentence per wrong setting (what is
    wrong, why it matters, how to fix it); empty when nothing is wrong or ENGRAM_ENV is not
    production. Pure: reads nothing but ``settings``."""
    if settings.env != "production":
        return []
    problems: list[str] = []
    urls = [u.strip() for u in settings.nats_url.split(",") if u.strip()]
    bare = [u for u in urls if not _nats_url_has_credentials(u)]
    if bare or not urls:
        problems.append(
            f"ENGRAM_NATS_URL ({', '.join(bare) or 'empty'}) has no credentials: whoever reaches NATS "
            "can create API keys and read every memory. Turn on authentication in NATS (an "
            "`authorization { user, password }` block or accounts) and put them in every URL: "
            "nats://USER:PASSWORD@HOST:4222."
        )
    elif any((_nats_password(u) or "").lower() in KNOWN_DEFAULT_PASSWORDS for u in urls):
        problems.append(
            "ENGRAM_NATS_URL uses a well-known password (a default or an example shipped with Engram's "
            "compose/Kubernetes files): set a strong one, e.g. `openssl rand -hex 24`, in NATS and in every URL "
            "(NATS_PASSWORD in Compose's .env; the engram-nats Secret in Kubernetes)."
        )
    if settings.uses_database:
        password = _database_password(settings.database_url)
        try:
            client_cert = "sslcert" in parse_qs(urlsplit(settings.database_url).query)
        except ValueError:
            client_cert = False
        if not password and not client_cert:
            problems.append(
                "ENGRAM_DATABASE_URL has no password: give the database user a strong password and "
                "put it in the URL: postgresql://USER:PASSWORD@HOST:5432/engram (URL-encoded)."
            )
        elif password and password.lower() in KNOWN_DEFAULT_PASSWORDS:
            problems.append(
                "ENGRAM_DATABASE_URL uses a well-known password (a default or an example shipped with "
                "Engram's compose/Kubernetes files): set a strong one, e.g. `openssl rand -hex 24`, on "
                "the database user and in the URL (POSTGRES_PASSWORD in Compose's .env; the engram-db "
                "Secret in Kubernetes)."
            )
    for name, url in settings.public_urls():
        try:
            scheme = urlsplit(url).scheme
        except ValueError:
            scheme = ""
        if scheme != "https":
            problems.append(
                f"{name} is {url!r}, not https: OAuth tokens, API keys and sign-in passwords would "
                f"cross the network in clear. Serve Engram behind TLS and set {name} to its https URL "
                "(e.g. https://engram.example.com)."
            )
    return problems


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def run_service(main: Coroutine[Any, Any, T]) -> T:
    """Run a service's main coroutine on uvloop where it is installed (not on Windows): the event
    loop, and so asyncpg, nats-py and uvicorn, cost less CPU per message; else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
