"""Text the model reads: compact, scored, with a one-line legend. Pure functions."""

from __future__ import annotations

from typing import Any

MAX_OUTPUT_CHARS = 200_000


def format_recall(query: str, hits: list[dict[str, Any]], project: str | None) -> str:
    scope = f"project '{project}'" if project else "all projects"
    if not hits:
        return f"No memories found for “{query}” in {scope}. Nothing is stored about this yet."
    lines = [
        f"{len(hits)} memories for “{query}” in {scope}, most relevant first.",
        "Legend: [rank] (relevance score) content — project · saved date · id",
    ]
    for rank, hit in enumerate(hits, 1):
        m = hit["memory"]
        saved = str(m["created_at"])[:10]
        lines.append(f"[{rank}] ({hit['score']:.3f}) {m['content']} — {m['project']} · {saved} · {m['id']}")
    return cap("\n".join(lines))


def format_save(result: dict[str, Any]) -> str:
    if result.get("created"):
        return f"Saved to project '{result['project']}' (id {result['memory_id']})."
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
