"""A memory edited or pinned many times over a long text (a pasted document of up to 200,000
characters, 4 bytes a character for emoji) holds more than the bus carries in one message (1 MB):
its export record comes in consecutive parts, an export page can end inside one, and its history
answer carries the earlier versions' starts (the newest whole). Found from outside on 2026-12-05:
such a user's export stopped at that memory."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from contracts.errors import ServiceError
from contracts.memory import LISTED_CONTENT_CHARS, MAX_CONTENT_CHARS, MemoryStatus, MemoryVersion
from contracts.portability import EXPORT_PAGE_BYTES, MemoryRecord
from services.gateway import relations
from services.memory.application.user_records import _cursor, memory_parts
from services.memory.domain.model import HISTORY_BYTES, fitting
from tests.unit.test_relations import version, view

pytestmark = pytest.mark.unit
NOW = "2026-12-05T00:00:00Z"


def record(contents: list[str]) -> MemoryRecord:
    memory_id = uuid4()
    return MemoryRecord.model_validate({"id": str(memory_id), "versions": [
        {"event": "MemoryUpdated" if n > 1 else "MemorySaved", "occurred_at": NOW, "state": {
            "id": str(memory_id), "project": "p", "content": text, "version": n, "created_at": NOW,
            "updated_at": NOW}} for n, text in enumerate(contents, 1)]})


def size(r: MemoryRecord) -> int:
    return len(r.model_dump_json().encode())


def test_a_record_over_a_page_comes_in_consecutive_parts_each_under_it() -> None:
    emoji = "🍣" * MAX_CONTENT_CHARS  # 800 KB a version: one version alone is a part
    prose = "a b " * (MAX_CONTENT_CHARS // 4)
    whole = record([prose, prose + "!", emoji, prose, prose, prose, "short"])
    assert size(whole) > 1_500_000
    parts = memory_parts(whole)
    assert [v.state.version for p in parts for v in p.versions] == list(range(1, 8))  # every version once, in order
    assert all(p.id == whole.id for p in parts)
    assert all(size(p) <= EXPORT_PAGE_BYTES for p in parts if len(p.versions) > 1)
    assert [len(p.versions) for p in parts] == [2, 1, 2, 2]  # (a version of 800 KB is a part of its own)
    # a record that fits is one part, unchanged
    small = record(["likes tea", "likes green tea"])
    assert memory_parts(small) == [small]
    # a page that ended inside a record goes on after the versions it gave
    rest = memory_parts(whole, given=3)
    assert [v.state.version for p in rest for v in p.versions] == [4, 5, 6, 7]


def test_an_export_cursor_names_a_record_or_a_version_inside_it() -> None:
    memory_id = uuid4()
    assert _cursor(None) == (None, 0)
    assert _cursor(str(memory_id)) == (memory_id, 0)
    assert _cursor(f"{memory_id}@3") == (memory_id, 3)
    for bad in ("nope", f"{memory_id}@x", "@3"):
        with pytest.raises(ServiceError) as refused:
            _cursor(bad)
        assert refused.value.field == "after"


def _versions(contents: list[str]) -> list[MemoryVersion]:
    return [MemoryVersion(version=n, event="MemoryUpdated", sequence=n, occurred_at=datetime(2026, 12, 5, tzinfo=UTC),
                          content=text, status=MemoryStatus.ACTIVE, importance=3, confidence=0.8)
            for n, text in enumerate(contents, 1)]


def test_a_long_history_carries_the_earlier_versions_starts_and_the_newest_whole() -> None:
    doc = " ".join(f"word{i}" for i in range(30_000))  # ~259 KB
    versions = _versions([doc, doc, doc + " more", doc + " most"])
    assert sum(len(v.model_dump_json().encode()) for v in versions) > HISTORY_BYTES
    got = fitting(versions)
    assert sum(len(v.model_dump_json().encode()) for v in got) <= HISTORY_BYTES
    assert got[-1] == versions[-1]  # the newest whole (an edit starts from it)
    assert got[0].content_chars == len(doc) and len(got[0].content) <= LISTED_CONTENT_CHARS
    assert doc.startswith(got[0].content)
    cut = [v for v in got if v.content_chars is not None]
    assert cut == got[: len(cut)]  # oldest first, only as many as needed
    assert got[len(cut):] == versions[len(cut):]
    # a history that fits is unchanged
    short = _versions(["likes tea", "likes green tea"])
    assert fitting(short) == short


def test_relations_compare_a_cut_earlier_version_by_its_length_and_start() -> None:
    doc = " ".join(f"word{i}" for i in range(30_000))
    hit = view(doc, version=3)
    pinned = version(2, doc).model_copy(update={"content": doc[:1990], "content_chars": len(doc)})  # same words, cut
    changed = version(1, doc[:-1] + "X").model_copy(update={"content": doc[:1990], "content_chars": len(doc)})
    shorter = version(1, "an older, shorter text")
    from contracts.memory import MemoryHistory
    got = relations.relations_of(hit, MemoryHistory(memory_id=hit.id, versions=[shorter, pinned, version(3, doc)]),
                                 None, {}, {})
    assert [(r.kind.value, r.version) for r in got] == [("previous_version", 1)]  # the pin is passed over
    # a cut version of the same length and start is taken for the same words (all the history holds of it)
    got = relations.relations_of(hit, MemoryHistory(memory_id=hit.id, versions=[changed, version(3, doc)]), None, {}, {})
    assert got == []


def test_a_list_of_logs_carries_the_logs_that_fit_and_at_least_one() -> None:
    from datetime import date

    from contracts.daily_logs import LOG_PAGE_BYTES, DailyLogState, Turn
    from services.memory.domain.daily_logs import log_page

    def log(day: int, chars: int) -> DailyLogState:
        return DailyLogState(id=uuid4(), tenant="t", project="p", log_date=date(2026, 12, day),
                             turns=[Turn(speaker="user", text="🍣" * (chars // 100))] * 100,
                             created_at=datetime(2026, 12, 5, tzinfo=UTC), updated_at=datetime(2026, 12, 5, tzinfo=UTC))

    big = [log(1, 200_000), log(2, 200_000), log(3, 100)]  # ~800 KB, ~800 KB, small
    views, cut = log_page(big)
    assert [v.id for v in views] == [big[0].id] and cut  # one alone, however large; the rest next
    small = [log(d, 1_000) for d in range(1, 6)]
    views, cut = log_page(small)
    assert [v.id for v in views] == [s.id for s in small] and not cut
    views, cut = log_page([log(1, 100_000), log(2, 100_000), log(3, 100_000)])  # 400 KB each
    assert len(views) == 1 and cut and sum(len(v.model_dump_json().encode()) for v in views) <= LOG_PAGE_BYTES


def test_a_user_with_thousands_of_projects_gets_the_most_recent_and_how_many_there_are() -> None:
    """An agent that gives every conversation a containerTag makes thousands of projects: ~7,000 were
    more than one bus message, and list_projects was refused. The list names the 1,000 most recently
    used and the total; the MCP text and the tools' containerTag description say how many more."""
    import asyncio
    from datetime import timedelta
    from types import SimpleNamespace

    from contracts.memory import MAX_LISTED_PROJECTS, ListProjects, ProjectInfo
    from kit.service import Call
    from services.gateway.presentation import format_projects
    from services.gateway.project_cache import describe_projects
    from services.memory.application.memories import MemoryReads

    start = datetime(2026, 12, 5, tzinfo=UTC)
    found = [ProjectInfo(project=f"chat-{i:05d}", memories=1, last_updated=start - timedelta(minutes=i))
             for i in range(7_500)]  # most recent first, as the read model orders them

    async def projects(tenant: str) -> list[ProjectInfo]:
        return found

    reads = SimpleNamespace(store=SimpleNamespace(projects=projects))
    listed = asyncio.run(MemoryReads.projects(reads, Call(tenant="t", correlation_id="c"), ListProjects()))  # type: ignore[arg-type]
    assert listed.total == 7_500 and listed.projects == found[:MAX_LISTED_PROJECTS]
    assert len(listed.model_dump_json().encode()) < 600_000
    assert format_projects(listed).startswith("7500 projects, the 1000 most recently used")
    assert describe_projects("Project.", listed).endswith("chat-00049 and 7450 more (listProjects).")
    few = asyncio.run(MemoryReads.projects(reads, Call(tenant="t", correlation_id="c", project_scope="chat-00003"),
                                           ListProjects()))  # type: ignore[arg-type]
    assert [p.project for p in few.projects] == ["chat-00003"] and few.total is None
    assert "total" not in few.model_dump_json()


