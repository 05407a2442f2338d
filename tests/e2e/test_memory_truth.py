"""Memories that stay true, from outside through the `mcp` SDK client against the running stack:
a changed fact supersedes the old one (plain `memory` saves, no key), recall puts the current one
first and marks the old one, recall `as_of` a moment between the two answers with the old one; the
same through daily logs and the extractor (a keyed fact's versions); recall_memory and the profile
as of a moment (MCP and REST); a fact said in many logs is one memory counting every saying; REST
`POST /v1/recall` takes `as_of` too. Waits are bounded
polls; nothing is timed."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.e2e.test_daily_log_tools import key_for_another_project, maintainer
from tests.e2e.test_extraction_end_to_end import call, session, text_of
from tests.e2e.test_project_restriction import auth

pytestmark = pytest.mark.e2e

_HIT = re.compile(r"^\[(\d+)\] \([\d.]+\) (.*?) — ", re.MULTILINE)


def hits_of(text: str) -> list[str]:
    """The contents of a recall's hits, in rank order."""
    return [m.group(2) for m in _HIT.finditer(text)]


async def recall(client: Any, query: str, project: str, **more: Any) -> str:
    return text_of(await client.call_tool("recall", {"query": query, "containerTag": project,
                                                     "includeProfile": False, **more}))


