"""Text the model reads: compact, scored, with a one-line legend. Pure functions over contract models."""

from __future__ import annotations

from contracts.extraction_modes import ExtractionModes
from contracts.memory import (
    ForgetMemoryResult,
    MemoryRelation,
    MemoryView,
    Profile,
    ProjectList,
    RecallHit,
    RelationKind,
    SaveMemoryResult,
    SourceDocument,
)

MAX_OUTPUT_CHARS = 200_000
LEGEND = ("Legend: [rank] (score) content — project · date · id · ↻vN = revised N-1 times (updates its earlier "
          "versions) · from log DATE = extracted from that day's conversation log · then, indented: ← vN the "
          "version it replaced · → vN a newer version (trust it over this one) · ~ a similar memory (cosine "
          "similarity; [rank] when it is a hit here) · ⇐ an older fact this one replaced (no longer true) · "
          "⇒ the fact that replaced this one since (trust it for now) · ×N = said N times")


def _marker(m: MemoryView, documents: list[SourceDocument] | None = None) -> str:
    revised = f" · ↻v{m.version}" if m.version > 1 and m.repeats < m.version else ""
    said = f" · ×{m.repeats}" if m.repeats > 1 else ""
    until = f" · until {m.valid_until.date().isoformat()}" if m.valid_until is not None else ""
    return revised + said + until + _from_logs(m, documents)


def _from_logs(m: MemoryView, documents: list[SourceDocument] | None) -> str:
    """Where an extracted memory came from: the day of each log (else its id), with the turns."""
    if not documents:
        if m.provenance is None:
            return ""
        documents = [SourceDocument(log_id=m.provenance.log_id, log_date=m.provenance.log_date,
                                    task_id=m.provenance.task_id, turns=m.provenance.turns)]
    parts = []
    for d in documents:
        turns = f" (turns {','.join(str(t) for t in d.turns[:8])}{'…' if len(d.turns) > 8 else ''})" if d.turns else ""
        parts.append(f" · from log {d.log_date.isoformat() if d.log_date else d.log_id}{turns}")
    return "".join(parts)


_ARROWS = {RelationKind.PREVIOUS_VERSION: "←", RelationKind.NEWER_VERSION: "→", RelationKind.SIMILAR: "~",
           RelationKind.SUPERSEDES: "⇐", RelationKind.SUPERSEDED_BY: "⇒"}


def _relation(r: MemoryRelation) -> str:
    """One relation in the compact form: ``← v2 “…”``, ``→ v4 “…”``, ``~ [3] 0.84`` or ``~ “…” (id) 0.78``."""
    arrow = _ARROWS[r.kind]
    if r.kind in (RelationKind.SUPERSEDES, RelationKind.SUPERSEDED_BY):
        return f"{arrow} “{r.excerpt}” ({r.memory_id})" if r.excerpt else f"{arrow} ({r.memory_id})"
    if r.kind is not RelationKind.SIMILAR:
        return f"{arrow} v{r.version} “{r.excerpt}”" if r.excerpt else f"{arrow} v{r.version}"
    score = f" {r.score:.2f}" if r.score is not None else ""
    if r.rank is not None:
        return f"{arrow} [{r.rank}]{score}"
    text = f" “{r.excerpt}”" if r.excerpt else ""
    return f"{arrow}{text} ({r.memory_id}){score}"


def format_relations(relations: list[MemoryRelation]) -> str:
    """A hit's relations on one indented line (empty when it has none)."""
    return "    " + " · ".join(_relation(r) for r in relations) if relations else ""


def _content(m: MemoryView) -> str:
    """A memory's content as a recall or a list carries it; where that is only its start, says so."""
    if m.content_chars is None:
        return m.content
    return f"{m.content} … [{m.content_chars - len(m.content):,} more characters: get_memory {m.id} for all]"


def _fact(m: MemoryView) -> str:
    """A profile line; as of a past moment, with what replaced it since (``⇒ “…”`` or ``→ vN “…”``)."""
    tag = f"[{m.category.value}] " if m.category else ""
    since = f"  {_relation(m.changed_since)}" if m.changed_since is not None else ""
    return f"- {tag}{_content(m)}{since}"


