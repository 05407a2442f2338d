"""Keyset page cursors (``next_cursor`` → ``cursor``), and how much one answer carries: pure rules.

A cursor carries the listing's order and the sort keys of the page's last row, as URL-safe base64
of JSON without padding: opaque to a client, checked when it comes back (a cursor another listing
or another order gave is refused with 409 naming ``cursor``, never read as something else).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel

from contracts.memory import LISTED_CONTENT_CHARS
from services.memory.domain.errors import Conflict

#: how each key is read back, by its type when written
Reader = Callable[[Any], Any]


def encode(order: str, keys: Sequence[Any]) -> str:
    """The cursor after a row whose sort keys (in ``order``) are ``keys``."""
    plain = [k.isoformat() if isinstance(k, date) else str(k) if isinstance(k, UUID) else k for k in keys]
    return base64.urlsafe_b64encode(json.dumps([order, *plain], separators=(",", ":")).encode()).decode().rstrip("=")


def decode(cursor: str, orders: Mapping[str, tuple[Reader, ...]], order: str) -> list[Any]:
    """The sort keys ``cursor`` carries; refused (409, naming cursor) unless one of ``orders`` (the
    listing's own) gave it, in ``order``."""
    try:
        given = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(given, list) or not given or given[0] not in orders:
            raise ValueError
        readers = orders[given[0]]
        if len(given) != len(readers) + 1:
            raise ValueError
        keys = [read(k) for read, k in zip(readers, given[1:], strict=True)]
    except (ValueError, TypeError, UnicodeDecodeError):
        raise Conflict("cursor is not one this listing gave: pass next_cursor of the page before as it is",
                       "cursor") from None
    if given[0] != order:
        raise Conflict(f"cursor was given for sort={given[0]}, not sort={order}: keep the sort while paging, or "
                       "start again without a cursor", "cursor")
    return keys


#: A list answer carries about this many bytes of items at most (the bus carries 1 MB a message).
LIST_BYTES = 600_000
S = TypeVar("S")
V = TypeVar("V", bound=BaseModel)


def fitting(states: Sequence[S], view: Callable[[S], V], limit: int = LIST_BYTES) -> tuple[list[V], bool]:
    """The views of the first ``states`` that one answer carries (their JSON under ``limit`` bytes, and
    at least one: a log may hold ~1 MB, a result or a task 1,000 ids, a shared memory 4,000 characters
    of up to 4 bytes each), and whether any was left out."""
    views: list[V] = []
    size = 0
    for state in states:
        shown = view(state)
        size += len(shown.model_dump_json().encode())
        if views and size > limit:
            return views, True
        views.append(shown)
    return views, False


#: The lengths long memories are cut to in an answer that holds many (recall, profile), longest
#: first: the first whose answer fits :data:`LIST_BYTES` is used.
CUT_STEPS = (LISTED_CONTENT_CHARS, 1_000, 500, 200)
#: what a memory adds to an answer beside its content (ids, times, provenance, relations), at most
_VIEW_BYTES = 1_500
A = TypeVar("A", bound=BaseModel)


def shortened(answer: A, contents: Sequence[str], make: Callable[[int], A], limit: int = LIST_BYTES) -> A:
    """``answer``, which holds memories whose ``contents`` (each cut at LISTED_CONTENT_CHARS) are
    these, when it surely fits ``limit`` bytes (unmeasured: the usual case); else ``make(chars)``,
    each long memory cut to ``chars``, at the first of :data:`CUT_STEPS` whose answer fits (100 hits
    and a profile of long memories in four-byte characters were over 1 MB)."""
    if sum(len(c.encode()) + _VIEW_BYTES for c in contents) <= limit:
        return answer
    for chars in CUT_STEPS:
        answer = make(chars)
        if len(answer.model_dump_json().encode()) <= limit:
            break
    return answer