def test_a_list_of_extraction_results_carries_the_newest_that_fit() -> None:
    """A result may name 1,000 memories (~40 KB): a list of 100 of them was ~4 MB."""
    from contracts.daily_logs import LOG_PAGE_BYTES, ExtractionResultState
    from services.memory.domain.daily_logs import result_view
    from services.memory.domain.paging import fitting

    at = datetime(2026, 12, 5, tzinfo=UTC)
    results = [ExtractionResultState(id=uuid4(), tenant="t", project="p", log_id=uuid4(), task_id=f"t{i}",
                                     memory_ids=[uuid4() for _ in range(1_000)], created_at=at, updated_at=at)
               for i in range(100)]
    views, cut = fitting(results, result_view)
    assert cut and 10 <= len(views) < 100 and [v.task_id for v in views] == [r.task_id for r in results[: len(views)]]
    assert sum(len(v.model_dump_json().encode()) for v in views) <= LOG_PAGE_BYTES
    assert fitting(results[:3], result_view) == ([result_view(r) for r in results[:3]], False)


def test_a_list_of_shared_memories_in_a_wide_script_carries_the_newest_that_fit() -> None:
    """100 shared memories of 4,000 characters of Chinese (3 bytes each) were 1.2 MB: refused."""
    import asyncio
    from types import SimpleNamespace

    from contracts.memory import GetSharedMemories, SharedMemoryView
    from kit.service import Call
    from services.memory.application.shared import SharedMemories

    at = datetime(2026, 12, 5, tzinfo=UTC)
    found = [SharedMemoryView(id=uuid4(), title=f"旅行 {i}", event="我们在柏林的一家小餐馆吃了晚饭。" * 250, importance=3,
                              version=1, created_at=at, updated_at=at) for i in range(100)]

    async def shared_memories(tenant: str, title: str | None, keyword: str | None, limit: int) -> list[SharedMemoryView]:
        return found[:limit]

    handler = SimpleNamespace(store=SimpleNamespace(shared_memories=shared_memories))
    got = asyncio.run(SharedMemories.list(handler, Call(tenant="t", correlation_id="c"), GetSharedMemories(limit=100)))  # type: ignore[arg-type]
    assert 10 < len(got.shared_memories) < 100 and got.shared_memories == found[: len(got.shared_memories)]
    assert len(got.model_dump_json().encode()) < 700_000


