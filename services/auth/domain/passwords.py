"""Password hashing with scrypt (memory-hard, in the standard library). Pure; no I/O.

Stored form: ``scrypt$<log2 n>$<r>$<p>$<salt b64url>$<hash b64url>`` so parameters can be raised
later without invalidating existing hashes (``needs_rehash`` says when to re-hash on sign-in).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

LOG2_N = 15  # n = 32768; with r = 8 each hash takes 32 MiB of memory
R = 8
P = 1
SALT_BYTES = 16
HASH_BYTES = 32
MIN_PASSWORD_CHARS = 10
MAX_PASSWORD_CHARS = 1024
_FORMAT = re.compile(r"^scrypt\$(\d{1,2})\$(\d{1,2})\$(\d{1,2})\$([A-Za-z0-9_-]+)\$([A-Za-z0-9_-]+)$")


class WeakPassword(ValueError):
    """The password breaks the policy; the message says how."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=HASH_BYTES, maxmem=256 * n * r * p + (1 << 20)
    )


def check_policy(password: str) -> None:
    if len(password) < MIN_PASSWORD_CHARS:
        raise WeakPassword(f"a password needs at least {MIN_PASSWORD_CHARS} characters")
    if len(password) > MAX_PASSWORD_CHARS:
        raise WeakPassword(f"a password has at most {MAX_PASSWORD_CHARS} characters")


def hash_password(password: str) -> str:
    check_policy(password)
    salt = secrets.token_bytes(SALT_BYTES)
    return f"scrypt${LOG2_N}${R}${P}${_b64(salt)}${_b64(_scrypt(password, salt, LOG2_N, R, P))}"


def is_valid_hash(stored: str) -> bool:
    m = _FORMAT.match(stored)
    return bool(m) and 10 <= int(m.group(1)) <= 20 and 1 <= int(m.group(2)) <= 32 and 1 <= int(m.group(3)) <= 16


def verify_password(password: str, stored: str | None) -> bool:
    """Constant-time check. With no stored hash a dummy hash is computed, so timing does not tell
    whether the user exists."""
    if len(password) > MAX_PASSWORD_CHARS:
        return False
    if stored is None or not is_valid_hash(stored):
        _scrypt(password, b"\0" * SALT_BYTES, LOG2_N, R, P)
        return False
    m = _FORMAT.match(stored)
    assert m is not None
    log2_n, r, p = int(m.group(1)), int(m.group(2)), int(m.group(3))
    expected = _unb64(m.group(5))
    return hmac.compare_digest(_scrypt(password, _unb64(m.group(4)), log2_n, r, p), expected)


def needs_rehash(stored: str) -> bool:
    m = _FORMAT.match(stored)
    return not m or (int(m.group(1)), int(m.group(2)), int(m.group(3))) < (LOG2_N, R, P)
