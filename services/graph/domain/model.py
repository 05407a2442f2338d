"""The graph's rules, without I/O: node identities and rows from event states, key families, node
states at query time, and the page cursor.

A memory is a node (its current version); a daily log is a node ``log:<id>``; a project is a node
``project:<name>``. The order of a page is the node's ``seq``: a number the read model gives a node
when it first projects it (never changed afterwards), so a cursor — the last ``seq`` a client saw —
names a fixed place in an order that only grows at its end.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from contracts.daily_logs import DailyLogState, ProcessingStatus
from contracts.errors import ServiceError
from contracts.graph import GraphNode, GraphPageQuery, NodeState, NodeType
from contracts.memory import MemoryState, MemoryStatus

#: a node is "new" this long after it was created, "expiring" when it has at most this left
NEW_WITHIN = timedelta(hours=24)
EXPIRING_WITHIN = timedelta(days=7)
LABEL_CHARS = 120
CURSOR_VERSION = 1
#: a cursor's place is a node's ``seq`` (a Postgres bigint): anything larger was never issued
MAX_CURSOR_SEQ = 2**63 - 1

#: keys the extractor derives from a statement (``profile.went_rome_once_3f2a9c``, ``profile.s_3f2a9c``):
#: they address one statement, not a slot, so they belong to no family
_STATEMENT_KEY = re.compile(r"^[a-z]+\.(?:.*_)?[0-9a-f]{6}$")


def memory_node_id(memory_id: UUID | str) -> str:
    return str(memory_id)


def log_node_id(log_id: UUID | str) -> str:
    return f"log:{log_id}"


def project_node_id(project: str) -> str:
    return f"project:{project}"


def key_family(memory_key: str | None) -> str | None:
    """The family a memory key belongs to: its namespace and the first word of its topic
    (``preference.pet_dog`` and ``preference.pet_cat`` → ``preference.pet``; ``profile.location`` →
    ``profile.location``). None for no key, or a statement key (one digest-named statement)."""
    if not memory_key or "." not in memory_key or _STATEMENT_KEY.match(memory_key):
        return None
    namespace, _, topic = memory_key.partition(".")
    first = topic.split("_", 1)[0]
    return f"{namespace}.{first}" if first else None


def label_of(text: str, limit: int = LABEL_CHARS) -> str:
    """A short one-line text to draw."""
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1].rstrip() + "…"


@dataclass(frozen=True)
class NodeRow:
    """What the read model keeps of a node (its state is computed when it is read)."""

    tenant: str
    id: str
    type: NodeType
    label: str
    project: str
    created_at: datetime
    updated_at: datetime
    forgotten: bool = False
    category: str | None = None
    memory_key: str | None = None
    family: str | None = None
    log_id: str | None = None  # a memory's provenance log (node id)
    importance: int | None = None
    version: int | None = None
    expires_at: datetime | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def memory_row(state: MemoryState) -> NodeRow:
    """A memory's node from its state (the data of every memory event)."""
    detail: dict[str, Any] = {"source": state.source, "confidence": state.confidence}
    if state.forget_reason:
        detail["forget_reason"] = state.forget_reason
    if state.provenance is not None:
        detail["provenance"] = state.provenance.model_dump(mode="json")
    for name in ("valid_from", "valid_until"):  # the graph as of a moment filters on them
        if (moment := getattr(state, name)) is not None:
            detail[name] = moment.isoformat()
    return NodeRow(
        tenant=state.tenant, id=memory_node_id(state.id), type=NodeType.MEMORY, label=label_of(state.content),
        project=state.project, created_at=state.created_at, updated_at=state.updated_at,
        forgotten=state.status is MemoryStatus.FORGOTTEN,
        category=state.category.value if state.category else None, memory_key=state.memory_key,
        family=key_family(state.memory_key),
        log_id=log_node_id(state.provenance.log_id) if state.provenance else None,
        importance=state.importance, version=state.version, detail=detail,
    )