def format_profile(profile: Profile | None) -> str:
    if profile is None or (not profile.static and not profile.dynamic):
        return "## Profile\n(no profile yet: nothing durable has been saved about the user)"
    lines = ["## Profile", "Stable facts:"]
    lines += [_fact(m) for m in profile.static] or ["- (none yet)"]
    lines.append("Recent context:")
    lines += [_fact(m) for m in profile.dynamic] or ["- (none)"]
    return "\n".join(lines)


def format_recall(query: str, hits: list[RecallHit], project: str | None, profile: Profile | None = None) -> str:
    scope = f"project '{project}'" if project else "all projects"
    parts = [format_profile(profile)] if profile is not None else []
    if not hits:
        parts.append(f"No memories found for “{query}” in {scope}. Nothing is stored about this yet.")
        return cap("\n\n".join(parts))
    lines = [f"## {len(hits)} memories for “{query}” in {scope}, most relevant first", LEGEND]
    for rank, hit in enumerate(hits, 1):
        m = hit.memory
        day = (m.updated_at or m.created_at).date().isoformat()
        lines.append(f"[{rank}] ({hit.score:.3f}) {_content(m)} — {m.project} · {day} · {m.id}{_marker(m, hit.documents)}")
        relations = hit.relations
        since = m.changed_since
        if since is not None and not any(r.kind is since.kind and r.memory_id == since.memory_id for r in relations):
            relations = [since, *relations]
        if relations:
            lines.append(format_relations(relations))
    parts.append("\n".join(lines))
    return cap("\n\n".join(parts))


def format_projects(result: ProjectList) -> str:
    """The projects the caller can reach (the service leaves out the others)."""
    if not result.projects:
        return "No projects yet: the first memory saved creates one (default project: 'default')."
    shown = (f"{result.total} projects, the {len(result.projects)} most recently used"
             if result.total is not None else f"{len(result.projects)} projects")
    lines = [f"{shown} (containerTag · memories · last updated):"]
    lines += [f"- {p.project} · {p.memories} · {p.last_updated.date().isoformat()}" for p in result.projects]
    return "\n".join(lines)


def format_extraction_modes(modes: ExtractionModes) -> str:
    """Who learns from daily logs: the install default and the projects with a mode of their own."""
    def named(mode: str) -> str:
        return f"handoff (agents first, Engram after {modes.handoff_minutes:g} min)" if mode == "handoff" else mode

    line = f"Daily-log extraction: {named(modes.default.value)} by default"
    if modes.projects:
        line += "; " + ", ".join(f"{p.project}: {named(p.mode.value)}" for p in modes.projects)
    return line + "."


def format_save(result: SaveMemoryResult) -> str:
    if result.created:
        text = f"Saved to project '{result.project}' (id {result.memory_id})."
        if result.supersedes:
            text += f" It replaces {len(result.supersedes)} older memor{'y' if len(result.supersedes) == 1 else 'ies'}" \
                    f" ({', '.join(str(i) for i in result.supersedes)}), now marked superseded."
        if result.flagged:
            text += f" It may contradict {', '.join(str(i) for i in result.flagged)}: flagged for review (list_conflicts)."
        return text
    if result.merged:
        return f"Already remembered in project '{result.project}' (id {result.memory_id}): counted as said again."
    if result.updated:
        return f"Updated in project '{result.project}' (id {result.memory_id}, now version {result.version})."
    return f"Already remembered in project '{result.project}' (id {result.memory_id}); nothing duplicated."


def format_forget(result: ForgetMemoryResult) -> str:
    """The forget's message, with what was forgotten and how it was found named in its first sentence
    (the message may go on: the memories it had superseded, current again)."""
    text = result.message
    if result.forgotten:
        how = {"exact": "exact match", "semantic": f"semantic match, similarity {result.similarity}", "id": "by id"}
        detail = f"({how.get(result.match or '', '')}: “{result.content}”)"
        first, dot, rest = text.partition(".")
        text = f"{first} {detail}{dot}{rest}" if dot else f"{text} {detail}"
    return text


def cap(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    marker = "\n… (output truncated at 200,000 characters; narrow the query)"
    return text[: limit - len(marker)] + marker
