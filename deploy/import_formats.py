"""What `engram import` reads: Engram's own export, mem0's and Supermemory's exports, chat histories.

Pure parsing, no I/O: each format becomes a stream of import items, each with an idempotency key
derived from its source (ids and content), so importing the same file twice changes nothing.

* ``engram``: the JSONL of ``engram export`` (a header line, then records) — restored as they were.
* ``mem0``: ``Memory.get_all()`` / ``MemoryClient.get_all()`` output — ``{"results": [...]}`` or a bare
  list of ``{id, memory, hash, metadata, created_at, updated_at, user_id, …}`` (mem0ai/mem0,
  ``mem0/memory/main.py``) — each ``memory`` saved as a memory.
* ``supermemory``: the documents list — ``{"documents": [{id, customId, title, content, summary,
  containerTags, memoryEntries: [{id, memory, isForgotten, isLatest, version, …}], …}],
  "pagination": …}`` (supermemoryai/supermemory, ``DocumentsResponse`` / ``DocumentWithMemories``
  in the web app's ``memory-graph`` API types) — each latest, not forgotten memory entry saved as a
  memory (the document's title as its context; a document without entries: its content).
* ``chat``: a JSON list of ``{speaker, text, at}`` turns, or LoCoMo-style samples
  (``conversation.session_N`` + ``session_N_date_time``) — one daily log per day (the extractor
  then learns from it), or with ``as_memories`` one memory per turn (the turn before as context).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from contracts.daily_logs import MAX_TURN_CHARS, MAX_TURNS, SaveDailyLog, Turn
from contracts.memory import IMPORTED_SOURCES, MAX_CONTEXT_CHARS, PROJECT_PATTERN, SaveMemory
from contracts.portability import ExportHeader

Format = Literal["engram", "mem0", "supermemory", "chat"]
FORMATS: tuple[Format, ...] = ("engram", "mem0", "supermemory", "chat")

#: the ``source`` each format's memories are saved with (GET /v1/memories?source=imported finds them)
_MEM0, _SUPERMEMORY, _CHAT = IMPORTED_SOURCES


class ImportFormatError(ValueError):
    """The file is not in the format named (or none could be recognised); says where."""


@dataclass(frozen=True)
class ImportItem:
    """One command of an import: a memory or a daily log to save, with its idempotency key."""

    command: BaseModel
    key: str
    source_id: str


def key_for(*parts: object) -> str:
    """An idempotency key from the item's source identity and content (8-128 of [A-Za-z0-9_.:-])."""
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()[:40]
    return f"import:{digest}"


def detect(text_head: str) -> Format:
    """The format of a file from its first characters (and first JSON value when needed)."""
    stripped = text_head.lstrip()
    if stripped.startswith("{"):
        first_line = stripped.split("\n", 1)[0]
        try:
            first = json.loads(first_line)
        except ValueError:
            first = None
        if isinstance(first, dict) and first.get("type") == "header" and first.get("format") == "engram-export":
            return "engram"
        if '"documents"' in stripped[:4096] or '"memoryEntries"' in stripped[:8192]:
            return "supermemory"
        if '"results"' in stripped[:4096] or '"memory"' in stripped[:4096]:
            return "mem0"
        if '"conversation"' in stripped[:4096]:
            return "chat"
    if stripped.startswith("["):
        head = stripped[:8192]
        if '"memoryEntries"' in head or '"customId"' in head:
            return "supermemory"
        if '"speaker"' in head or '"conversation"' in head:
            return "chat"
        if '"memory"' in head:
            return "mem0"
    raise ImportFormatError("could not tell the file's format: give --format engram|mem0|supermemory|chat")


# engram -----------------------------------------------------------------------------------------
def engram_lines(lines: Iterable[str]) -> Iterator[tuple[int, ExportHeader | dict[str, Any]]]:
    """(line number, header or raw record) of an Engram export; the header must come first."""
    seen_header = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise ImportFormatError(f"line {number} is not JSON: {exc}") from exc
        if not seen_header:
            try:
                yield number, ExportHeader.model_validate(value)
            except ValidationError as exc:
                raise ImportFormatError(f"line {number}: an Engram export starts with its header line ({exc})") from exc
            seen_header = True
            continue
        if not isinstance(value, dict) or "type" not in value:
            raise ImportFormatError(f"line {number}: a record is a JSON object with a 'type'")
        yield number, value


