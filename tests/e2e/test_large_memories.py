"""Memories of the largest accepted size (200,000 characters: a pasted document), tried from outside
with the `mcp` SDK client and httpx, as a user who pastes documents would.

Two defects were found this way: a save of a long text of the kind the truth rules backtrack on held
the memory service (and every user's recall and list behind it) for minutes; and a recall or a list
holding several long memories was larger than the bus carries (1 MB), so the memory service could
not send it and the caller waited out its timeout. Now: each save answers; a recall or a list
carries each long memory's start and its whole length, and says how to read it all; ``get_memory``
answers the whole text, and an export and an import carry it whole."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.memory import LISTED_CONTENT_CHARS, MAX_CONTENT_CHARS
from tests.e2e.test_daily_log_tools import call
from tests.e2e.test_portability import _wait_processed, engram, new_user
from tests.e2e.test_project_restriction import auth, mcp_client, text_of

pytestmark = pytest.mark.e2e


def _documents(run: str) -> list[str]:
    """Six texts of the largest size: prose, one long word, capitals the name patterns try from
    every position, and characters of 3 and 4 bytes (the bus counts bytes: 800 KB a text)."""
    prose = "".join(f"Entry {i} of {run}: I met Ana at the climbing gym on day {i} and we talked about item "
                    f"{i * 7}, my favourite book and where I live. " for i in range(3000))
    return [text[:MAX_CONTENT_CHARS] for text in (
        prose, "x" * MAX_CONTENT_CHARS, f"{run} " + "Ab " * (MAX_CONTENT_CHARS // 3),
        f"{run} " + "我住在柏林。I love 🍣 and 🏔️ " * (MAX_CONTENT_CHARS // 20),
        f"{run} " + "🍣" * MAX_CONTENT_CHARS, f"{run} " + "🏔" * MAX_CONTENT_CHARS)]


def test_the_largest_memories_are_saved_recalled_listed_exported_and_imported_whole(running: Any, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    project = f"docs-{run}"
    documents = _documents(run)
    # a key of its own: its requests count by size against its own rate limit, not the other tests' key
    key = running.stack.create_key(running.user_id, f"docs-{run}", ["memory:read", "memory:write"])["key"]

    async def over_mcp() -> list[str]:
        ids = []
        async with mcp_client(running, key) as client:
            for text in documents:
                saved = await client.call_tool("memory", {"content": text, "containerTag": project})
                assert not saved.is_error, text_of(saved)[:500]
                ids.append(text_of(saved).split("(id ")[1].split(")")[0])
            # the service still answers a small save and its recall at once
            small = await client.call_tool("memory", {"content": f"My locker code {run} is 4455", "containerTag": project})
            assert not small.is_error, text_of(small)
            found = await client.call_tool("recall", {"query": f"locker code {run}", "containerTag": project, "limit": 100})
            assert not found.is_error, text_of(found)[:500]
            text = text_of(found)
            assert f"My locker code {run} is 4455" in text
            # every long memory in the answer is its start, with how much more and how to read it all
            for memory_id in ids:
                if memory_id in text:
                    assert f"more characters: get_memory {memory_id}" in text
            whole = await call(client, "get_memory", memory_id=ids[0])
            assert whole["content"] == documents[0]
        return ids

    ids = asyncio.run(over_mcp())
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(key), timeout=60) as h:
        listed = h.get("/memories", params={"project": project, "limit": 100})
        assert listed.status_code == 200, listed.text[:500]
        memories = {m["id"]: m for m in listed.json()["memories"]}
        assert set(ids) <= set(memories)
        for memory_id, text in zip(ids, documents, strict=True):
            shown = memories[memory_id]
            assert shown["content_chars"] == len(text) and len(shown["content"]) <= LISTED_CONTENT_CHARS
            assert text.startswith(shown["content"])
        got = h.get(f"/memories/{ids[3]}")
        assert got.status_code == 200 and got.json()["content"] == documents[3]
        assert "content_chars" not in got.json()  # read by id: the whole text, nothing cut
        # the export carries every document whole (its pages stay under the bus's limit: a record that
        # would take a page over it starts the next one)
        exported = h.get("/export", params={"project": project})
        assert exported.status_code == 200, exported.text[:500]
        contents = {json.loads(line)["id"]: json.loads(line)["versions"][-1]["state"]["content"]
                    for line in exported.text.splitlines()[1:] if json.loads(line).get("type") == "memory"}
        assert {memory_id: contents.get(memory_id) for memory_id in ids} == dict(zip(ids, documents, strict=True))

    # and an import of that export into another user restores each whole (its restore commands are
    # cut by size as well as by count: six records of up to 800 KB cannot go in one message)
    target, target_key = new_user(running, "docs-taker")
    (tmp_path / "docs.jsonl").write_text(exported.text)
    done = engram(running, tmp_path, "import", str(tmp_path / "docs.jsonl"), "--user", target)
    assert "error" not in done.stderr and f"{len(documents) + 1} restored" in done.stderr, done.stderr  # (and the small one)
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(target_key), timeout=60) as h:
        listed = h.get("/memories", params={"project": project, "limit": 100}).json()["memories"]
        assert sorted(h.get(f"/memories/{m['id']}").json()["content"] for m in listed) == sorted(
            [*documents, f"My locker code {run} is 4455"])


def test_a_daily_log_larger_than_the_bus_carries_is_refused_naming_its_size(running: Any) -> None:
    """Each field within its limit, all of them together over the bus's 1 MB (four-byte characters):
    refused with 422 saying how large it is and the limit, where it used to be a 500."""
    key = running.stack.create_key(running.user_id, "big-log-" + uuid.uuid4().hex[:6],
                                   ["memory:read", "memory:write", "memory:maintenance"])["key"]
    body = {"project": "logs-" + uuid.uuid4().hex[:6], "log_date": "2026-12-01",
            "turns": [{"speaker": "user", "text": "🍣" * 3000} for _ in range(66)],
            **{name: "🏔" * 20_000 for name in ("events", "user_state", "mood_changes", "relationship_state")}}
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(key), timeout=60) as h:
        refused = h.post("/daily-logs", json=body)
        assert refused.status_code == 422, refused.text[:500]
        message = refused.json()["error"]["message"]
        assert "bytes and the bus carries at most" in message and "send less" in message
        listed = h.get("/daily-logs", params={"project": body["project"]})
        assert listed.status_code == 200 and listed.json()["logs"] == [], listed.text[:500]  # nothing written
        del body["events"], body["user_state"], body["mood_changes"], body["relationship_state"]
        kept = h.post("/daily-logs", json=body)  # the turns alone (794 KB) fit
        assert kept.status_code == 200, kept.text[:500]
        assert [log["id"] for log in h.get("/daily-logs", params={"project": body["project"]}).json()["logs"]] == [
            kept.json()["id"]]


def _memory_lines(export: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, export.splitlines()[1:]) if r.get("type") == "memory"]


def test_a_long_memory_pinned_again_and_again_is_exported_imported_and_its_history_read(
        running: Any, tmp_path: Path) -> None:
    """A document of 200,000 four-byte characters, pinned and unpinned: each change is a version
    holding the whole text, so its history and its export record outgrow the bus's 1 MB. Its history
    carries the earlier versions' starts and the newest whole; its export record comes in parts, each
    under the limit, and an import into another user puts every version back, whole."""
    run = uuid.uuid4().hex[:8]
    project = f"pinned-{run}"
    key = running.stack.create_key(running.user_id, f"pinned-{run}", ["memory:read", "memory:write"])["key"]
    text = f"{run} " + "🏔" * (MAX_CONTENT_CHARS - 9)
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(key), timeout=60) as h:
        saved = h.post("/memories", json={"content": text, "project": project})
        assert saved.status_code == 201, saved.text[:500]
        memory_id = saved.json()["memory_id"]
        for pinned in (True, False, True):
            done = h.post(f"/memories/{memory_id}/pin", json={"project": project, "pinned": pinned})
            assert done.status_code == 200, done.text[:500]
        history = h.get(f"/memories/{memory_id}/history")
        assert history.status_code == 200, history.text[:500]
        versions = history.json()["versions"]
        assert [v["version"] for v in versions] == [1, 2, 3, 4]
        assert versions[-1]["content"] == text and "content_chars" not in versions[-1]  # the newest whole
        assert all(v["content_chars"] == len(text) and text.startswith(v["content"]) for v in versions[:-1])
        exported = h.get("/export", params={"project": project})
        assert exported.status_code == 200, exported.text[:500]
    parts = [r for r in _memory_lines(exported.text) if r["id"] == memory_id]
    assert len(parts) > 1 and all(len(json.dumps(p, ensure_ascii=False).encode()) < 1_000_000 for p in parts)
    assert [v["state"]["version"] for p in parts for v in p["versions"]] == [1, 2, 3, 4]
    assert all(v["state"]["content"] == text for p in parts for v in p["versions"])

    async def history_over_mcp() -> None:
        async with mcp_client(running, key) as client:
            got = await call(client, "get_memory_history", memory_id=memory_id)
            assert [v["version"] for v in got["versions"]] == [1, 2, 3, 4] and got["versions"][-1]["content"] == text

    asyncio.run(history_over_mcp())
    # into another user: each part's versions go on from the part before
    target, target_key = new_user(running, "pinned-taker")
    (tmp_path / "pinned.jsonl").write_text(exported.text)
    done = engram(running, tmp_path, "import", str(tmp_path / "pinned.jsonl"), "--user", target)
    assert "error" not in done.stderr and f"{len(parts)} restored" in done.stderr, done.stderr
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(target_key), timeout=60) as h:
        again = h.get("/export", params={"project": project})
        assert again.status_code == 200, again.text[:500]
        restored = _memory_lines(again.text)
        assert {r["id"] for r in restored} == {restored[0]["id"]}  # one memory, in parts
        got = [v["state"] for r in restored for v in r["versions"]]
        assert [(s["version"], s["content"], s.get("pinned", False)) for s in got] == [
            (1, text, False), (2, text, True), (3, text, False), (4, text, True)]
    # the same file into the same user again: nothing changes
    done = engram(running, tmp_path, "import", str(tmp_path / "pinned.jsonl"), "--user", target)
    assert "error" not in done.stderr, done.stderr
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(target_key), timeout=60) as h:
        assert _memory_lines(h.get("/export", params={"project": project}).text) == restored


def test_a_daily_log_at_the_size_limit_is_extracted_exported_and_imported_again(running: Any, tmp_path: Path) -> None:
    """A log as large as a save may be (four-byte characters up to the bus's limit less its margin):
    its import's restore command carries its state whole, which holds more than the save did (ids,
    status, times). Until 2026-12-05 both had the same margin, and such a log was exported but its
    import was refused ("this restore_records request is 1,032,673 bytes …"): an export, a purge and
    an import lost it."""
    user, key = new_user(running, "edge-log")
    project = "edge-" + uuid.uuid4().hex[:6]
    body: dict[str, Any] = {"project": project, "log_date": "2026-12-01",
                            "turns": [{"speaker": "user", "text": f"day {i} " + "🍣" * 2990} for i in range(66)],
                            "events": "🏔" * 20_000, "user_state": "🏔" * 20_000, "mood_changes": "🏔" * 20_000}
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(key), timeout=60) as h:
        over = h.post("/daily-logs", json=body)
        assert over.status_code == 422, over.text[:300]
        size, limit = (int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:bytes|a message)", over.json()["error"]["message"]))
        body["mood_changes"] = "🏔" * (20_000 - -(-(size - limit) // 4))  # (a four-byte character each)
        saved = h.post("/daily-logs", json=body)
        assert saved.status_code in (200, 201), saved.text[:300]
        _wait_processed(h, saved.json()["id"], timeout=120)  # the extractor claims it whole, and extracts
    exported = tmp_path / "edge.jsonl"
    engram(running, tmp_path, "export", "--user", user, "-o", str(exported))
    target, target_key = new_user(running, "edge-log-taker")
    done = engram(running, tmp_path, "import", str(exported), "--user", target, check=False)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(target_key), timeout=60) as h:
        (log,) = h.get("/daily-logs", params={"project": project}).json()["logs"]
        got = h.get(f"/daily-logs/{log['id']}").json()["log"]
        assert [t["text"] for t in got["turns"]] == [t["text"] for t in body["turns"]]
        assert got["mood_changes"] == body["mood_changes"]


def test_long_logs_are_listed_and_handed_to_an_agent_a_page_at_a_time(running: Any) -> None:
    """Two logs of ~800 KB each (every turn within its limit, in four-byte characters), waiting for
    an external agent: together they are more than one bus message. The agent's list of logs waiting
    for extraction and the list of logs used to be refused as too large, every time (the oldest logs
    come first), so the agent could take none of them; now each answer carries the logs that fit and
    the rest comes next."""
    user, key = new_user(running, "long-logs")
    project = "agentlogs-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(key), timeout=60) as h:
        assert h.put(f"/projects/{project}/extraction-mode", json={"mode": "agent"}).status_code == 200
        ids = []
        for day in ("2026-12-01", "2026-12-02"):
            saved = h.post("/daily-logs", json={"project": project, "log_date": day, "turns": [
                {"speaker": "user", "text": f"{day} {i} " + "🍣" * 2980} for i in range(66)]})
            assert saved.status_code in (200, 201), saved.text[:300]
            ids.append(saved.json()["id"])
        waiting = h.get("/daily-logs/unprocessed", params={"project": project})
        assert waiting.status_code == 200, waiting.text[:300]
        assert [log["id"] for log in waiting.json()["logs"]] == ids[:1]  # the oldest, whole
        assert len(waiting.json()["logs"][0]["turns"]) == 66
        first = h.get("/daily-logs", params={"project": project})
        assert first.status_code == 200, first.text[:300]
        assert [log["id"] for log in first.json()["logs"]] == ids[1:]  # newest day first
        rest = h.get("/daily-logs", params={"project": project, "cursor": first.json()["next_cursor"]})
        assert rest.status_code == 200 and [log["id"] for log in rest.json()["logs"]] == ids[:1], rest.text[:300]
        assert rest.json().get("next_cursor") is None