async def test_a_moved_user_is_recalled_where_they_live_now_and_where_they_lived_then(running) -> None:  # type: ignore[no-untyped-def]
    project = "truth-" + uuid.uuid4().hex[:8]
    async with session(running) as client:
        first = text_of(await client.call_tool("memory", {"content": "I live in Lisbon", "containerTag": project}))
        assert first.startswith("Saved"), first
        await asyncio.sleep(0.05)
        between = datetime.now(UTC).isoformat()
        await asyncio.sleep(0.05)
        second = text_of(await client.call_tool("memory", {"content": "I moved to Berlin last month",
                                                           "containerTag": project}))
        assert "replaces 1 older memory" in second, second

        now = await recall(client, "where does the user live", project)
        hits = hits_of(now)
        assert hits and "Berlin" in hits[0], now
        assert not any("Lisbon" in h for h in hits), now  # the stale fact is no hit...
        assert "⇐ “I live in Lisbon”" in now, now  # ...it is named under the fact that replaced it

        then = await recall(client, "where does the user live", project, as_of=between)
        hits = hits_of(then)
        assert hits and hits[0] == "I live in Lisbon", then
        assert not any("Berlin" in h for h in hits), then  # nothing said after that moment
        assert "⇒ “I moved to Berlin last month”" in then, then  # what changed since is marked

        before_all = await recall(client, "where does the user live", project, as_of="2001-01-01")
        assert hits_of(before_all) == [], before_all

        # recall_memory and the profile as of the same moment: Lisbon, marked, and not Berlin
        listed = (await call(client, "recall_memory", containerTag=project, as_of=between))["memories"]
        assert [m["content"] for m in listed] == ["I live in Lisbon"], listed
        assert listed[0]["changed_since"]["kind"] == "superseded_by", listed
        assert "Berlin" in listed[0]["changed_since"]["excerpt"], listed
        current = (await call(client, "recall_memory", containerTag=project))["memories"]
        assert [m["content"] for m in current] == ["I moved to Berlin last month"], current
        assert current[0]["changed_since"] is None
        assert (await call(client, "recall_memory", containerTag=project, as_of="2001-01-01"))["memories"] == []
        with_profile = text_of(await client.call_tool("recall", {"query": "where does the user live",
                                                                 "containerTag": project, "as_of": between}))
        profile_part = with_profile.split("## 1 memories")[0]
        assert "I live in Lisbon  ⇒ “I moved to Berlin last month”" in profile_part, with_profile
        assert "- I moved to Berlin" not in profile_part, with_profile

        bad = await client.call_tool("recall", {"query": "x", "containerTag": project, "as_of": "last tuesday"})
        assert bad.is_error and "as_of" in text_of(bad)

        # the old memory is kept, superseded, pointing at the new one
        lisbon_id = re.search(r"⇐ “I live in Lisbon” \(([0-9a-f-]{36})\)", now).group(1)  # type: ignore[union-attr]
        old = await call(client, "get_memory", memory_id=lisbon_id)
        assert old["status"] == "superseded" and old["valid_until"] and "berlin" in old["superseded_by"]["reason"]

        # the graph draws it: Berlin's memory updates Lisbon's (the projection follows the log: a bounded wait)
        updates: list[dict[str, Any]] = []
        for _ in range(300):
            page = await call(client, "fetch-graph-data", project=project)
            updates = [e for e in page["edges"] if e["type"] == "updates" and lisbon_id in e["target"]]
            if updates:
                break
            await asyncio.sleep(0.1)
        assert updates and updates[0]["source"] != updates[0]["target"], page

        # the graph as of the moment between: Lisbon's node, not Berlin's (nor the edge between them)
        then_page = await call(client, "fetch-graph-data", project=project, as_of=between)
        memories = {n["id"]: n for n in then_page["nodes"] if n["type"] == "memory"}
        assert list(memories) == [lisbon_id], then_page
        assert memories[lisbon_id]["detail"]["changed_since"], then_page  # superseded since: it says so
        assert not [e for e in then_page["edges"] if e["type"] == "updates"], then_page
        assert (await call(client, "fetch-graph-data", project=project, as_of="2001-01-01"))["nodes"] == []
        bad_graph = await client.call_tool("fetch-graph-data", {"project": project, "as_of": "someday"})
        assert bad_graph.is_error and "as_of" in text_of(bad_graph), text_of(bad_graph)

    # REST: the same question as of the same moment
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        got = h.post("/recall", json={"query": "where does the user live", "project": project, "as_of": between})
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["hits"][0]["memory"]["content"] == "I live in Lisbon"
        assert body["hits"][0]["relations"][0]["kind"] == "superseded_by"
        refused = h.post("/recall", json={"query": "x", "project": project, "as_of": "soon"})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "as_of", refused.text
        listed = h.get("/memories", params={"project": project, "as_of": between})
        assert listed.status_code == 200, listed.text
        assert [m["content"] for m in listed.json()["memories"]] == ["I live in Lisbon"], listed.text
        profile = h.get("/profile", params={"project": project, "as_of": between})
        assert profile.status_code == 200, profile.text
        recent = profile.json()["dynamic"]
        assert [m["content"] for m in recent] == ["I live in Lisbon"], profile.text
        assert recent[0]["changed_since"]["kind"] == "superseded_by", profile.text
        refused = h.get("/memories", params={"project": project, "as_of": "yesterday"})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "as_of", refused.text
        # the list by status: the superseded fact, every one, and refused beside as_of
        def listed_as(status: str) -> list[str]:
            got = h.get("/memories", params={"project": project, "status": status})
            assert got.status_code == 200, got.text
            return sorted(m["content"] for m in got.json()["memories"])

        assert listed_as("superseded") == ["I live in Lisbon"]
        assert listed_as("current") == ["I moved to Berlin last month"]
        assert listed_as("all") == ["I live in Lisbon", "I moved to Berlin last month"]
        assert listed_as("forgotten") == []
        # as of a moment, the status is the one of that moment
        def listed_then(status: str, moment: str) -> list[str]:
            got = h.get("/memories", params={"project": project, "status": status, "as_of": moment})
            assert got.status_code == 200, got.text
            return sorted(m["content"] for m in got.json()["memories"])

        assert listed_then("all", between) == ["I live in Lisbon"]
        assert listed_then("superseded", between) == []  # not yet then
        assert listed_then("superseded", "2100-01-01") == ["I live in Lisbon"]
        assert listed_then("all", "2100-01-01") == ["I live in Lisbon", "I moved to Berlin last month"]
        assert listed_then("forgotten", "2100-01-01") == []
        bad = h.get("/memories", params={"project": project, "status": "stale"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "status", bad.text


async def _wait_processed(client: Any, log_ids: list[str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = [(await call(client, "get_daily_log", id=i))["log"]["processing_status"] for i in log_ids]
        if all(s == "processed" for s in states):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"logs not processed in time: {log_ids}")


async def test_the_same_through_daily_logs_and_a_fact_said_in_twenty_logs_is_one_memory(running) -> None:  # type: ignore[no-untyped-def]
    project = "truth-logs-" + uuid.uuid4().hex[:8]
    async with session(running, await maintainer(running)) as client:
        lisbon = await call(client, "save_daily_log", log_date="2025-03-10", containerTag=project, turns=[
            {"speaker": "user", "text": "I live in Lisbon."}, {"speaker": "assistant", "text": "Lovely city."}])
        berlin = await call(client, "save_daily_log", log_date="2025-06-10", containerTag=project, turns=[
            {"speaker": "user", "text": "I moved to Berlin."}, {"speaker": "assistant", "text": "Big change!"}])
        await _wait_processed(client, [lisbon["id"], berlin["id"]])

        now = await recall(client, "where does the user live", project)
        assert "Berlin" in hits_of(now)[0] and not any("Lisbon" in h for h in hits_of(now)), now
        then = await recall(client, "where does the user live", project, as_of="2025-04-01")
        assert "Lisbon" in hits_of(then)[0] and not any("Berlin" in h for h in hits_of(then)), then
        # the keyed fact as it stood then, read from the event log, marked with the newer version
        listed = (await call(client, "recall_memory", containerTag=project, keyword="Lisbon", as_of="2025-04-01"))
        assert [("Lisbon" in m["content"], m["changed_since"]["kind"]) for m in listed["memories"]] \
            == [(True, "newer_version")], listed
        assert "Berlin" in listed["memories"][0]["changed_since"]["excerpt"], listed
        assert (await call(client, "recall_memory", containerTag=project, keyword="Lisbon"))["memories"] == []

        ids = []
        for day in range(1, 21):
            saved = await call(client, "save_daily_log", log_date=f"2025-08-{day:02d}", containerTag=project, turns=[
                {"speaker": "user", "text": "I love green tea."}, {"speaker": "assistant", "text": "Noted."}])
            ids.append(saved["id"])
        await _wait_processed(client, ids)
        found = await recall(client, "what does the user like to drink", project)
        tea = [h for h in hits_of(found) if "green tea" in h]
        assert len(tea) == 1, found  # one memory...
        assert "×20" in found, found  # ...said twenty times
        tea_id = (await call(client, "recall_memory", containerTag=project, keyword="green tea"))["memories"][0]["id"]
        sayings = (await call(client, "get_memory_history", memory_id=tea_id))["sayings"]
        assert sorted(s["provenance"]["log_id"] for s in sayings) == sorted(ids), sayings  # ...with twenty sources
        assert sorted(s["said_at"][:10] for s in sayings) == [f"2025-08-{day:02d}" for day in range(1, 21)], sayings


async def test_a_question_about_my_sister_is_answered_by_what_her_name_says(running) -> None:  # type: ignore[no-untyped-def]
    """Over MCP (the SDK client): "My sister Marisol is a pilot", then "Marisol flies to Tokyo every
    month"; "Where does my sister fly to?" puts the Tokyo memory first, though it never says
    "sister". A key restricted to another project asks the same: none of these memories, and no
    name from them, reaches it (its own "my sister" memory is all it finds)."""
    project = "aliases-" + uuid.uuid4().hex[:8]
    elsewhere = await key_for_another_project(running)
    async with session(running) as client:
        for content in ["My sister Marisol is a pilot", "Marisol flies to Tokyo every month",
                        "My brother flies kites at the beach", "I fly to Lisbon for work twice a year"]:
            saved = await client.call_tool("memory", {"content": content, "containerTag": project})
            assert not saved.is_error, saved.content
        found = hits_of(await recall(client, "Where does my sister fly to?", project))
        assert found[0] == "Marisol flies to Tokyo every month", found
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(elsewhere), timeout=60) as h:
        saved = h.post("/memories", json={"content": "My sister enjoys long train rides"})
        assert saved.status_code == 201, saved.text
        hits = h.post("/recall", json={"query": "Where does my sister fly to?"}).json()["hits"]
        assert hits and all(x["memory"]["project"] == "elsewhere" for x in hits), hits
        assert not any("Marisol" in x["memory"]["content"] for x in hits), hits


async def test_a_doubtful_change_is_flagged_listed_and_settled_and_a_memory_can_be_pinned(running) -> None:  # type: ignore[no-untyped-def]
    project = "truth-flag-" + uuid.uuid4().hex[:8]
    elsewhere = await key_for_another_project(running)
    async with session(running) as client:
        await client.call_tool("memory", {"content": "My dog is called Rex", "containerTag": project})
        said = text_of(await client.call_tool("memory", {"content": "My dog is called Bruno", "containerTag": project}))
        assert "flagged for review" in said, said  # a second dog, or Rex renamed? not decided silently

        listed = (await call(client, "list_conflicts", containerTag=project))["conflicts"]
        assert len(listed) == 1, listed
        flag = listed[0]
        assert (flag["memory"]["content"], flag["other"]["content"]) == ("My dog is called Bruno", "My dog is called Rex")
        both = await recall(client, "what is the dog called", project)
        assert {"My dog is called Bruno", "My dog is called Rex"} <= set(hits_of(both)), both  # both stand meanwhile

    # a key restricted to another project neither sees the flag nor settles it
    async with session(running, auth(elsewhere)) as stranger:
        assert (await call(stranger, "list_conflicts"))["conflicts"] == []
        refused = await stranger.call_tool("settle_conflict", {"memory_id": flag["memory"]["id"],
                                                               "other_id": flag["other"]["id"], "keep": "memory"})
        assert refused.is_error and "memory_id" in text_of(refused), text_of(refused)

    async with session(running) as client:
        settled = await call(client, "settle_conflict", memory_id=flag["memory"]["id"], other_id=flag["other"]["id"],
                             keep="memory", reason="Rex was renamed Bruno", containerTag=project)
        assert settled["settled"] and settled["superseded"] == flag["other"]["id"], settled
        assert (await call(client, "list_conflicts", containerTag=project))["conflicts"] == []
        after = await recall(client, "what is the dog called", project)
        assert hits_of(after)[0] == "My dog is called Bruno" and "My dog is called Rex" not in hits_of(after), after
        assert "⇐ “My dog is called Rex”" in after, after
        rex = await call(client, "get_memory", memory_id=flag["other"]["id"])
        assert rex["status"] == "superseded" and rex["superseded_by"]["decided_by"] == "agent"
        assert rex["superseded_by"]["reason"] == "Rex was renamed Bruno"
        again = await call(client, "settle_conflict", memory_id=flag["memory"]["id"], other_id=flag["other"]["id"],
                           keep="both", containerTag=project)
        assert not again["settled"]  # nothing open any more: says so, changes nothing

        pinned = await call(client, "pin_memory", memory_id=flag["memory"]["id"], pinned=True, containerTag=project)
        assert pinned["version"] > 1
        both_ways = await client.call_tool("pin_memory", {"memory_id": flag["memory"]["id"], "containerTag": project,
                                                          "forget_after": "2999-01-01T00:00:00Z",
                                                          "clear_forget_after": True})
        assert both_ways.is_error and "clear_forget_after" in text_of(both_ways)

    # REST: the same operations
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        assert h.get("/memories/conflicts", params={"project": project}).json() == {"conflicts": []}
        expiry = h.post(f"/memories/{flag['memory']['id']}/pin",
                        json={"project": project, "forget_after": "2999-01-01T00:00:00Z"})
        assert expiry.status_code == 200, expiry.text
        view = h.get(f"/memories/{flag['memory']['id']}").json()
        assert view["pinned"] is True and view["forget_after"].startswith("2999-01-01"), view
        empty = h.post(f"/memories/{flag['memory']['id']}/pin", json={"project": project})
        assert empty.status_code == 422, empty.text
        # an expiry already past: the memory leaves recall at once, even pinned; its history stays
        gone = h.post(f"/memories/{flag['memory']['id']}/pin", json={"project": project, "forget_after": "2001-01-01T00:00:00Z"})
        assert gone.status_code == 200, gone.text
        hits = h.post("/recall", json={"query": "what is the dog called", "project": project}).json()["hits"]
        assert flag["memory"]["id"] not in [hit["memory"]["id"] for hit in hits], hits
        assert h.get(f"/memories/{flag['memory']['id']}").json()["status"] == "active"


async def test_a_merge_is_undone_from_the_history(running) -> None:  # type: ignore[no-untyped-def]
    """'I'm living in Dublin' was taken for the same fact said again; unmerging that version makes it a
    memory of its own (MCP), once only; REST refuses a version that is not a merge, and another user
    reaches nothing."""
    project = "truth-unmerge-" + uuid.uuid4().hex[:8]
    async with session(running) as client:
        first = await call(client, "save_memory", category="user_profile", content="I live in Dublin",
                           memory_key="profile.home", containerTag=project)
        again = text_of(await client.call_tool("memory", {"content": "I'm living in Dublin", "containerTag": project}))
        assert "counted as said again" in again, again
        holder = first["memory_id"]
        history = (await call(client, "get_memory_history", memory_id=holder))["versions"]
        merge = [v for v in history if v["event"] == "MemoryMerged"]
        assert len(merge) == 1, history

        done = await call(client, "unmerge_memory", memory_id=holder, version=merge[0]["version"],
                          containerTag=project)
        assert done["unmerged"] and done["repeats"] == 1 and done["split_id"] != holder, done
        split = await call(client, "get_memory", memory_id=done["split_id"])
        assert split["content"] == "I'm living in Dublin" and split["status"] == "active", split
        assert (await call(client, "get_memory", memory_id=holder))["repeats"] == 1
        # asked again: says so and creates nothing more
        twice = await call(client, "unmerge_memory", memory_id=holder, version=merge[0]["version"],
                           containerTag=project)
        assert not twice["unmerged"] and twice["split_id"] == done["split_id"], twice
        listed = (await call(client, "recall_memory", containerTag=project, keyword="Dublin"))["memories"]
        assert sorted(m["content"] for m in listed) == ["I live in Dublin", "I'm living in Dublin"], listed
        last = (await call(client, "get_memory_history", memory_id=holder))["versions"][-1]
        assert last["event"] == "MemoryUnmerged", last

    with httpx.Client(base_url=running.base_url + "/v1", timeout=60) as h:
        not_a_merge = h.post(f"/memories/{holder}/unmerge", headers=auth(running.key),
                             json={"project": project, "version": 1 + len(history) + 5})
        assert not_a_merge.status_code == 409 and not_a_merge.json()["error"]["field"] == "version", not_a_merge.text
        stranger = h.post(f"/memories/{holder}/unmerge", headers=auth(running.other_key),
                          json={"project": project, "version": merge[0]["version"]})
        assert stranger.status_code == 404, stranger.text


async def test_two_memories_of_one_fact_are_merged_by_an_agent_and_the_merge_undone(running) -> None:  # type: ignore[no-untyped-def]
    """merge_memory (MCP): the duplicate becomes a saying of the memory that stays (×2, its words kept)
    and leaves recall; the same request again merges nothing; unmerge_memory gives it back. REST
    refuses a memory merged into itself (409), two projects (409), another user's memory and a key
    restricted to another project (404), and a request naming no target (422, the field named)."""
    project = "truth-merge-" + uuid.uuid4().hex[:8]
    elsewhere = await key_for_another_project(running)
    async with session(running) as client:
        keep = await call(client, "save_memory", category="preference", content="I go bouldering at Klimmhalle",
                          containerTag=project)
        dup = await call(client, "save_memory", category="preference", content="Klimmhalle is my bouldering gym",
                         containerTag=project)
        assert dup["created"] and dup["memory_id"] != keep["memory_id"], dup  # (the rules did not fold them)
        other = await call(client, "save_memory", category="preference", content="Klimmhalle is my bouldering gym",
                           containerTag=project + "-b")

    async with session(running, auth(elsewhere)) as stranger:
        refused = await stranger.call_tool("merge_memory", {"memory_id": dup["memory_id"], "into": keep["memory_id"]})
        assert refused.is_error and "memory_id" in text_of(refused), text_of(refused)

    with httpx.Client(base_url=running.base_url + "/v1", timeout=60) as h:
        url = f"/memories/{dup['memory_id']}/merge"
        itself = h.post(url, headers=auth(running.key), json={"project": project, "into": dup["memory_id"]})
        assert itself.status_code == 409 and itself.json()["error"]["field"] == "into", itself.text
        across = h.post(url, headers=auth(running.key), json={"project": project, "into": other["memory_id"]})
        assert across.status_code == 409 and across.json()["error"]["field"] == "into", across.text
        stranger = h.post(url, headers=auth(running.other_key), json={"project": project, "into": keep["memory_id"]})
        assert stranger.status_code == 404, stranger.text
        nothing = h.post(url, headers=auth(running.key), json={"project": project})
        assert nothing.status_code == 422 and "into" in nothing.text, nothing.text

    async with session(running) as client:
        merged = await call(client, "merge_memory", memory_id=dup["memory_id"], into=keep["memory_id"],
                            reason="the same gym", containerTag=project)
        assert merged["merged"] and merged["repeats"] == 2 and merged["memory_id"] == keep["memory_id"], merged
        again = await call(client, "merge_memory", memory_id=dup["memory_id"], into=keep["memory_id"],
                           containerTag=project)
        assert not again["merged"] and again["repeats"] == 2, again
        found = await recall(client, "where does the user go bouldering", project)
        assert [h for h in hits_of(found) if "Klimmhalle" in h] == ["I go bouldering at Klimmhalle"], found
        assert "×2" in found, found
        gone = (await call(client, "get_memory_history", memory_id=dup["memory_id"]))["versions"][-1]
        assert gone["status"] == "forgotten" and keep["memory_id"] in gone["forget_reason"], gone
        assert "the same gym" in gone["forget_reason"], gone
        versions = (await call(client, "get_memory_history", memory_id=keep["memory_id"]))["versions"]
        assert versions[-1]["event"] == "MemoryMerged", versions

        undone = await call(client, "unmerge_memory", memory_id=keep["memory_id"], version=versions[-1]["version"],
                            containerTag=project)
        assert undone["unmerged"] and undone["repeats"] == 1, undone
        split = await call(client, "get_memory", memory_id=undone["split_id"])
        assert split["content"] == "Klimmhalle is my bouldering gym" and split["status"] == "active", split


async def test_a_memory_moves_to_another_project_with_its_sayings_and_key(running) -> None:  # type: ignore[no-untyped-def]
    """move_memory (MCP) and POST /v1/memories/{id}/move: the memory arrives in the other project with
    its sayings (×2) and its key (found by key there), the one left behind is forgotten naming it; the
    same request again moves nothing; a key restricted to a project moves nothing out of it (403
    naming to_project), another user reaches nothing (404), a move into its own project or onto a key
    held there is a conflict (409)."""
    home, work = "move-home-" + uuid.uuid4().hex[:6], "move-work-" + uuid.uuid4().hex[:6]
    elsewhere = await key_for_another_project(running)
    with httpx.Client(base_url=running.base_url + "/v1", timeout=60) as h:
        tea = h.post("/memories", headers=auth(running.key), json={
            "content": "I drink green tea every morning", "project": home}).json()
        again = h.post("/memories", headers=auth(running.key), json={
            "content": "Actually, I really drink green tea every morning", "project": home}).json()
        assert again["merged"] and again["memory_id"] == tea["memory_id"], (again, tea)
    async with session(running) as client:
        city = await call(client, "save_memory", category="user_profile", content="I live in Porto",
                          memory_key="profile.city", containerTag=home)
        await call(client, "save_memory", category="user_profile", content="I live in Braga",
                   memory_key="profile.city", containerTag=work)

    with httpx.Client(base_url=running.base_url + "/v1", timeout=60) as h:
        url = f"/memories/{tea['memory_id']}/move"
        own = h.post(url, headers=auth(running.key), json={"to_project": home})
        assert own.status_code == 409 and own.json()["error"]["field"] == "to_project", own.text
        stranger = h.post(url, headers=auth(running.other_key), json={"to_project": work})
        assert stranger.status_code == 404, stranger.text
        restricted = h.post(url, headers=auth(elsewhere), json={"to_project": work})
        assert restricted.status_code == 404, restricted.text  # (its project is not the memory's: not found)
        inside = h.post("/memories", headers=auth(elsewhere), json={"content": "I keep bees on the roof"}).json()
        out = h.post(f"/memories/{inside['memory_id']}/move", headers=auth(elsewhere), json={"to_project": work})
        assert out.status_code == 403 and out.json()["error"]["field"] == "to_project", out.text
        keyed = h.post(f"/memories/{city['memory_id']}/move", headers=auth(running.key), json={"to_project": work})
        assert keyed.status_code == 409 and keyed.json()["error"]["field"] == "to_project", keyed.text
        nowhere = h.post(url, headers=auth(running.key), json={"to_project": "bad project!"})
        assert nowhere.status_code == 422 and "to_project" in nowhere.text, nowhere.text

    async with session(running) as client:
        moved = await call(client, "move_memory", memory_id=tea["memory_id"], to_project=work, containerTag=home)
        assert moved["moved"] and moved["project"] == work and moved["moved_from"] == tea["memory_id"], moved
        arrived = await call(client, "get_memory", memory_id=moved["memory_id"])
        assert (arrived["project"], arrived["repeats"], arrived["status"]) == (work, 2, "active"), arrived
        left = await call(client, "get_memory_history", memory_id=tea["memory_id"])
        assert left["versions"][-1]["status"] == "forgotten" and moved["memory_id"] in left["versions"][-1]["forget_reason"]
        twice = await call(client, "move_memory", memory_id=tea["memory_id"], to_project=work, containerTag=home)
        assert not twice["moved"] and twice["memory_id"] == moved["memory_id"], twice
        found = await recall(client, "what does the user drink in the morning", work)
        assert "green tea" in hits_of(found)[0], found
        assert not any("green tea" in h for h in hits_of(await recall(client, "what does the user drink", home)))

        # a keyed memory keeps its key in its new project
        town = await call(client, "save_memory", category="user_profile", content="My hometown is Guimaraes",
                          memory_key="profile.hometown", containerTag=home)
        hop = await call(client, "move_memory", memory_id=town["memory_id"], to_project=work, containerTag=home)
        there = await call(client, "get_memory_by_key", memory_key="profile.hometown", containerTag=work)
        assert there["memory"]["id"] == hop["memory_id"] and there["memory"]["content"] == "My hometown is Guimaraes"


def test_a_move_brings_back_in_the_old_project_what_the_moved_memory_superseded(running: Any) -> None:
    """Found in review (2026-12-06): "I live in Lisbon", then "I moved to Porto last month" (which
    supersedes it), then the move memory moved to another project. The one left behind is forgotten
    and the moved one has no relation to the old project's memories, so Lisbon stayed superseded by a
    forgotten memory: nothing current in the old project said where the user lives. Now the move
    brings it back there, says so, and a second move request changes nothing more."""
    home, work = "moved-from-" + uuid.uuid4().hex[:6], "moved-to-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        def save(content: str) -> dict[str, Any]:
            r = h.post("/memories", json={"content": content, "project": home})
            assert r.status_code == 201, r.text
            return r.json()  # type: ignore[no-any-return]

        lisbon = save("I live in Lisbon")
        porto = save("I moved to Porto last month")
        assert porto["supersedes"] == [lisbon["memory_id"]], porto
        moved = h.post(f"/memories/{porto['memory_id']}/move", json={"to_project": work})
        assert moved.status_code == 200, moved.text
        assert moved.json()["reinstated"] == [lisbon["memory_id"]], moved.json()
        assert "current again there: “I live in Lisbon”" in moved.json()["message"], moved.json()
        hits = h.post("/recall", json={"query": "Where do I live?", "project": home}).json()["hits"]
        assert [(x["memory"]["content"], x["memory"]["status"]) for x in hits] == [("I live in Lisbon", "active")], hits
        there = h.post("/recall", json={"query": "Where do I live?", "project": work}).json()["hits"]
        assert [(x["memory"]["content"], x.get("relations", [])) for x in there] == [
            ("I moved to Porto last month", [])], there
        again = h.post(f"/memories/{porto['memory_id']}/move", json={"to_project": work}).json()
        assert not again["moved"] and "reinstated" not in again, again
        versions = h.get(f"/memories/{lisbon['memory_id']}/history").json()["versions"]
        assert [v["event"] for v in versions] == ["MemorySaved", "MemorySuperseded", "MemoryReinstated"], versions


def test_a_move_does_not_hide_the_job_the_old_memory_also_named(running: Any) -> None:
    """Found from outside (2026-12-05): "I live in Lisbon and work as a nurse", then "I moved to Porto
    last month", left only the move in recall, so "what is my job?" found nothing current. Now the
    pair is flagged: both stand, and the flag says what else the earlier one says."""
    project = "clauses-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        first = h.post("/memories", json={"content": "I live in Lisbon and work as a nurse", "project": project})
        assert first.status_code == 201, first.text
        second = h.post("/memories", json={"content": "I moved to Porto last month", "project": project})
        assert second.status_code == 201, second.text
        assert second.json()["supersedes"] == [] and second.json()["flagged"], second.json()
        job = h.post("/recall", json={"query": "What is my job?", "project": project}).json()["hits"]
        assert ("I live in Lisbon and work as a nurse", "active") in [
            (x["memory"]["content"], x["memory"]["status"]) for x in job], job
        flags = h.get("/memories/conflicts", params={"project": project}).json()["conflicts"]
        assert len(flags) == 1 and "work as a nurse" in flags[0]["reason"], flags


async def test_forgetting_the_change_brings_back_the_fact_it_had_superseded(running: Any) -> None:
    """Found from outside (2026-12-06): "I live in Lisbon", then "I moved to Porto last month" (which
    supersedes it); the user says the move was wrong and the assistant forgets it. Lisbon stayed
    superseded by a forgotten memory: out of recall and the profile, with nothing in its place and
    no way back. Now the forget reinstates it and says so. A change that was itself superseded
    (Porto, then Braga) brings nothing back: the later change is current."""
    project = "withdrawn-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        def save(content: str, where: str = project) -> dict[str, Any]:
            r = h.post("/memories", json={"content": content, "project": where})
            assert r.status_code == 201, r.text
            return r.json()  # type: ignore[no-any-return]

        lisbon = save("I live in Lisbon")
        porto = save("I moved to Porto last month")
        assert porto["supersedes"] == [lisbon["memory_id"]], porto
        async with session(running) as client:  # the assistant forgets it by its words, as the memory tool does
            said = text_of(await client.call_tool("memory", {"content": "I moved to Porto last month",
                                                              "action": "forget", "containerTag": project}))
        assert said.startswith("Forgotten (exact match: “I moved to Porto last month”).") and \
            f"It had superseded 1 memory, current again: “I live in Lisbon” ({lisbon['memory_id']})" in said, said
        again = h.post("/memories/forget", json={"memory_id": porto["memory_id"], "project": project}).json()
        assert not again["forgotten"] and "reinstated" not in again, again  # nothing twice
        hits = h.post("/recall", json={"query": "Where do I live?", "project": project}).json()["hits"]
        assert [(x["memory"]["content"], x["memory"]["status"]) for x in hits] == [("I live in Lisbon", "active")], hits
        now = h.get(f"/memories/{lisbon['memory_id']}").json()
        assert now["status"] == "active" and now.get("superseded_by") is None and now.get("valid_until") is None, now
        versions = h.get(f"/memories/{lisbon['memory_id']}/history").json()["versions"]
        assert [v["event"] for v in versions] == ["MemorySaved", "MemorySuperseded", "MemoryReinstated"], versions

        chain = project + "-chain"
        first = save("I live in Lisbon", chain)
        second = save("I moved to Porto last month", chain)
        third = save("I moved to Braga this week", chain)
        assert second["supersedes"] == [first["memory_id"]] and third["supersedes"] == [second["memory_id"]], third
        gone = h.post("/memories/forget", json={"memory_id": second["memory_id"], "project": chain}).json()
        assert gone["forgotten"] and "reinstated" not in gone, gone
        hits = h.post("/recall", json={"query": "Where do I live?", "project": chain}).json()["hits"]
        assert [x["memory"]["content"] for x in hits] == ["I moved to Braga this week"], hits

        # the bulk forget names them per id; forgetting the change and the fact together forgets both,
        # whichever of the two commands runs first
        for both in (False, True):
            where = f"{project}-bulk-{int(both)}"
            old, new = save("I live in Lisbon", where), save("I moved to Porto last month", where)
            assert new["supersedes"] == [old["memory_id"]], new
            ids = [new["memory_id"], old["memory_id"]] if both else [new["memory_id"]]
            r = h.post("/memories/forget/bulk", json={"memory_ids": ids})
            assert r.status_code == 200 and r.json()["forgotten"] == len(ids), r.text
            hits = h.post("/recall", json={"query": "Where do I live?", "project": where}).json()["hits"]
            if both:
                assert hits == [], hits
                assert h.get(f"/memories/{old['memory_id']}").json()["status"] == "forgotten"
            else:
                assert r.json()["results"][0]["reinstated"] == [old["memory_id"]], r.text
                assert [x["memory"]["content"] for x in hits] == ["I live in Lisbon"], hits


def test_a_flag_against_a_forgotten_memory_is_moot_and_a_forgotten_memory_is_never_kept(running: Any) -> None:
    """Found from outside (2026-12-06): "My dog is called Rex", "My dog is called Bruno" (flagged: another
    dog, or renamed?), then Rex forgotten. The pair stayed in the conflicts list, and settling it with
    "keep the other" superseded Bruno by the forgotten Rex: neither was left in recall. Now the list
    leaves the pair out, and keeping a memory that is not current is refused, naming keep."""
    project = "moot-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        def flagged_pair(first: str, second: str) -> tuple[str, str]:
            a = h.post("/memories", json={"content": first, "project": project}).json()
            b = h.post("/memories", json={"content": second, "project": project}).json()
            assert b["flagged"] == [a["memory_id"]], b
            return a["memory_id"], b["memory_id"]

        def conflicts() -> list[tuple[str, str]]:
            listed = h.get("/memories/conflicts", params={"project": project}).json()["conflicts"]
            return [(c["memory"]["id"], c["other"]["id"]) for c in listed]

        rex, bruno = flagged_pair("My dog is called Rex", "My dog is called Bruno")
        tom, felix = flagged_pair("My cat is called Tom", "My cat is called Felix")
        assert sorted(conflicts()) == sorted([(bruno, rex), (felix, tom)])
        for gone in (rex, felix):  # the other of one pair, the flagged memory of the other pair
            assert h.post("/memories/forget", json={"memory_id": gone, "project": project}).json()["forgotten"]
        assert conflicts() == []

        for memory_id, other_id, keep in ((bruno, rex, "other"), (felix, tom, "memory")):
            refused = h.post("/memories/conflicts/settle", json={"memory_id": memory_id, "other_id": other_id,
                                                                  "keep": keep})
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"]["field"] == "keep" and "forgotten" in refused.json()["error"]["message"]
        assert h.get(f"/memories/{bruno}").json()["status"] == "active"
        assert h.get(f"/memories/{tom}").json()["status"] == "active"
        both = h.post("/memories/conflicts/settle", json={"memory_id": bruno, "other_id": rex, "keep": "both"}).json()
        assert both["settled"], both
        hits = h.post("/recall", json={"query": "What are my pets called?", "project": project}).json()["hits"]
        assert {x["memory"]["content"] for x in hits} == {"My dog is called Bruno", "My cat is called Tom"}, hits


def test_a_flag_against_a_superseded_memory_is_moot(running: Any) -> None:
    """"My horse is called Star", then "My horse is called Comet" and "My horse is called Blaze", each
    flagged against what came before it. Settling Blaze over Star supersedes Star: the pairs naming
    Star leave the conflicts list (only one of each is current), and what stays is between current
    memories."""
    project = "moot-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        star = h.post("/memories", json={"content": "My horse is called Star", "project": project}).json()
        comet = h.post("/memories", json={"content": "My horse is called Comet", "project": project}).json()
        blaze = h.post("/memories", json={"content": "My horse is called Blaze", "project": project}).json()
        assert comet["flagged"] == [star["memory_id"]], comet
        assert star["memory_id"] in blaze["flagged"], blaze

        def conflicts() -> set[tuple[str, str]]:
            listed = h.get("/memories/conflicts", params={"project": project}).json()["conflicts"]
            return {(c["memory"]["id"], c["other"]["id"]) for c in listed}

        assert (comet["memory_id"], star["memory_id"]) in conflicts()
        settled = h.post("/memories/conflicts/settle", json={"memory_id": blaze["memory_id"],
                                                               "other_id": star["memory_id"], "keep": "memory"})
        assert settled.status_code == 200 and settled.json()["superseded"] == star["memory_id"], settled.text
        assert h.get(f"/memories/{star['memory_id']}").json()["status"] == "superseded"
        left = conflicts()
        assert not any(star["memory_id"] in pair for pair in left), left
        assert left <= {(blaze["memory_id"], comet["memory_id"])}, left
        refused = h.post("/memories/conflicts/settle", json={"memory_id": comet["memory_id"],
                                                              "other_id": star["memory_id"], "keep": "other"})
        assert refused.status_code == 409 and refused.json()["error"]["field"] == "keep", refused.text
