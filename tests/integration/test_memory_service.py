"""The memory service in-process on real JetStream, Postgres and the embedded Qdrant engine."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from uuid import UUID

import pytest

from contracts.envelope import CommandEnvelope, EventEnvelope, QueryEnvelope, utcnow
from contracts.memory import Recall, RecallHit, ReinstateExpired, ReinstateExpiredResult
from kit.bus import Bus
from services.memory.application.expiry import expiry_round
from services.memory.config import MemorySettings
from services.memory.entrypoints import nats as nats_entry
from services.memory.main import MemoryApp, expire_supersessions, memory_app
from services.memory.search.indexing import point_for
from services.memory.search.late import late_order, maxsim, unpack

pytestmark = pytest.mark.integration


@pytest.fixture
async def app(infra, tmp_path: Path) -> AsyncIterator[MemoryApp]:  # type: ignore[no-untyped-def]
    settings = MemorySettings(
        home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
        namespace=infra.fresh_namespace(), memory_schema="mem_" + uuid.uuid4().hex[:8],
    )
    async with memory_app(settings) as a:
        try:
            yield a
        finally:
            await a.bus.delete_streams()


def cmd(type_: str, payload: dict, tenant: str = "alice", key: str | None = None) -> CommandEnvelope:  # type: ignore[type-arg]
    return CommandEnvelope(command_id=key or uuid.uuid4().hex, type=type_, tenant=tenant, payload=payload)


async def recall(app: MemoryApp, text: str, tenant: str = "alice", **kw) -> list[str]:  # type: ignore[no-untyped-def]
    result = await app.service.recall(tenant, Recall(query=text, **kw))
    return [h.memory.content for h in result.hits]


async def events(bus: Bus) -> list[EventEnvelope]:
    info = await bus.js.stream_info(bus.names.events_stream)
    out: list[EventEnvelope] = []
    if info.state.messages == 0:
        return out
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        raw = await bus.js.get_msg(bus.names.events_stream, seq)
        out.append(EventEnvelope.model_validate_json(raw.data))
    return out


async def test_save_then_recall_reads_its_own_write(app: MemoryApp) -> None:
    reply = await app.service.handle_command(cmd("save_memory", {"content": "My favourite tea is sencha"}))
    assert reply.ok and reply.result["created"] is True
    assert (await recall(app, "which tea do I like?"))[0] == "My favourite tea is sencha"


async def test_recall_answers_from_payloads_and_old_points_from_postgres(app: MemoryApp) -> None:
    """Hits carry their views; a point indexed before that (an index not yet replayed) still
    recalls with its full, current view, read from Postgres."""
    first = await app.service.handle_command(cmd("save_memory", {"content": "Dana plays the cello"}))
    await app.service.handle_command(cmd("save_memory", {"content": "Dana grows tomatoes"}))
    updated = await app.service.handle_command(cmd("update_memory", {"id": first.result["memory_id"],
                                                                      "content": "Dana plays the viola"}))
    assert updated.ok
    fresh = await app.service.recall("alice", Recall(query="What instrument does Dana play?"))
    state = await app.store.get("alice", UUID(first.result["memory_id"]))
    assert state is not None
    old_style = point_for(state, await app.service.encoders.memory_vector(state))
    for field in ("content", "confidence", "source", "version", "updated_at"):
        old_style.payload.pop(field)
    await app.index.upsert([old_style])
    mixed = await app.service.recall("alice", Recall(query="What instrument does Dana play?"))
    assert [h.memory for h in mixed.hits] == [h.memory for h in fresh.hits]
    assert mixed.hits[0].memory.content == "Dana plays the viola" and mixed.hits[0].memory.version == 2


async def test_same_command_twice_has_one_effect(app: MemoryApp) -> None:
    c = cmd("save_memory", {"content": "I live in Lisbon"}, key="idem-key-0001")
    first = await app.service.handle_command(c)
    second = await app.service.handle_command(c)
    assert first == second
    assert len(await events(app.bus)) == 1


async def test_identical_content_is_not_duplicated(app: MemoryApp) -> None:
    a = await app.service.handle_command(cmd("save_memory", {"content": "I  play the cello"}))
    b = await app.service.handle_command(cmd("save_memory", {"content": "i play the cello "}))
    assert b.result["created"] is False and b.result["memory_id"] == a.result["memory_id"]


async def test_invalid_payload_names_field_and_writes_nothing(app: MemoryApp) -> None:
    reply = await app.service.handle_command(cmd("save_memory", {"content": "x" * 200_001}))
    assert not reply.ok and reply.error.field == "content" and "200000" in reply.error.message
    reply = await app.service.handle_command(cmd("save_memory", {"content": "ok", "project": "bad tag!"}))
    assert not reply.ok and reply.error.field == "project"
    reply = await app.service.handle_command(cmd("explode", {}))
    assert not reply.ok and reply.error.field == "type"
    assert await events(app.bus) == []
    assert await app.store.counts() == {}


async def test_forget_exact_then_semantic_then_nothing(app: MemoryApp) -> None:
    for text in ["I am allergic to peanuts", "My dog is called Biscuit", "I work as a nurse"]:
        await app.service.handle_command(cmd("save_memory", {"content": text}))
    exact = await app.service.handle_command(cmd("forget_memory", {"content": "I am allergic to peanuts"}))
    assert exact.result["forgotten"] and exact.result["match"] == "exact"
    semantic = await app.service.handle_command(cmd("forget_memory", {"content": "My dog is named Biscuit"}))
    assert semantic.result["forgotten"] and semantic.result["match"] == "semantic"
    assert semantic.result["similarity"] >= 0.85
    nothing = await app.service.handle_command(cmd("forget_memory", {"content": "I own a sailboat"}))
    assert nothing.ok and nothing.result["forgotten"] is False
    remaining = await recall(app, "allergy dog job", limit=10)
    assert remaining == ["I work as a nurse"]
    kinds = [e.type for e in await events(app.bus)]
    assert kinds.count("MemoryForgotten") == 2


async def test_tenants_never_see_each_other(app: MemoryApp) -> None:
    await app.service.handle_command(cmd("save_memory", {"content": "Alice's secret: the vault code is 1234"}))
    assert await recall(app, "vault code", tenant="mallory") == []
    forget = await app.service.handle_command(
        cmd("forget_memory", {"content": "Alice's secret: the vault code is 1234"}, tenant="mallory")
    )
    assert forget.result["forgotten"] is False
    assert await recall(app, "vault code") == ["Alice's secret: the vault code is 1234"]


async def test_projector_replays_events_idempotently(app: MemoryApp) -> None:
    await app.service.handle_command(cmd("save_memory", {"content": "I prefer window seats"}))
    await app.service.handle_command(cmd("forget_memory", {"content": "I prefer window seats"}))
    await app.service.handle_command(cmd("save_memory", {"content": "I prefer aisle seats"}))
    stop = asyncio.Event()
    tasks = nats_entry.start(app.bus, app.service, stop)
    async with asyncio.timeout(20):
        while await app.store.checkpoint("memory-projector") < 3:
            await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*tasks)
    assert await recall(app, "seat preference") == ["I prefer aisle seats"]
    assert await app.store.counts() == {"active": 1, "forgotten": 1}


async def test_rebuild_from_event_log(app: MemoryApp) -> None:
    for text in ["I run marathons", "我最喜欢喝绿茶", "My sister lives in Osaka"]:
        await app.service.handle_command(cmd("save_memory", {"content": text}))
    before = await recall(app, "绿茶", mode="keyword")
    await app.store.drop_read_model()
    await app.index.drop()
    await app.index.ensure()
    assert await recall(app, "marathon") == []
    for seq, event in enumerate(await events(app.bus), 1):
        await app.service.projection.apply(event, seq, checkpoint="rebuild")
    assert await recall(app, "绿茶", mode="keyword") == before == ["我最喜欢喝绿茶"]
    assert await app.store.counts() == {"active": 3}


async def test_keyed_save_updates_instead_of_duplicating(app: MemoryApp) -> None:
    first = await app.service.handle_command(
        cmd("save_memory", {"category": "preference", "memory_key": "preference.pets", "content": "Likes cats"})
    )
    second = await app.service.handle_command(
        cmd("save_memory", {"category": "preference", "memory_key": "preference.pets", "content": "Likes dogs"})
    )
    assert first.result["created"] and second.result["updated"]
    assert first.result["memory_id"] == second.result["memory_id"] and second.result["version"] == 2
    assert await recall(app, "pets") == ["Likes dogs"]
    history = await app.service.handle_query(
        QueryEnvelope(type="memory_history", tenant="alice", payload={"memory_id": first.result["memory_id"]})
    )
    versions = history.result["versions"]
    assert [v["content"] for v in versions] == ["Likes cats", "Likes dogs"]
    assert versions[0]["valid_until"] is not None and versions[1]["valid_until"] is None


async def test_two_clients_saving_one_key_at_once(app: MemoryApp) -> None:
    replies = await asyncio.gather(*(
        app.service.handle_command(
            cmd("save_memory", {"category": "goal", "memory_key": "goal.marathon", "content": f"Run a marathon in {y}"})
        )
        for y in (2027, 2028)
    ))
    assert all(r.ok for r in replies)
    assert len({r.result["memory_id"] for r in replies}) == 1
    assert sorted(r.result["version"] for r in replies) == [1, 2]
    assert len(await events(app.bus)) == 2
    assert await app.store.counts() == {"active": 1}


async def test_generated_key_get_by_key_update_and_recall_memory(app: MemoryApp) -> None:
    saved = await app.service.handle_command(
        cmd("save_memory", {"category": "skill", "content": "Fluent in Portuguese", "importance": 4})
    )
    key = saved.result["memory_key"]
    assert key.startswith("skill.") and "portuguese" in key
    found = await app.service.handle_query(
        QueryEnvelope(type="get_memory_by_key", tenant="alice", payload={"memory_key": key})
    )
    assert found.result["found"] and found.result["memory"]["content"] == "Fluent in Portuguese"
    missing = await app.service.handle_query(
        QueryEnvelope(type="get_memory_by_key", tenant="bob", payload={"memory_key": key})
    )
    assert missing.result == {"found": False, "memory": None}
    updated = await app.service.handle_command(
        cmd("update_memory", {"memory_key": key, "content": "Fluent in Portuguese and Spanish"})
    )
    assert updated.result["version"] == 2
    by_id = await app.service.handle_command(cmd("update_memory", {"id": saved.result["memory_id"], "importance": 5}))
    assert by_id.result["version"] == 3
    listed = await app.service.handle_query(
        QueryEnvelope(type="recall_memory", tenant="alice", payload={"category": "skill", "keyword": "spanish"})
    )
    assert [m["content"] for m in listed.result["memories"]] == ["Fluent in Portuguese and Spanish"]
    assert listed.result["memories"][0]["importance"] == 5


async def test_structured_bad_input_changes_nothing(app: MemoryApp) -> None:
    cases = [
        ({"category": "hobby", "content": "x"}, "category"),
        ({"category": "preference", "memory_key": "profile.tea", "content": "x"}, "memory_key"),
        ({"category": "preference", "memory_key": "preference.Bad-Topic", "content": "x"}, "memory_key"),
        ({"category": "goal", "content": "x" * 4001}, "content"),
        ({"category": "goal", "content": "x", "importance": 0}, "importance"),
        ({"category": "goal", "content": "x", "confidence": 1.01}, "confidence"),
    ]
    for payload, field in cases:
        reply = await app.service.handle_command(cmd("save_memory", payload))
        assert not reply.ok and reply.error.field == field, (payload, reply)
    both = await app.service.handle_command(cmd("update_memory", {"id": str(uuid.uuid4()), "memory_key": "goal.x", "content": "y"}))
    neither = await app.service.handle_command(cmd("update_memory", {"content": "y"}))
    unknown = await app.service.handle_command(cmd("update_memory", {"id": str(uuid.uuid4()), "content": "y"}))
    assert not both.ok and not neither.ok and "exactly one of id or memory_key" in both.error.message
    assert not unknown.ok and unknown.error.code == "not_found" and unknown.error.field == "id"
    assert await events(app.bus) == []


async def test_shared_memories_are_idempotent_per_title(app: MemoryApp) -> None:
    a = await app.service.handle_command(
        cmd("save_shared_memory", {"title": "First trip to Kyoto", "event": "We saw the maples at Tofuku-ji"})
    )
    b = await app.service.handle_command(
        cmd("save_shared_memory", {"title": "First  trip to Kyoto", "event": "Maples at Tofuku-ji, then ramen", "importance": 5})
    )
    assert a.result["created"] and b.result["updated"] and a.result["shared_memory_id"] == b.result["shared_memory_id"]
    exact = await app.service.handle_query(
        QueryEnvelope(type="get_shared_memories", tenant="alice", payload={"title": "First trip to Kyoto"})
    )
    assert [m["event"] for m in exact.result["shared_memories"]] == ["Maples at Tofuku-ji, then ramen"]
    keyword = await app.service.handle_query(
        QueryEnvelope(type="get_shared_memories", tenant="alice", payload={"keyword": "RAMEN"})
    )
    assert len(keyword.result["shared_memories"]) == 1
    other = await app.service.handle_query(
        QueryEnvelope(type="get_shared_memories", tenant="bob", payload={"keyword": "ramen"})
    )
    assert other.result["shared_memories"] == []
    bad = await app.service.handle_command(cmd("save_shared_memory", {"title": "", "event": "x"}))
    assert not bad.ok and bad.error.field == "title"


async def test_a_list_of_shared_memories_too_large_for_one_answer_says_there_is_more(app: MemoryApp) -> None:
    """Shared memories may be long (4,000 characters of Chinese is 12 KB): the list carries the newest
    that fit in one answer and says more matched (no page follows: narrowing finds the rest)."""
    user = "sharer-" + uuid.uuid4().hex[:8]
    for i in range(60):
        done = await app.service.handle_command(
            cmd("save_shared_memory", {"title": f"长途旅行 {i}", "event": f"第{i}天" + "我们一起走过山谷和河流" * 360}, tenant=user))
        assert done.ok, done.error
    many = await app.service.handle_query(QueryEnvelope(type="get_shared_memories", tenant=user,
                                                        payload={"keyword": "长途旅行", "limit": 60}))
    assert many.ok and many.result["more"] is True
    shown = many.result["shared_memories"]
    assert 0 < len(shown) < 60 and shown[0]["title"] == "长途旅行 59"  # the newest first
    one = await app.service.handle_query(QueryEnvelope(type="get_shared_memories", tenant=user,
                                                       payload={"title": "长途旅行 3"}))
    assert [m["title"] for m in one.result["shared_memories"]] == ["长途旅行 3"] and "more" not in one.result


async def done_ok(app: MemoryApp, user: str, type_: str, payload: dict) -> dict:  # type: ignore[type-arg]
    """The result of a command that must succeed."""
    done = await app.service.handle_command(cmd(type_, payload, tenant=user))
    assert done.ok, done.error
    return done.result  # type: ignore[no-any-return]


async def test_a_duplicate_merged_into_another_memory_hands_it_what_it_superseded(app: MemoryApp) -> None:
    """"I moved to Porto last month" superseded "I live in Lisbon"; merged into "These days I call Porto home",
    Lisbon is superseded by the memory that stays, which names it (recall shows it under that hit)."""
    user = "merger-" + uuid.uuid4().hex[:8]

    run = partial(done_ok, app, user)

    lisbon = await run("save_memory", {"content": "I live in Lisbon"})
    moved = await run("save_memory", {"content": "I moved to Porto last month"})
    assert moved["supersedes"] == [lisbon["memory_id"]], moved
    home = await run("save_memory", {"content": "These days I call Porto home"})
    assert home["created"] and not home["supersedes"], home
    merged = await run("merge_memory", {"memory_id": moved["memory_id"], "into": home["memory_id"]})
    assert merged["merged"], merged

    async def get(memory_id: str) -> dict:  # type: ignore[type-arg]
        found = await app.service.handle_query(QueryEnvelope(type="get_memory", tenant=user,
                                                             payload={"memory_id": memory_id}))
        return found.result  # type: ignore[no-any-return]

    old = await get(lisbon["memory_id"])
    assert old["status"] == "superseded" and old["superseded_by"]["memory_id"] == home["memory_id"], old
    stays = await get(home["memory_id"])
    assert [w["memory_id"] for w in stays["supersedes"]] == [lisbon["memory_id"]], stays
    again = await run("merge_memory", {"memory_id": moved["memory_id"], "into": home["memory_id"]})
    assert not again["merged"] and (await get(lisbon["memory_id"]))["version"] == old["version"]  # nothing twice


async def test_recall_never_names_a_forgotten_memory_under_the_one_that_superseded_it(app: MemoryApp) -> None:
    """Lisbon ← "I moved to Porto last month" ← "I moved to Braga this week"; Porto forgotten. Braga's
    hit named what it superseded, forgotten or not: the forgotten words were back in recall."""
    user = "withdrawn-" + uuid.uuid4().hex[:8]

    run = partial(done_ok, app, user)

    lisbon = await run("save_memory", {"content": "I live in Lisbon"})
    porto = await run("save_memory", {"content": "I moved to Porto last month"})
    braga = await run("save_memory", {"content": "I moved to Braga this week"})
    assert porto["supersedes"] == [lisbon["memory_id"]] and braga["supersedes"] == [porto["memory_id"]], braga
    named = await app.service.recall(user, Recall(query="Where do I live?"))
    assert [[r.excerpt for r in h.relations] for h in named.hits] == [["I moved to Porto last month"]]
    await run("forget_memory", {"memory_id": porto["memory_id"]})
    after = await app.service.recall(user, Recall(query="Where do I live?"))
    assert [h.memory.content for h in after.hits] == ["I moved to Braga this week"]
    assert [h.relations for h in after.hits] == [[]], after.hits


async def test_an_edit_that_takes_a_change_back_brings_back_what_it_had_superseded(app: MemoryApp) -> None:
    """"I moved to Porto last month" superseded "I live in Lisbon". Edited to say something else (the
    person meant port wine), it no longer changes where they live: Lisbon is current again, and the
    edited memory no longer names it. An edit that still says the move keeps Lisbon superseded."""
    for kept, words in ((False, "I like port wine from the Douro valley"),
                        (True, "I moved to Porto last month, to a flat by the river")):
        user = "editor-" + uuid.uuid4().hex[:8]
        run = partial(done_ok, app, user)
        lisbon = await run("save_memory", {"content": "I live in Lisbon"})
        porto = await run("save_memory", {"content": "I moved to Porto last month"})
        assert porto["supersedes"] == [lisbon["memory_id"]], porto
        edited = await run("update_memory", {"id": porto["memory_id"], "content": words})
        assert edited["updated"] and edited.get("reinstated", []) == ([] if kept else [lisbon["memory_id"]]), edited

        async def get(memory_id: str, who: str = user) -> dict:  # type: ignore[type-arg]
            found = await app.service.handle_query(QueryEnvelope(type="get_memory", tenant=who,
                                                                 payload={"memory_id": memory_id}))
            return found.result  # type: ignore[no-any-return]

        old, new = await get(lisbon["memory_id"]), await get(porto["memory_id"])
        assert old["status"] == ("superseded" if kept else "active"), old
        assert [w["memory_id"] for w in new.get("supersedes", [])] == ([lisbon["memory_id"]] if kept else []), new


async def test_an_edit_stopped_before_it_brought_back_what_it_withdrew_is_finished_by_its_retry(
    app: MemoryApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edit of "I moved to Porto last month" into "I like port wine…" wrote its new version, then
    the service stopped before Lisbon was current again. The command comes again (the bus redelivers
    it, or the client retries with its key): Lisbon is brought back, and the answer is the edit's
    (updated, the new version), not "unchanged"."""
    user = "resumed-" + uuid.uuid4().hex[:8]
    run = partial(done_ok, app, user)
    lisbon = await run("save_memory", {"content": "I live in Lisbon"})
    porto = await run("save_memory", {"content": "I moved to Porto last month"})
    assert porto["supersedes"] == [lisbon["memory_id"]], porto
    memories = app.service.memories
    reinstate = memories._reinstate

    monkeypatch.setattr(memories, "_reinstate", _stops)
    edit = cmd("update_memory", {"id": porto["memory_id"], "content": "I like port wine from the Douro valley"},
               tenant=user)
    with pytest.raises(RuntimeError):
        await app.service.handle_command(edit)

    async def get(memory_id: str) -> dict:  # type: ignore[type-arg]
        found = await app.service.handle_query(QueryEnvelope(type="get_memory", tenant=user,
                                                             payload={"memory_id": memory_id}))
        return found.result  # type: ignore[no-any-return]

    assert (await get(lisbon["memory_id"]))["status"] == "superseded"  # half-way: Lisbon still hidden
    assert (await get(porto["memory_id"]))["version"] == 2
    monkeypatch.setattr(memories, "_reinstate", reinstate)
    again = await app.service.handle_command(edit)
    assert again.ok, again.error
    assert again.result["updated"] and again.result["version"] == 2, again.result
    assert again.result.get("reinstated") == [lisbon["memory_id"]], again.result
    assert (await get(lisbon["memory_id"]))["status"] == "active"
    assert not (await get(porto["memory_id"])).get("supersedes")
    third = await app.service.handle_command(edit)  # its outcome is kept now: the same answer
    assert third.result == again.result
    other_key = await app.service.handle_command(cmd("update_memory", {
        "id": porto["memory_id"], "content": "I like port wine from the Douro valley"}, tenant=user))
    assert other_key.ok and not other_key.result["updated"]  # the same edit under a new key changes nothing