# mem0 -------------------------------------------------------------------------------------------
def mem0_items(data: Any, project: str) -> Iterator[ImportItem]:
    """Each mem0 memory (``memory`` text) as a memory of ``project``."""
    rows = data.get("results", data.get("memories")) if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise ImportFormatError("a mem0 export is a list of memories or {'results': [...]}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ImportFormatError(f"mem0 item {i} is not an object")
        text = row.get("memory") or row.get("text") or row.get("data")
        if not isinstance(text, str) or not text.strip():
            raise ImportFormatError(f"mem0 item {i} has no 'memory' text")
        source_id = str(row.get("id") or row.get("hash") or i)
        yield ImportItem(SaveMemory(content=text.strip(), project=project, source=_MEM0),
                         key_for("mem0", source_id, text), source_id)


# supermemory ------------------------------------------------------------------------------------
def _project_of(tags: Any, default: str) -> str:
    if isinstance(tags, list):
        for tag in tags:
            if isinstance(tag, str) and re.fullmatch(PROJECT_PATTERN, tag):
                return tag
    return default


def supermemory_items(data: Any, project: str | None, default_project: str = "default") -> Iterator[ImportItem]:
    """Each latest, not forgotten memory entry of each document (or the document's content)."""
    docs = data.get("documents", data.get("memories")) if isinstance(data, dict) else data
    if not isinstance(docs, list):
        raise ImportFormatError("a Supermemory export is {'documents': [...]} (or a list of documents)")
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ImportFormatError(f"Supermemory document {i} is not an object")
        target = project or _project_of(doc.get("containerTags"), default_project)
        title = doc.get("title") if isinstance(doc.get("title"), str) and doc.get("title", "").strip() else None
        context = title[:MAX_CONTEXT_CHARS] if title else None
        entries = doc.get("memoryEntries", doc.get("memories"))
        if isinstance(entries, list) and entries:
            for j, entry in enumerate(entries):
                if not isinstance(entry, dict) or entry.get("isForgotten") or entry.get("isLatest") is False:
                    continue
                text = entry.get("memory") or entry.get("content")
                if not isinstance(text, str) or not text.strip():
                    continue
                source_id = str(entry.get("id") or f"{doc.get('id', i)}:{j}")
                yield ImportItem(SaveMemory(content=text.strip(), context=context, project=target, source=_SUPERMEMORY),
                                 key_for("supermemory", source_id, text), source_id)
            continue
        if "memory" in doc and isinstance(doc["memory"], str):  # a memory entry listed on its own
            text = doc["memory"]
        else:
            text = doc.get("content") or doc.get("summary")
        if isinstance(text, str) and text.strip():
            source_id = str(doc.get("customId") or doc.get("id") or i)
            yield ImportItem(SaveMemory(content=text.strip(), context=context if text != title else None,
                                        project=target, source=_SUPERMEMORY),
                             key_for("supermemory", source_id, text), source_id)


# chat -------------------------------------------------------------------------------------------
_LOCOMO_WHEN = "%I:%M %p on %d %B, %Y"


def _when(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value.strip():
        return None
    for parse in (datetime.fromisoformat, lambda v: datetime.strptime(v, _LOCOMO_WHEN)):
        try:
            return parse(value.strip())
        except ValueError:
            continue
    return None


def chat_days(data: Any, today: date) -> list[tuple[date, list[Turn]]]:
    """The turns of a chat history by day, oldest first: a list of {speaker, text, at} (a turn
    without ``at`` belongs to the day of the turn before, else ``today``), or LoCoMo samples."""
    days: dict[date, list[Turn]] = {}
    samples = [data] if isinstance(data, dict) else data
    if not isinstance(samples, list):
        raise ImportFormatError("a chat history is a JSON list of {speaker, text, at} or LoCoMo samples")
    if samples and all(isinstance(s, dict) and "conversation" in s for s in samples):
        for sample in samples:
            conv = sample["conversation"]
            sessions = sorted((int(m.group(1)), k) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
            for n, key in sessions:
                when = _when(conv.get(f"session_{n}_date_time"))
                day = when.date() if when else today
                for i, turn in enumerate(conv[key]):
                    days.setdefault(day, []).append(_turn(turn, f"conversation.{key}[{i}]", when))
        return sorted(days.items())
    current = today
    for i, turn in enumerate(samples):
        if not isinstance(turn, dict):
            raise ImportFormatError(f"chat turn [{i}] is not an object")
        when = _when(turn.get("at"))
        if turn.get("at") is not None and when is None:
            raise ImportFormatError(f"chat turn [{i}]: 'at' must be an ISO 8601 time")
        if when is not None:
            current = when.date()
        days.setdefault(current, []).append(_turn(turn, f"[{i}]", when))
    return sorted(days.items())


def _turn(raw: Any, where: str, when: datetime | None) -> Turn:
    if not isinstance(raw, dict):
        raise ImportFormatError(f"chat turn {where} is not an object")
    text = raw.get("text") or raw.get("content")
    speaker = raw.get("speaker") or raw.get("role")
    if not isinstance(text, str) or not text.strip() or not isinstance(speaker, str) or not speaker.strip():
        raise ImportFormatError(f"chat turn {where} needs a speaker and a text")
    if len(text) > MAX_TURN_CHARS:
        raise ImportFormatError(f"chat turn {where} has {len(text):,} characters; a turn is limited to {MAX_TURN_CHARS:,}")
    return Turn(speaker=speaker.strip(), text=text.strip(), at=when if raw.get("at") else None)


def chat_items(data: Any, project: str, today: date, *, as_memories: bool = False) -> Iterator[ImportItem]:
    """A chat history as daily logs (one per day, in chunks of MAX_TURNS) or as memories."""
    for day, turns in chat_days(data, today):
        if as_memories:
            for i, turn in enumerate(turns):
                context = f"{turns[i - 1].speaker}: {turns[i - 1].text}"[:MAX_CONTEXT_CHARS] if i else None
                content = f"{turn.speaker}: {turn.text}"
                yield ImportItem(SaveMemory(content=content, context=context, project=project, source=_CHAT),
                                 key_for("chat", day, i, content), f"{day}#{i}")
            continue
        if len(turns) > MAX_TURNS:
            raise ImportFormatError(f"{day} has {len(turns):,} turns; a daily log holds at most {MAX_TURNS:,}")
        try:
            log = SaveDailyLog(project=project, log_date=day, turns=turns)
        except ValidationError as exc:
            raise ImportFormatError(f"the log of {day}: {exc.errors()[0]['msg']}") from exc
        yield ImportItem(log, key_for("chat-log", project, day, *(f"{t.speaker}:{t.text}" for t in turns)), str(day))
