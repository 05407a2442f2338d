"""The repository explains itself: every relative link in README.md and docs/*.md reaches a file
(and, for a Markdown target, a heading) that exists, and nothing points at the documents Engram
was first specified in, which a clone does not have (docs/design.md restates them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
#: the briefing's paths and section references, spelled in pieces so that this file does not match itself
OUTSIDE = tuple(
    "".join(parts)
    for parts in (("..", "/shared"), ("SPEC", ".md"), ("SPEC", " §"), ("ARCHITECTURE", ".md"),
                  ("ARCHITECTURE", " §"), ("shared", "/seeds"))
)
SKIP_DIRS = {".git", ".venv", "node_modules", ".hypothesis", "__pycache__", ".pytest_cache", ".ruff_cache",
             ".mypy_cache", "engram.egg-info"}
TEXT_SUFFIXES = {".md", ".py", ".toml", ".yml", ".yaml", ".json", ".txt", ".sql", ".sh", ".html", ".js", ".cfg",
                 ".ini", ""}


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = HEADING.match(line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).replace("`", "").strip().lower()).replace(" ", "-")
        count = seen.get(slug)
        seen[slug] = 0 if count is None else count + 1
        found.add(slug if count is None else f"{slug}-{count + 1}")
    return found


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, ui:, …
            continue
        path, _, fragment = target.partition("#")
        resolved = (doc.parent / path).resolve() if path else doc
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_design_page_is_linked_from_the_readme() -> None:
    assert "(docs/design.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_nothing_points_at_the_briefing_outside_the_repository() -> None:
    found = []
    for path in sorted(ROOT.rglob("*")):
        if any(part in SKIP_DIRS for part in path.relative_to(ROOT).parts) or not path.is_file():
            continue
        if path.suffix not in TEXT_SUFFIXES and path.name not in {"Makefile", "Dockerfile"}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{path.relative_to(ROOT)}: {needle!r}" for needle in OUTSIDE if needle in text]
    assert not found, "point to docs/design.md or docs/architecture.md instead: " + "; ".join(found)
