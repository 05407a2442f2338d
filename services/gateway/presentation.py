"""Text the model reads: compact, scored, with a one-line legend. Pure functions."""

from __future__ import annotations

from typing import Any

MAX_OUTPUT_CHARS = 200_000
LEGEND = "Legend: [rank] (score) content — project · date · id · ↻vN = revised N-1 times (updates its earlier versions)"


def _marker(m: dict[str, Any]) -> str:
    version = int(m.get("version", 1))
    return f" · ↻v{version}" if version > 1 else ""


def _fact(m: dict[str, Any]) -> str:
    tag = f"[{m['category']}] " if m.get("category") else ""
    return f"- {tag}{m['content']}"


def format_profile(profile: dict[str, Any] | None) -> str:
    if not profile or (not profile.get("static") and not profile.get("dynamic")):
        return "## Profile\n(no profile yet: nothing durable has been saved about the user)"
    lines = ["## Profile", "Stable facts:"]
    lines += [_fact(m) for m in profile.get("static", [])] or ["- (none yet)"]
    lines.append("Recent context:")
    lines += [_fact(m) for m in profile.get("dynamic", [])] or ["- (none)"]
    return "\n".join(lines)


def format_recall(
    query: str, hits: list[dict[str, Any]], project: str | None, profile: dict[str, Any] | None = None
) -> str:
    scope = f"project '{project}'" if project else "all projects"
    parts = [format_profile(profile)] if profile is not None else []
    if not hits:
        parts.append(f"No memories found for “{query}” in {scope}. Nothing is stored about this yet.")
        return cap("\n\n".join(parts))
    lines = [f"## {len(hits)} memories for “{query}” in {scope}, most relevant first", LEGEND]
    for rank, hit in enumerate(hits, 1):
        m = hit["memory"]
        day = str(m.get("updated_at") or m["created_at"])[:10]
        lines.append(f"[{rank}] ({hit['score']:.3f}) {m['content']} — {m['project']} · {day} · {m['id']}{_marker(m)}")
    parts.append("\n".join(lines))
    return cap("\n\n".join(parts))


def format_projects(result: dict[str, Any], restricted_to: str | None) -> str:
    projects = result.get("projects", [])
    if restricted_to:
        projects = [p for p in projects if p["project"] == restricted_to]
    if not projects:
        return "No projects yet: the first memory saved creates one (default project: 'default')."
    lines = [f"{len(projects)} projects (containerTag · memories · last updated):"]
    lines += [f"- {p['project']} · {p['memories']} · {str(p['last_updated'])[:10]}" for p in projects]
    return "\n".join(lines)


def format_save(result: dict[str, Any]) -> str:
    if result.get("created"):
        return f"Saved to project '{result['project']}' (id {result['memory_id']})."
    if result.get("updated"):
        return f"Updated in project '{result['project']}' (id {result['memory_id']}, now version {result['version']})."
    return f"Already remembered in project '{result['project']}' (id {result['memory_id']}); nothing duplicated."


def format_forget(result: dict[str, Any]) -> str:
    text = str(result["message"])
    if result.get("forgotten"):
        how = {"exact": "exact match", "semantic": f"semantic match, similarity {result.get('similarity')}", "id": "by id"}
        text += f" ({how.get(result.get('match') or '', '')}: “{result.get('content')}”)"
    return text


def cap(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    marker = "\n… (output truncated at 200,000 characters; narrow the query)"
    return text[: limit - len(marker)] + marker
