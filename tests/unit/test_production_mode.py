"""Issue 21 finding 2: ENGRAM_ENV=production refuses unsafe settings, and says which and how to fix them.

The rule is one pure function (kit.config.production_problems); each service calls
``settings.check_production()`` at start. The example secrets shipped in deploy/ are refused by
reading them from the files themselves, so a new example cannot slip past.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.config import KNOWN_DEFAULT_PASSWORDS, CommonSettings, production_problems
from services.auth.config import AuthSettings
from services.gateway.config import GatewaySettings
from services.memory.config import MemorySettings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SAFE_NATS = "nats://engram:9f8e7d6c5b4a39281706f5e4d3c2b1a0@nats:4222"
SAFE_DB = "postgresql://engram:Zq8u2N1xV7pLk3Rt9eWm@postgres:5432/engram"
HTTPS = "https://engram.example.com"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("ENGRAM_"):
            monkeypatch.delenv(name)


def safe(cls: type[CommonSettings], **overrides: object) -> CommonSettings:
    values: dict[str, object] = {"env": "production", "nats_url": SAFE_NATS, "database_url": SAFE_DB,
                                 "public_url": HTTPS, "auth_public_url": HTTPS}
    values.update(overrides)
    return cls(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [MemorySettings, AuthSettings, GatewaySettings])
def test_a_safe_production_configuration_passes(cls: type[CommonSettings]) -> None:
    settings = safe(cls)
    assert production_problems(settings) == []
    settings.check_production()


@pytest.mark.parametrize("cls", [MemorySettings, AuthSettings, GatewaySettings])
def test_development_checks_nothing(cls: type[CommonSettings]) -> None:
    settings = cls(env="development")  # type: ignore[call-arg]
    assert production_problems(settings) == []
    settings.check_production()


@pytest.mark.parametrize("url", ["nats://nats:4222", "nats://127.0.0.1:4222", f"{SAFE_NATS},nats://nats-2:4222"])
@pytest.mark.parametrize("cls", [MemorySettings, AuthSettings, GatewaySettings])
def test_an_unauthenticated_bus_is_refused(cls: type[CommonSettings], url: str) -> None:
    problems = production_problems(safe(cls, nats_url=url))
    assert len(problems) == 1
    assert problems[0].startswith("ENGRAM_NATS_URL") and "nats://USER:PASSWORD@HOST:4222" in problems[0]
    assert "9f8e7d6c" not in problems[0]  # a password is never repeated in a message


def test_a_token_in_the_nats_url_counts_as_credentials() -> None:
    assert production_problems(safe(MemorySettings, nats_url="nats://s3cr3t-token@nats:4222")) == []


@pytest.mark.parametrize("url", ["nats://engram:dev-only-change-me-nats@nats:4222",
                                 f"{SAFE_NATS},nats://engram:ChangeMe@nats-2:4222", "nats://secret@nats:4222"])
def test_a_well_known_nats_password_is_refused(url: str) -> None:
    problems = production_problems(safe(MemorySettings, nats_url=url))
    assert len(problems) == 1 and problems[0].startswith("ENGRAM_NATS_URL uses a well-known password")
    assert "change-me" not in problems[0].split("(")[0]  # the password itself is never repeated


def test_the_nats_and_qdrant_example_secrets_shipped_in_deploy_are_known_defaults() -> None:
    shipped: set[str] = set()
    for path in sorted((ROOT / "deploy" / "k8s").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Secret":
                for name, value in (doc.get("stringData") or {}).items():
                    if "NATS" in name or "QDRANT" in name or name == "api-key":
                        shipped.add(re.sub(r"^.*://[^:]+:([^@]+)@.*$", r"\1", str(value)).lower())
    assert {"dev-only-change-me-nats", "dev-only-change-me-qdrant"} <= shipped <= KNOWN_DEFAULT_PASSWORDS, shipped


def example_passwords() -> set[str]:
    """Every Postgres password written in deploy/compose and deploy/k8s."""
    found: set[str] = set()
    compose = (ROOT / "deploy/compose/docker-compose.yml").read_text()
    found |= set(re.findall(r"POSTGRES_PASSWORD:-([^}]+)\}", compose))
    for line in (ROOT / "deploy/compose/.env.example").read_text().splitlines():
        if line.startswith("POSTGRES_PASSWORD="):
            found.add(line.split("=", 1)[1].strip())
    for path in (ROOT / "deploy/k8s").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Secret":
                data = doc.get("stringData") or {}
                if "POSTGRES_PASSWORD" in data:
                    found.add(str(data["POSTGRES_PASSWORD"]))
                if "ENGRAM_DATABASE_URL" in data:
                    found.add(re.sub(r"^.*://[^:]+:([^@]+)@.*$", r"\1", str(data["ENGRAM_DATABASE_URL"])))
    return found


def test_the_example_secrets_shipped_in_deploy_are_known_defaults() -> None:
    examples = example_passwords()
    assert examples >= {"change-me", "engram-dev-password", "dev-only-change-me"}
    assert {p.lower() for p in examples} <= KNOWN_DEFAULT_PASSWORDS


@pytest.mark.parametrize("password", sorted(KNOWN_DEFAULT_PASSWORDS | {"PostGres", "ChangeMe"}))
@pytest.mark.parametrize("cls", [MemorySettings, AuthSettings])
def test_a_known_default_database_password_is_refused(cls: type[CommonSettings], password: str) -> None:
    problems = production_problems(safe(cls, database_url=f"postgresql://engram:{password}@postgres:5432/engram"))
    assert len(problems) == 1 and problems[0].startswith("ENGRAM_DATABASE_URL uses a well-known password")


@pytest.mark.parametrize("url", ["postgresql://engram@postgres:5432/engram", "postgresql://engram:@postgres/engram",
                                 "postgresql://postgres@127.0.0.1:5432/engram"])
@pytest.mark.parametrize("cls", [MemorySettings, AuthSettings])
def test_a_database_url_without_password_is_refused(cls: type[CommonSettings], url: str) -> None:
    problems = production_problems(safe(cls, database_url=url))
    assert len(problems) == 1 and problems[0].startswith("ENGRAM_DATABASE_URL has no password")


def test_database_passwords_are_read_decoded_and_from_the_query_too() -> None:
    assert production_problems(safe(MemorySettings, database_url="postgresql://engram:change%2Dme@pg/engram"))
    assert production_problems(safe(MemorySettings, database_url="postgresql://engram@pg/engram?password=postgres"))
    assert production_problems(safe(MemorySettings, database_url="postgresql://engram@pg/engram?password=Zq8u2N1xV7pL")) == []
    # a client certificate instead of a password
    assert production_problems(safe(MemorySettings, database_url="postgresql://engram@pg/engram?sslmode=verify-full&sslcert=/c.pem")) == []


def test_the_gateway_never_uses_the_database_so_its_password_is_not_checked() -> None:
    assert production_problems(safe(GatewaySettings, database_url="postgresql://postgres@127.0.0.1:5432/engram")) == []


@pytest.mark.parametrize(
    ("cls", "field", "setting"),
    [
        (GatewaySettings, "public_url", "ENGRAM_PUBLIC_URL"),
        (GatewaySettings, "auth_public_url", "ENGRAM_AUTH_PUBLIC_URL"),
        (AuthSettings, "auth_public_url", "ENGRAM_AUTH_PUBLIC_URL"),
        (AuthSettings, "public_url", "ENGRAM_PUBLIC_URL (the token audience)"),
        (AuthSettings, "resource_url", "ENGRAM_RESOURCE_URL"),
    ],
)
def test_plain_http_public_urls_are_refused(cls: type[CommonSettings], field: str, setting: str) -> None:
    problems = production_problems(safe(cls, **{field: "http://engram.example.com"}))
    assert len(problems) == 1 and problems[0].startswith(f"{setting} is 'http://engram.example.com"), problems


@pytest.mark.parametrize("cls", [GatewaySettings, AuthSettings])
def test_unset_public_urls_default_to_http_and_are_refused(cls: type[CommonSettings]) -> None:
    settings = cls(env="production", nats_url=SAFE_NATS, database_url=SAFE_DB)  # type: ignore[call-arg]
    problems = production_problems(settings)
    assert len(problems) == 2 and all("not https" in p for p in problems)


def test_every_problem_is_reported_at_once_and_the_service_exits() -> None:
    settings = GatewaySettings(env="production")  # type: ignore[call-arg]  # every default: bus, URLs
    with pytest.raises(SystemExit) as excinfo:
        settings.check_production()
    message = str(excinfo.value.code)
    assert message.startswith("engram gateway: refusing to start with ENGRAM_ENV=production:")
    for setting in ("ENGRAM_NATS_URL", "ENGRAM_PUBLIC_URL", "ENGRAM_AUTH_PUBLIC_URL"):
        assert f"  - {setting}" in message


def test_an_unknown_environment_is_refused() -> None:
    with pytest.raises(SystemExit, match="ENGRAM_ENV='prod' is neither"):
        MemorySettings(env="prod").check_production()  # type: ignore[call-arg]


@pytest.mark.parametrize("service", ["memory", "auth", "gateway"])
def test_each_service_refuses_to_start_unsafe_in_production(service: str, tmp_path: Path) -> None:
    """`engram serve <service>` exits at once, before connecting to anything, naming the settings."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENGRAM_HOME": str(tmp_path), "ENGRAM_ENV": "production",
           "ENGRAM_NATS_URL": "nats://127.0.0.1:1", "ENGRAM_DATABASE_URL": "postgresql://engram:change-me@127.0.0.1:1/engram"}
    result = subprocess.run([sys.executable, "-m", "deploy", "serve", service], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"engram {service}: refusing to start with ENGRAM_ENV=production" in result.stderr
    assert "ENGRAM_NATS_URL" in result.stderr
    assert ("ENGRAM_DATABASE_URL uses a well-known password" in result.stderr) == (service != "gateway")
