"""The embedded stack's credentials file, its private home, URL redaction, and the API key
`engram up` mints once per home (issue 13 item 7b)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from deploy.client import StackInfo
from deploy.credentials import CREDENTIALS_FILE, StackCredentials, private_home, redact_url
from deploy.embedded.nats import auth_config
from deploy.stack import _key_made_by_up

pytestmark = pytest.mark.unit


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_credentials_are_generated_once_private_and_url_safe(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = StackCredentials.load_or_create(home)
    assert mode(home) == 0o700 and mode(home / CREDENTIALS_FILE) == 0o600
    assert StackCredentials.load_or_create(home) == first  # kept
    assert len(first.nats_password) == 48 and first.nats_password != first.postgres_password
    assert all(c in "0123456789abcdef" for c in first.nats_password + first.postgres_password)
    assert json.loads((home / CREDENTIALS_FILE).read_text())["postgres_password"] == first.postgres_password
    assert StackCredentials.load_or_create(tmp_path / "other") != first


def test_stack_json_is_written_private_and_old_or_newer_fields_load(tmp_path: Path) -> None:
    info = StackInfo(nats_url="nats://u:p@h:1", database_url="postgresql://u:p@h/e", namespace="engram",
                     gateway_url="http://h:2", owner_user_id="u1", api_key_id="k1")
    info.save(tmp_path)
    assert mode(tmp_path / "stack.json") == 0o600
    assert StackInfo.load(tmp_path) == info
    data = json.loads((tmp_path / "stack.json").read_text())
    data.pop("api_key_id")
    data["from_a_newer_version"] = True
    (tmp_path / "stack.json").write_text(json.dumps(data))
    loaded = StackInfo.load(tmp_path)
    assert loaded is not None and loaded.api_key_id is None and loaded.owner_user_id == "u1"


def test_a_home_left_open_by_an_older_version_is_closed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "qdrant" / "segments").mkdir(parents=True)
    payload = home / "qdrant" / "segments" / "payload.bin"
    payload.write_text("owner secret")
    script = home / "run.sh"
    script.write_text("#!/bin/sh\n")
    for path, m in ((home, 0o755), (home / "qdrant", 0o755), (home / "qdrant" / "segments", 0o775),
                    (payload, 0o644), (script, 0o755)):
        os.chmod(path, m)
    outside = tmp_path / "outside.txt"
    outside.write_text("not Engram's")
    outside.chmod(0o644)
    (home / "link").symlink_to(outside)

    assert private_home(home) is True
    assert mode(home) == 0o700 and mode(home / "qdrant") == 0o700 and mode(home / "qdrant" / "segments") == 0o700
    assert mode(payload) == 0o600 and mode(script) == 0o700
    assert mode(outside) == 0o644  # a link is not followed
    assert private_home(home) is False  # nothing to do the second time
    assert private_home(tmp_path / "new") is False and mode(tmp_path / "new") == 0o700


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://engram:s3cret@127.0.0.1:4222", "nats://engram:***@127.0.0.1:4222"),
        ("postgresql://engram:s3cret@127.0.0.1:5432/engram", "postgresql://engram:***@127.0.0.1:5432/engram"),
        ("nats://a:x@n1:4222,nats://a:y@n2:4222", "nats://a:***@n1:4222,nats://a:***@n2:4222"),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("nats://token@127.0.0.1:4222", "nats://token@127.0.0.1:4222"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_the_nats_config_refuses_what_it_could_not_quote() -> None:
    assert 'password: "abc-123"' in auth_config("engram", "abc-123")
    for bad in ('a"b', "a b", "a\nb", "", "a}b"):
        with pytest.raises(ValueError):
            auth_config("engram", bad)


class FakeStack:
    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self.keys = keys

    def list_keys(self, user_id: str) -> list[dict[str, Any]]:
        return self.keys


def info(**kw: Any) -> StackInfo:
    return StackInfo(nats_url="", database_url="", namespace="engram", gateway_url="", **kw)


def test_the_first_start_mints_a_key() -> None:
    assert _key_made_by_up(FakeStack([]), None) is None  # type: ignore[arg-type]
    assert _key_made_by_up(FakeStack([]), info()) is None  # type: ignore[arg-type]


def test_later_starts_name_the_recorded_key_revoked_or_not() -> None:
    keys = [{"key_id": "k1", "name": "engram up 2026-01-01 10:00", "revoked_at": "2026-02-01T00:00:00Z"}]
    found = _key_made_by_up(FakeStack(keys), info(owner_user_id="u", api_key_id="k1"))  # type: ignore[arg-type]
    assert found is not None and found["key_id"] == "k1" and found["revoked_at"]


def test_a_home_of_an_older_version_finds_its_key_by_name_newest_active_first() -> None:
    keys = [
        {"key_id": "old", "name": "engram up 2026-01-01 10:00", "revoked_at": None, "created_at": "2026-01-01T10:00:00Z"},
        {"key_id": "new", "name": "engram up 2026-01-02 10:00", "revoked_at": None, "created_at": "2026-01-02T10:00:00Z"},
        {"key_id": "gone", "name": "engram up 2026-01-03 10:00", "revoked_at": "x", "created_at": "2026-01-03T10:00:00Z"},
        {"key_id": "cli", "name": "cli", "revoked_at": None, "created_at": "2026-01-04T10:00:00Z"},
    ]
    found = _key_made_by_up(FakeStack(keys), info(owner_user_id="u"))  # type: ignore[arg-type]
    assert found is not None and found["key_id"] == "new"
    assert _key_made_by_up(FakeStack(keys[3:]), info(owner_user_id="u")) is None  # type: ignore[arg-type]