def test_the_markdown_export_of_a_long_memory_in_parts_reads_as_one_memory() -> None:
    from kit.export import markdown

    doc = "🍣" * MAX_CONTENT_CHARS
    parts = memory_parts(record([doc, doc, doc]))
    assert len(parts) == 3
    first, *rest = (markdown(p) for p in parts)
    assert first.startswith("\n## 🍣") and f"- id `{parts[0].id}`" in first
    assert [r.splitlines()[1] for r in rest] == [f"More versions of `{parts[0].id}`:"] * 2  # no second heading
    assert rest[0].splitlines()[2].startswith("2. ") and rest[1].splitlines()[2].startswith("3. ")


def test_an_answer_holding_many_long_memories_cuts_them_shorter_until_it_fits() -> None:
    """A profile of 100 stable facts and 100 recent memories, each 4,000 characters of Chinese (3 bytes
    each), was 1.2 MB at 2,000 characters a memory: refused. Every memory stays, each cut shorter, with
    its whole length; an answer that fits is returned as it is."""
    from contracts.memory import Profile, abridged
    from services.memory.domain.paging import LIST_BYTES, shortened
    from tests.unit.test_relations import view

    text = "我们在柏林的一家小餐馆吃了晚饭，然后沿着河边散步。" * 160  # 4,000 characters
    whole = Profile(static=[view(text) for _ in range(100)], dynamic=[view(text) for _ in range(100)])

    def cut(chars: int = LISTED_CONTENT_CHARS) -> Profile:
        return Profile(static=[abridged(v, chars) for v in whole.static], dynamic=[abridged(v, chars) for v in whole.dynamic])

    listed = cut()
    assert len(listed.model_dump_json().encode()) > 1_048_576
    got = shortened(listed, [v.content for v in (*listed.static, *listed.dynamic)], cut)
    assert len(got.model_dump_json().encode()) <= LIST_BYTES
    assert [v.id for v in got.static + got.dynamic] == [v.id for v in whole.static + whole.dynamic]
    assert all(v.content_chars == len(text) and text.startswith(v.content) and len(v.content) < LISTED_CONTENT_CHARS
               for v in got.static + got.dynamic)
    # cut again, an already cut memory keeps its whole length
    assert abridged(abridged(whole.static[0]), 500).content_chars == len(text)
    small = Profile(static=[view("likes tea")], dynamic=[])
    assert shortened(small, ["likes tea"], lambda chars: Profile(static=[], dynamic=[])) is small
