"""The embedded stack's secrets and its private data folder.

`engram up` starts NATS and Postgres with credentials it generates once per ``ENGRAM_HOME`` and
keeps in ``ENGRAM_HOME/credentials.json`` (mode 0600): whoever can read the folder - its owner - can
run the CLI (`engram keys create`, `engram users ...`, `engram status`, `engram replay`); any other
local user or process that merely reaches the ports is refused. The folder itself is kept at mode
0700, and every file Engram writes in it is 0600 (see docs/security.md).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["CREDENTIALS_FILE", "StackCredentials", "private_home", "redact_url", "write_private"]

CREDENTIALS_FILE = "credentials.json"
NATS_USER = "engram"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte, replacing it atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class StackCredentials:
    """The embedded NATS user and password, and the embedded Postgres superuser's password."""

    nats_user: str
    nats_password: str
    postgres_password: str

    @classmethod
    def generate(cls) -> StackCredentials:
        # hex: nothing to quote in a URL, the NATS config or SQL; 192 bits each
        return cls(NATS_USER, secrets.token_hex(24), secrets.token_hex(24))

    @classmethod
    def load(cls, home: Path) -> StackCredentials | None:
        try:
            data = json.loads((home / CREDENTIALS_FILE).read_text())
        except FileNotFoundError:
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: str(v) for k, v in data.items() if k in names})

    @classmethod
    def load_or_create(cls, home: Path) -> StackCredentials:
        """The home's credentials; generated (and saved, 0600) the first time."""
        found = cls.load(home)
        if found is not None:
            return found
        created = cls.generate()
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(home / CREDENTIALS_FILE, json.dumps(asdict(created), indent=2) + "\n")
        return created


def private_home(home: Path) -> bool:
    """Create ``home`` with mode 0700, or make an existing one private; True if it was not.

    A home made by an older Engram (0755, files 0644: the vector store holds memory payloads) is
    closed in place: the folder becomes 0700 and Engram's files in it lose every group and other
    permission bit. Only files owned by this user (or, as root, the embedded Postgres account) are
    changed, and nothing is followed outside the folder."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(home.stat().st_mode)
    if not mode & 0o077:
        return False
    os.chmod(home, 0o700)
    for folder, dirs, files in os.walk(home):
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode) or not stat.S_IMODE(st.st_mode) & 0o077:
                continue
            if st.st_uid != os.geteuid() and os.geteuid() != 0:
                continue
            try:
                os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
            except OSError:
                pass
    return True


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    parts = []
    for one in url.split(","):
        try:
            split = urlsplit(one.strip())
        except ValueError:
            parts.append("<unparsable URL>")
            continue
        if split.password is None:
            parts.append(one.strip())
            continue
        host = split.netloc.rpartition("@")[2]
        user = split.username or ""
        parts.append(urlunsplit(split._replace(netloc=f"{user}:***@{host}")))
    return ",".join(parts)