async def _stops(*args, **kwargs):  # type: ignore[no-untyped-def]
    """A step that stops half-way (a crash), for a retry to finish."""
    raise RuntimeError("stopped")


async def _get(app: MemoryApp, user: str, memory_id: str) -> dict:  # type: ignore[type-arg]
    found = await app.service.handle_query(QueryEnvelope(type="get_memory", tenant=user, payload={"memory_id": memory_id}))
    assert found.ok, found.error
    return found.result  # type: ignore[no-any-return]


async def test_a_memory_past_its_expiry_no_longer_hides_what_it_superseded(app: MemoryApp) -> None:
    """"I moved to Porto last month" superseded "I live in Lisbon", then was set to expire (a moment
    already past). Recall had nothing left about where the user lives: the expired memory leaves
    recall and Lisbon stayed superseded by it. The expiry round brings Lisbon back (once: a second
    round finds nothing); clearing the expiry makes Porto supersede it again."""
    user = "expiry-" + uuid.uuid4().hex[:8]
    run = partial(done_ok, app, user)
    lisbon = await run("save_memory", {"content": "I live in Lisbon"})
    porto = await run("save_memory", {"content": "I moved to Porto last month"})
    assert porto["supersedes"] == [lisbon["memory_id"]], porto
    await run("pin_memory", {"memory_id": porto["memory_id"], "forget_after": "2001-01-01T00:00:00Z"})
    assert await recall(app, "Where do I live?", tenant=user) == []  # the defect: nothing current

    async def send(tenant: str, command: ReinstateExpired, *, key: str) -> ReinstateExpiredResult:
        done = await app.service.handle_command(cmd("reinstate_expired", command.model_dump(mode="json"),
                                                    tenant=tenant, key=key))
        assert done.ok, done.error
        return ReinstateExpiredResult.model_validate(done.result)

    assert await expiry_round(app.store, send, utcnow()) >= 1  # (other tests' users may be found too)
    assert (await _get(app, user, lisbon["memory_id"]))["status"] == "active"
    assert await recall(app, "Where do I live?", tenant=user) == ["I live in Lisbon"]
    assert (user, UUID(porto["memory_id"])) not in {(t, m) for t, m, _ in await app.store.expired_superseders(utcnow(), 1000)}
    direct = await run("reinstate_expired", {"memory_id": porto["memory_id"]})
    assert direct["expired"] and not direct.get("reinstated"), direct  # done already: nothing twice

    await run("pin_memory", {"memory_id": porto["memory_id"], "clear_forget_after": True})
    assert (await _get(app, user, lisbon["memory_id"]))["status"] == "superseded"
    hits = (await app.service.recall(user, Recall(query="Where do I live?"))).hits
    assert [(h.memory.content, [r.excerpt for r in h.relations]) for h in hits] == [
        ("I moved to Porto last month", ["I live in Lisbon"])]
    not_yet = await run("reinstate_expired", {"memory_id": porto["memory_id"]})
    assert not not_yet["expired"] and (await _get(app, user, lisbon["memory_id"]))["status"] == "superseded"