def log_row(state: DailyLogState, retention_days: int) -> NodeRow:
    """A daily log's node: a document, which expires ``retention_days`` after it was processed."""
    topics = ", ".join(state.topics or [])
    label = label_of(f"{state.log_date.isoformat()} · {topics}" if topics else state.log_date.isoformat())
    expires = state.processed_at + timedelta(days=retention_days) \
        if state.processing_status is ProcessingStatus.PROCESSED and state.processed_at else None
    detail: dict[str, Any] = {
        "log_date": state.log_date.isoformat(), "status": state.processing_status.value,
        "retry_count": state.retry_count, "turns": len(state.turns or []),
    }
    if state.topics:
        detail["topics"] = state.topics
    if state.mood is not None:
        detail["mood"] = state.mood
    if state.error_reason:
        detail["error_reason"] = state.error_reason
    return NodeRow(
        tenant=state.tenant, id=log_node_id(state.id), type=NodeType.LOG, label=label, project=state.project,
        created_at=state.created_at, updated_at=state.updated_at, version=state.version, expires_at=expires,
        detail=detail,
    )


def project_row(tenant: str, project: str, at: datetime) -> NodeRow:
    return NodeRow(tenant=tenant, id=project_node_id(project), type=NodeType.PROJECT, label=project,
                   project=project, created_at=at, updated_at=at)


def node_state(*, forgotten: bool, created_at: datetime, expires_at: datetime | None, now: datetime) -> NodeState:
    """A node's state now: forgotten, else expiring (at most 7 days left), else new (created within
    24 hours), else active."""
    if forgotten:
        return NodeState.FORGOTTEN
    if expires_at is not None and expires_at - now <= EXPIRING_WITHIN:
        return NodeState.EXPIRING
    if now - created_at <= NEW_WITHIN:
        return NodeState.NEW
    return NodeState.ACTIVE


def graph_node(row: NodeRow, now: datetime, as_of: datetime | None = None) -> GraphNode:
    """The contract's node, its state computed at ``now`` (or at ``as_of``, a past moment: a node
    changed since then says so in ``detail.changed_since``, its fields being today's)."""
    detail = dict(row.detail)
    if row.expires_at is not None:
        detail["expires_at"] = row.expires_at.isoformat()
    if as_of is not None:
        now = as_of
        if row.updated_at > as_of and row.type is NodeType.MEMORY:
            detail["changed_since"] = row.updated_at.isoformat()
    return GraphNode(
        id=row.id, type=row.type, label=row.label,
        state=node_state(forgotten=row.forgotten, created_at=row.created_at, expires_at=row.expires_at, now=now),
        project=row.project, category=row.category, memory_key=row.memory_key, importance=row.importance,
        version=row.version, created_at=row.created_at, updated_at=row.updated_at, detail=detail,
    )


# the cursor ---------------------------------------------------------------------------------------
def filters_digest(q: GraphPageQuery, project: str | None) -> str:
    """What a cursor is valid for: the filters of the query that issued it (not its limit)."""
    key = json.dumps([project, sorted(t.value for t in q.node_types) if q.node_types else None,
                      q.since.isoformat() if q.since else None, q.until.isoformat() if q.until else None]
                     + ([q.as_of.isoformat()] if q.as_of else []))
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def encode_cursor(seq: int, digest: str) -> str:
    """An opaque cursor: the last node's place in the order, and the filters it belongs to."""
    raw = json.dumps({"v": CURSOR_VERSION, "s": seq, "f": digest}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, digest: str) -> int:
    """The place a cursor names; a cursor this service did not issue, or issued for other filters,
    is refused naming the field ``cursor``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        seq = data.get("s") if isinstance(data, dict) and data.get("v") == CURSOR_VERSION else None
        made_for = data.get("f") if isinstance(data, dict) else None
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        seq = made_for = None
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= MAX_CURSOR_SEQ:
        raise ServiceError("cursor is not a cursor this service issued: pass a page's next_cursor unchanged, "
                           "or leave it out for the first page", "cursor")
    if made_for != digest:
        raise ServiceError("cursor belongs to a query with other filters (project, node_types, since, until, as_of): "
                           "page with the filters that issued it, or leave it out to start again", "cursor")
    return seq