async def test_a_retried_pin_that_clears_an_expiry_supersedes_again(app: MemoryApp,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Clearing an expired memory's expiry stopped between its new version and superseding again
    what the expiry round had brought back: the retry (same key) finds the expiry cleared already,
    and still finishes the first attempt's work. Before, Lisbon stayed current beside Porto."""
    user = "expiry-retry-" + uuid.uuid4().hex[:8]
    run = partial(done_ok, app, user)
    lisbon = await run("save_memory", {"content": "I live in Lisbon"})
    porto = await run("save_memory", {"content": "I moved to Porto last month"})
    await run("pin_memory", {"memory_id": porto["memory_id"], "forget_after": "2001-01-01T00:00:00Z"})
    back = await run("reinstate_expired", {"memory_id": porto["memory_id"]})
    assert back["reinstated"] == [lisbon["memory_id"]], back
    memories = app.service.memories
    carry_out = memories._carry_out

    monkeypatch.setattr(memories, "_carry_out", _stops)
    clear = cmd("pin_memory", {"memory_id": porto["memory_id"], "clear_forget_after": True}, tenant=user)
    with pytest.raises(RuntimeError):
        await app.service.handle_command(clear)
    assert (await _get(app, user, lisbon["memory_id"]))["status"] == "active"  # half-way
    assert (await _get(app, user, porto["memory_id"])).get("forget_after") is None
    monkeypatch.setattr(memories, "_carry_out", carry_out)
    again = await app.service.handle_command(clear)
    assert again.ok and again.result["updated"] and again.result["version"] == 3, again.result
    assert (await _get(app, user, lisbon["memory_id"]))["status"] == "superseded"
    assert await recall(app, "Where do I live?", tenant=user) == ["I moved to Porto last month"]
    third = await app.service.handle_command(clear)  # its outcome is kept now: the same answer
    assert third.result == again.result
    other_key = await app.service.handle_command(cmd("pin_memory", {
        "memory_id": porto["memory_id"], "clear_forget_after": True}, tenant=user))
    assert other_key.ok and not other_key.result["updated"]


async def test_the_service_brings_back_what_an_expired_memory_hid_by_itself(app: MemoryApp) -> None:
    """The same through the bus, as the running service does it: its expiry schedule sends
    ``reinstate_expired`` as a command, and another user's memories are left as they are."""
    user, other = "expiry-bus-" + uuid.uuid4().hex[:8], "expiry-other-" + uuid.uuid4().hex[:8]
    lisbon = await done_ok(app, user, "save_memory", {"content": "I live in Lisbon"})
    porto = await done_ok(app, user, "save_memory", {"content": "I moved to Porto last month"})
    kept = await done_ok(app, other, "save_memory", {"content": "I live in Lisbon"})
    await done_ok(app, other, "save_memory", {"content": "I moved to Porto last month"})
    await done_ok(app, user, "pin_memory", {"memory_id": porto["memory_id"], "forget_after": "2001-01-01T00:00:00Z"})
    stop = asyncio.Event()
    tasks = [*nats_entry.start(app.bus, app.service, stop), asyncio.create_task(expire_supersessions(app, stop, 0.2))]
    try:
        async with asyncio.timeout(20):
            while (await _get(app, user, lisbon["memory_id"]))["status"] != "active":
                await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert (await _get(app, other, kept["memory_id"]))["status"] == "superseded"
    assert await recall(app, "Where do I live?", tenant=user) == ["I live in Lisbon"]


async def test_a_question_about_my_sister_finds_what_her_name_says(app: MemoryApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """"My sister Ana is visiting next week" names her; "Ana loves sushi and ramen" says what she
    likes, without the word "sister". Asked "What does my sister like to eat?", recall also asks
    "What does Ana like to eat?" and fuses both: Ana's food comes first, where the question alone
    ranks the food memories that share its words ("my brother", "I like") above it. A name given
    in another project, which a recall of one project cannot see, is not used there."""
    user = "alias-" + uuid.uuid4().hex[:8]
    run = partial(done_ok, app, user)
    start = utcnow()
    for content in ["My sister Ana is visiting next week", "Ana loves sushi and ramen",
                    "My brother likes to eat pizza on Fridays", "I like to eat oatmeal for breakfast",
                    "My sister and I used to eat ice cream by the sea", "I cook pasta when friends visit"]:
        await run("save_memory", {"content": content, "project": "family"})
    await run("save_memory", {"content": "My sister Eva is a chef", "project": "work"})
    await run("save_memory", {"content": "Eva likes to eat dumplings", "project": "work"})

    question = "What does my sister like to eat?"
    with_alias = await recall(app, question, tenant=user, project="family", limit=6)
    assert with_alias[0] == "Ana loves sushi and ramen", with_alias
    assert not any("Eva" in c for c in with_alias)

    from services.memory.search import hops
    monkeypatch.setattr(hops, "MAX_ASKED_RELATIONS", 0)  # the question alone, for comparison
    alone = await recall(app, question, tenant=user, project="family", limit=6)
    assert alone.index("Ana loves sushi and ramen") > 0, alone
    monkeypatch.undo()

    # a recall as_of a moment reads the names given by then only (none before the first save)
    assert await app.store.alias_sources(user, "family", ["|sister"], 20, said_by=start) == []
    assert await app.store.alias_sources(user, "family", ["|sister"], 20, said_by=utcnow()) == [
        "My sister Ana is visiting next week"]

    everywhere = await recall(app, question, tenant=user, limit=8)  # all projects: both sisters' names
    assert {"Ana loves sushi and ramen", "Eva likes to eat dumplings"} <= set(everywhere[:4]), everywhere
    await run("forget_memory", {"content": "My sister Ana is visiting next week", "project": "family"})
    assert await app.store.alias_sources(user, "family", ["|sister"], 20) == []  # a forgotten memory names no one


async def test_projects_and_profile(app: MemoryApp) -> None:
    await app.service.handle_command(cmd("save_memory", {"content": "Sprint ends Friday", "project": "work"}))
    await app.service.handle_command(
        cmd("save_memory", {"category": "user_profile", "content": "Name is Alice, lives in Porto", "importance": 5})
    )
    await app.service.handle_command(
        cmd("save_memory", {"category": "preference", "content": "Prefers short answers", "importance": 4, "confidence": 0.9})
    )
    projects = await app.service.handle_query(QueryEnvelope(type="list_projects", tenant="alice", payload={}))
    assert {p["project"]: p["memories"] for p in projects.result["projects"]} == {"work": 1, "default": 2}
    profile = await app.service.handle_query(QueryEnvelope(type="profile", tenant="alice", payload={}))
    assert [m["content"] for m in profile.result["static"]] == ["Name is Alice, lives in Porto", "Prefers short answers"]
    assert [m["content"] for m in profile.result["dynamic"]] == ["Sprint ends Friday"]
    empty = await app.service.handle_query(QueryEnvelope(type="profile", tenant="bob", payload={}))
    assert empty.result == {"static": [], "dynamic": []}
    both = await app.service.handle_query(QueryEnvelope(
        type="recall", tenant="alice", payload={"query": "where does Alice live", "include_profile": True}))
    assert both.result["hits"][0]["memory"]["content"] == "Name is Alice, lives in Porto"
    assert both.result["profile"] == profile.result  # the same profile, in the same answer
    work = await app.service.handle_query(QueryEnvelope(
        type="recall", tenant="alice", payload={"query": "sprint", "project": "work", "include_profile": True}))
    assert [m["content"] for m in work.result["profile"]["dynamic"]] == ["Sprint ends Friday"]
    plain = await app.service.handle_query(QueryEnvelope(type="recall", tenant="alice", payload={"query": "sprint"}))
    assert plain.result["profile"] is None


async def test_profile_follows_every_write_although_cached(app: MemoryApp) -> None:
    async def profile() -> list[str]:
        reply = await app.service.handle_query(QueryEnvelope(type="profile", tenant="carol", payload={}))
        return [m["content"] for m in reply.result["static"] + reply.result["dynamic"]]

    await app.service.handle_command(cmd("save_memory", {"content": "Carol is vegetarian", "category": "preference"}, "carol"))
    assert await profile() == ["Carol is vegetarian"]
    assert await profile() == ["Carol is vegetarian"]  # served from the cache
    await app.service.handle_command(cmd("save_memory", {"content": "Carol moved to Porto"}, "carol"))
    assert set(await profile()) == {"Carol is vegetarian", "Carol moved to Porto"}
    await app.service.handle_command(cmd("forget_memory", {"content": "Carol is vegetarian"}, "carol"))
    assert await profile() == ["Carol moved to Porto"]


async def test_batch_hints_never_duplicate_or_replay(app: MemoryApp) -> None:
    """A fetched batch is prepared with one lookup of outcomes and saved contents; contents in the
    batch twice, retried commands and contents saved before the batch keep their usual answers."""
    done = cmd("save_memory", {"content": "Retried command content"}, key="batch-retry-0001")
    first = await app.service.handle_command(done)
    before = await app.service.handle_command(cmd("save_memory", {"content": "Saved before the batch"}))
    batch = [
        done,
        cmd("save_memory", {"content": "Saved before the batch"}),
        cmd("save_memory", {"content": "Twice in one batch"}),
        cmd("save_memory", {"content": "twice in one  batch"}),
        cmd("save_memory", {"content": "Only once in the batch"}),
    ]
    await app.service.prime_commands(batch)
    replies = await asyncio.gather(*(app.service.handle_command(c) for c in batch))
    assert replies[0] == first
    assert replies[1].result["memory_id"] == before.result["memory_id"] and replies[1].result["created"] is False
    assert {replies[2].result["memory_id"]} == {replies[3].result["memory_id"]}
    assert sorted(r.result["created"] for r in replies[2:4]) == [False, True]
    assert replies[4].result["created"] is True
    assert await app.store.counts() == {"active": 4}
    assert len(await events(app.bus)) == 4


async def test_content_saved_after_the_batch_lookup_is_not_duplicated(app: MemoryApp) -> None:
    """The batch lookup said 'new', then another command saved the same content: still one memory."""
    late = cmd("save_memory", {"content": "Raced content"})
    await app.service.prime_commands([late])
    other = await app.service.handle_command(cmd("save_memory", {"content": "Raced content"}))
    reply = await app.service.handle_command(late)
    assert reply.result["memory_id"] == other.result["memory_id"] and reply.result["created"] is False
    assert await app.store.counts() == {"active": 1}


async def test_content_written_by_another_path_after_the_lookup_is_not_duplicated(app: MemoryApp) -> None:
    """A keyed save writes the content (without consulting the batch hint); the hint is dropped."""
    late = cmd("save_memory", {"content": "I drink oolong every morning"})
    await app.service.prime_commands([late])
    keyed = await app.service.handle_command(
        cmd("save_memory", {"content": "I drink oolong every morning", "category": "preference"})
    )
    reply = await app.service.handle_command(late)
    assert reply.result["memory_id"] == keyed.result["memory_id"] and reply.result["created"] is False
    assert await app.store.counts() == {"active": 1}


async def test_projector_skips_what_commands_already_projected(app: MemoryApp) -> None:
    """Events the command path projected inline cost the projector no embedding and no write."""
    for text in ("Skipped one", "Skipped two", "Skipped three"):
        await app.service.handle_command(cmd("save_memory", {"content": text}))
    inner = app.service.encoders.embedder.inner  # type: ignore[attr-defined]
    calls: list[int] = []
    original = inner.embed

    def counting(texts):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return original(texts)

    inner.embed = counting
    stop = asyncio.Event()
    tasks = nats_entry.start(app.bus, app.service, stop)
    try:
        async with asyncio.timeout(20):
            while await app.store.checkpoint("memory-projector") < 3:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        inner.embed = original
    assert calls == []
    assert await app.store.counts() == {"active": 3}


async def test_a_batch_of_contents_already_saved_embeds_nothing(app: MemoryApp) -> None:
    """Re-importing what is already there is answered 'unchanged' without embedding it again."""
    await app.service.handle_command(cmd("save_memory", {"content": "Imported once. Then again."}))
    inner = app.service.encoders.embedder.inner  # type: ignore[attr-defined]
    calls: list[list[str]] = []
    original = inner.embed
    inner.embed = lambda texts: calls.append(list(texts)) or original(texts)
    try:
        again = [cmd("save_memory", {"content": "Imported once. Then again."}),
                 cmd("save_memory", {"content": "New in this import. Yes."})]
        await app.service.prime_commands(again)
        replies = [await app.service.handle_command(c) for c in again]
    finally:
        inner.embed = original
    assert [r.result["created"] for r in replies] == [False, True]
    assert calls == [["New in this import.", "Yes."]]


#: The answer shares no word with the question but "turtles"; the others share several.
TURTLE_TURNS = (
    "Nate: How long have you had your dog? How long do dogs live?",
    "Nate: I've had my turtles for 3 years now, they are so calm.",
    "Nate: I have had a long week, how have you been?",
    "Joanna: I have been writing screenplays for a long time.",
)


async def test_rerank_reorders_the_candidates_by_the_cross_encoder(app: MemoryApp) -> None:
    for content in TURTLE_TURNS:
        assert (await app.service.handle_command(cmd("save_memory", {"content": content}))).ok
    question = "For how long has Nate had his turtles?"
    plain = await app.service.recall("alice", Recall(query=question, limit=4))
    ranked = await app.service.recall("alice", Recall(query=question, limit=2, rerank=True))
    assert len(ranked.hits) == 2
    assert ranked.hits[0].memory.content == "Nate: I've had my turtles for 3 years now, they are so calm."
    assert 0 < ranked.hits[1].score < ranked.hits[0].score <= 1  # fused rank scores, not RRF sums
    assert {h.memory.id for h in ranked.hits} <= {h.memory.id for h in plain.hits}
    # the cross-encoder puts the answer first by a wide margin, so the fusion with the search's order
    # (exact rule: tests/unit/test_reranker.py) keeps it first; the search's own order of these
    # short turns varies between calls (RRF ties), so the exact scores are not compared here
    assert app.service.encoders.reranker is not None
    relevance = app.service.encoders.reranker.score(question, [h.memory.content for h in plain.hits]).tolist()
    assert plain.hits[max(range(len(relevance)), key=relevance.__getitem__)].memory.content == ranked.hits[0].memory.content
    again = await app.service.recall("alice", Recall(query=question, limit=2, rerank=True))
    assert again == ranked  # deterministic


async def test_rerank_reads_each_memory_after_its_context(app: MemoryApp) -> None:
    # the two answers say nothing of what they answer; only their contexts do
    saves = (("Nate: Every Saturday morning.", "Joanna: When do you feed your turtles?"),
             ("Nate: Every Sunday morning.", "Joanna: When do you go to the gym?"))
    questions = (("When does Nate feed his turtles?", saves[0][0]), ("When does Nate go to the gym?", saves[1][0]))
    for content, context in saves:
        assert (await app.service.handle_command(cmd("save_memory", {"content": content, "context": context}))).ok
    for question, answer in questions:
        ranked = await app.service.recall("alice", Recall(query=question, limit=2, rerank=True))
        assert [h.memory.content for h in ranked.hits][0] == answer
        assert ranked.hits[0].memory.context is not None
    # the contents alone would put the same answer first for both questions
    assert app.service.encoders.reranker is not None
    firsts = {int(app.service.encoders.reranker.score(q, [c for c, _ in saves]).argmax()) for q, _ in questions}
    assert len(firsts) == 1


async def test_rerank_without_a_reranker_is_a_clear_error(app: MemoryApp) -> None:
    app.service.encoders.reranker = None
    reply = await app.service.handle_query(
        QueryEnvelope(type="recall", tenant="alice", payload={"query": "tea", "rerank": True})
    )
    assert not reply.ok and reply.error is not None
    assert reply.error.field == "rerank" and "ENGRAM_RERANKER=none" in reply.error.message


async def test_hybrid_recall_reorders_its_candidates_by_late_interaction(app: MemoryApp) -> None:
    for content in TURTLE_TURNS:
        assert (await app.service.handle_command(cmd("save_memory", {"content": content}))).ok
    question = "For how long has Nate had his turtles?"
    encoder = app.service.encoders.late_encoder
    assert encoder is not None
    ranked = await app.service.recall("alice", Recall(query=question, limit=2))
    assert ranked.hits[0].memory.content == "Nate: I've had my turtles for 3 years now, they are so calm."
    assert 0 < ranked.hits[1].score < ranked.hits[0].score <= 1  # fused rank scores, not RRF sums
    # exactly: the hybrid search's candidates, fused with MaxSim over the tokens stored at save, in
    # the learned order (services/memory/domain/candidate_order.py)
    app.service.encoders.late_encoder = None
    try:
        plain = await app.service.recall("alice", Recall(query=question, limit=50))
    finally:
        app.service.encoders.late_encoder = encoder
    stored = await app.store.late_tokens("alice", [h.memory.id for h in plain.hits])
    matrices = [unpack(stored[h.memory.id], encoder.dim) for h in plain.hits]
    assert all(m is not None and len(m) for m in matrices)
    late = maxsim(encoder.encode_query(question), matrices).tolist()  # type: ignore[arg-type]
    order = late_order(question, [h.memory for h in plain.hits], [h.score for h in plain.hits], late)[:2]
    expected = [RecallHit(memory=plain.hits[i].memory, score=round(score, 6)) for i, score in order]
    assert ranked.hits == expected
    assert await app.service.recall("alice", Recall(query=question, limit=2)) == ranked  # deterministic
    # keyword and dense recall stay literal: scores are the engine's
    keyword = await app.service.recall("alice", Recall(query=question, limit=2, mode="keyword"))
    assert keyword.hits[0].score > 1  # a BM25 score, not a fused rank score


async def test_memories_saved_without_tokens_are_encoded_per_recall(app: MemoryApp, caplog) -> None:  # type: ignore[no-untyped-def]
    encoder = app.service.encoders.late_encoder
    app.service.encoders.late_encoder = None  # as a server with ENGRAM_LATE_INTERACTION=none writes them
    try:
        for content, context in (("Nate: Every Saturday morning.", "Joanna: When do you feed your turtles?"),
                                 ("Nate: Every Sunday morning.", "Joanna: When do you go to the gym?")):
            payload = {"content": content, "context": context}
            assert (await app.service.handle_command(cmd("save_memory", payload))).ok
    finally:
        app.service.encoders.late_encoder = encoder
    rows = await app.store.pool.fetch(f"SELECT late_tokens FROM {app.store.s}.memories")
    assert [r["late_tokens"] for r in rows] == [None, None]
    with caplog.at_level("WARNING", logger="engram.memory"):
        first = await recall(app, "When does Nate go to the gym?", limit=2)
        again = await recall(app, "When does Nate feed his turtles?", limit=2)
    assert first[0] == "Nate: Every Sunday morning." and again[0] == "Nate: Every Saturday morning."
    warnings = [r.getMessage() for r in caplog.records if "late-interaction" in r.getMessage()]
    assert len(warnings) == 1 and "engram replay memory" in warnings[0]  # said once, with what to do


async def test_more_saves_at_once_than_the_pool_has_connections_all_finish(app: MemoryApp) -> None:
    """A save projects inline in one transaction; its embedding (which reads and fills the embedding
    cache through the pool) is computed before that transaction opens. Computed inside, 12 saves at
    once held all 10 connections and each waited for an 11th: the service hung."""
    pool_size = app.store.pool.get_max_size()
    contents = [f"Alice's errand {i}: buy {i} oranges for the picnic" for i in range(pool_size + 6)]
    replies = await asyncio.wait_for(
        asyncio.gather(*(app.service.handle_command(cmd("save_memory", {"content": c})) for c in contents)), 120)
    assert all(r.ok and r.result["created"] for r in replies), [r.error for r in replies if not r.ok]
    assert len({r.result["memory_id"] for r in replies}) == len(contents)


async def test_an_update_supersedes_what_its_new_content_changes(app: MemoryApp) -> None:
    """A new version written by update_memory is judged like a save (issue 30): 'I've been living in
    Warsaw for 5 years' is superseded when the keyed location is updated to Lisbon; retried, nothing
    more is appended."""
    lived = await app.service.handle_command(cmd("save_memory", {"content": "I've been living in Warsaw for 5 years"}))
    keyed = await app.service.handle_command(cmd("save_memory", {
        "content": "I'm based in Warsaw", "category": "user_profile", "memory_key": "profile.location"}))
    assert lived.ok and keyed.ok
    update = {"memory_key": "profile.location", "content": "I just relocated to Lisbon"}
    moved = await app.service.handle_command(cmd("update_memory", update, key="move-to-lisbon-1"))
    assert moved.ok and moved.result["version"] == 2, moved
    old = await app.store.get("alice", UUID(lived.result["memory_id"]))
    assert old is not None and old.status.value == "superseded" and old.superseded_by is not None
    assert str(old.superseded_by.memory_id) == keyed.result["memory_id"]
    before = len(await events(app.bus))
    again = await app.service.handle_command(cmd("update_memory", update, key="move-to-lisbon-1"))
    assert again.ok and again.result == moved.result and len(await events(app.bus)) == before
    assert await recall(app, "where does the user live") == ["I just relocated to Lisbon"]


async def test_a_profile_as_of_a_moment_is_cached_until_the_user_writes(app: MemoryApp) -> None:
    from contracts.memory import GetProfile

    later = GetProfile(as_of="2100-01-01")
    await app.service.handle_command(cmd("save_memory", {"content": "I collect vinyl records"}))
    first = await app.service.reads.cached_profile("alice", later)
    assert [m.content for m in first.dynamic] == ["I collect vinyl records"]
    assert await app.service.reads.cached_profile("alice", later) is first  # asked again: the same answer
    await app.service.handle_command(cmd("save_memory", {"content": "My sister Ana lives in Porto"}))
    again = await app.service.reads.cached_profile("alice", later)
    assert sorted(m.content for m in again.dynamic) == ["I collect vinyl records", "My sister Ana lives in Porto"]
