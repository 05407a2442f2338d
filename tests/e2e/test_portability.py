"""Your memories are yours (issue 17), through REST, MCP and the `engram` CLI on the running stack:
bulk saves, export, purge, import (round trip exact, idempotent), imports from mem0, Supermemory
and chat histories."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from contracts.daily_logs import daily_log_id
from services.memory.domain.model import keyed_memory_id

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parent.parent / "fixtures" / "portability"


def engram(running: Any, home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The `engram` CLI (its typer app, in this process: a new interpreter per command cost ~4 s on
    a busy 2-core machine) against the running stack's NATS, as the operator."""
    from typer.testing import CliRunner

    from deploy.cli import app

    env = {"ENGRAM_NATS_URL": running.stack.nats_url, "ENGRAM_NAMESPACE": running.stack.o.namespace,
           "ENGRAM_HOME": str(home), "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    done = subprocess.CompletedProcess(["engram", *args], result.exit_code, result.stdout, result.stderr)
    if check:
        assert done.returncode == 0, f"engram {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def new_user(running: Any, name: str) -> tuple[str, str]:
    made = running.stack.create_key(None, name, ["memory:read", "memory:write", "memory:maintenance"])
    return made["view"]["user_id"], made["key"]


def rest(running: Any, key: str) -> httpx.Client:
    return httpx.Client(base_url=running.base_url + "/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60)


def body_of(export: str) -> list[str]:
    """The records of an export (the header is the export's own metadata)."""
    lines = export.splitlines()
    assert json.loads(lines[0])["type"] == "header"
    return lines[1:]


def test_bulk_saves_answer_item_by_item_and_are_idempotent(running) -> None:  # type: ignore[no-untyped-def]
    user, key = new_user(running, "bulk")
    items = [{"content": f"Bulk fact {i} {uuid.uuid4().hex[:6]}"} for i in range(5)]
    items += [{"content": ""}, {"content": "Keyed fact", "category": "goal", "memory_key": "goal.run"},
              {"content": "In another project", "project": "side", "context": "asked about side projects"},
              {"content": "A bad key", "category": "goal", "memory_key": "preference.x"}]
    with rest(running, key) as http:
        first = http.post("/memories/bulk", json={"memories": items}, headers={"Idempotency-Key": "bulk-request-1"})
        assert first.status_code == 200, first.text
        out = first.json()
        statuses = [r["status"] for r in out["results"]]
        assert statuses == ["saved"] * 5 + ["error", "saved", "saved", "error"]
        assert out["results"][5]["error"]["field"] == "memories[5].content"
        assert out["results"][8]["error"]["field"] == "memories[8].memory_key"
        assert out["results"][7]["project"] == "side" and (out["saved"], out["errors"]) == (7, 2)
        again = http.post("/memories/bulk", json={"memories": items}, headers={"Idempotency-Key": "bulk-request-1"})
        assert [r["memory_id"] for r in again.json()["results"]] == [r["memory_id"] for r in out["results"]]
        listed = http.get("/memories", params={"limit": 100}).json()["memories"]
        assert len(listed) == 7  # the retry saved nothing twice
        dup = http.post("/memories/bulk", json={"memories": items[:2]}).json()
        assert [r["status"] for r in dup["results"]] == ["duplicate", "duplicate"]  # same contents, new request
        too_many = http.post("/memories/bulk", json={"memories": [{"content": "x"}] * 501})
        assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "memories"

    data = asyncio.run(_save_over_mcp(running, key, [{"content": "From MCP one"},
                                                     {"content": "From MCP two", "importance": 9}]))
    assert [r["status"] for r in data["results"]] == ["saved", "error"]
    assert data["results"][1]["error"]["field"] == "memories[1].importance"


async def _save_over_mcp(running: Any, key: str, memories: list[dict[str, Any]]) -> dict[str, Any]:
    """`save_memories` through the `mcp` SDK client."""
    http2 = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http2, Client(streamable_http_client(running.mcp_url, http_client=http2)) as mcp:
        assert "save_memories" in {t.name for t in (await mcp.list_tools()).tools}
        result = await mcp.call_tool("save_memories", {"memories": memories})
        data: dict[str, Any] = result.structured_content or json.loads(result.content[0].text)  # type: ignore[union-attr]
        return data


def _wait_processed(http: httpx.Client, log_id: str, timeout: float = 90.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = http.get(f"/daily-logs/{log_id}").json()
        if found.get("found") and found["log"]["processing_status"] == "processed":
            results = http.get("/extraction-results", params={"log_id": log_id}).json()["results"]
            if results:
                return
        time.sleep(0.5)
    raise AssertionError(f"log {log_id} was not processed in {timeout}s")


def test_export_purge_import_round_trip_is_exact(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    user, key = new_user(running, "mover")
    marker = "MARKER" + uuid.uuid4().hex[:8]
    with rest(running, key) as http:
        assert http.post("/memories", json={"content": f"Keeps bees on the roof {marker}",
                                            "context": "What do you do on weekends?"}).status_code == 201
        for content in ("Runs 5 km", "Runs 10 km"):
            http.post("/memories", json={"content": content, "category": "goal", "memory_key": "goal.running"})
        http.post("/memories/update", json={"memory_key": "goal.running", "importance": 5})
        gone = http.post("/memories", json={"content": "Used to smoke", "project": "health"}).json()
        http.post("/memories/forget", json={"memory_id": gone["memory_id"], "reason": "quit"})
        http.post("/shared-memories", json={"title": "Trip to Kyoto", "event": f"We planned the trip {marker}"})
        log = http.post("/daily-logs", json={"log_date": "2024-06-01", "turns": [
            {"speaker": "user", "text": "I moved to Berlin last month and I love the parks."},
            {"speaker": "assistant", "text": "Berlin has wonderful parks!"}]}).json()
        _wait_processed(http, log["id"])
        rest_export = http.get("/export")
        assert rest_export.status_code == 200 and rest_export.headers["content-type"].startswith("application/x-ndjson")
        markdown = http.get("/export", params={"format": "markdown"}).text
        assert "Keeps bees on the roof" in markdown and "# Engram export" in markdown

    first = tmp_path / "first.jsonl"
    engram(running, tmp_path, "export", "--user", user, "-o", str(first))
    records = body_of(first.read_text())
    assert records == body_of(rest_export.text)  # the CLI and REST write the same records
    by_type: dict[str, list[dict[str, Any]]] = {}
    for line in records:
        by_type.setdefault(json.loads(line)["type"], []).append(json.loads(line))
    assert {"memory", "shared_memory", "daily_log", "extraction_result"} <= by_type.keys()
    keyed = next(m for m in by_type["memory"] if m["versions"][-1]["state"].get("memory_key") == "goal.running")
    assert [v["state"]["content"] for v in keyed["versions"]] == ["Runs 5 km", "Runs 10 km", "Runs 10 km"]
    assert any(m["versions"][-1]["state"]["status"] == "forgotten" for m in by_type["memory"])
    assert any(m["versions"][-1]["state"].get("context") == "What do you do on weekends?" for m in by_type["memory"])
    assert any(m["versions"][-1]["state"].get("provenance") for m in by_type["memory"])  # extracted from the log
    assert user not in "\n".join(records)  # states are written without their tenant

    other_before = _memories(running, running.other_key)
    assert engram(running, tmp_path, "purge", "--user", user, check=False).returncode == 2  # refused without --yes
    purged = engram(running, tmp_path, "purge", "--user", user, "--yes")
    assert "Purged" in purged.stderr
    with rest(running, key) as http:
        assert http.get("/memories").status_code == 401  # the key is gone at once
    empty = tmp_path / "empty.jsonl"
    engram(running, tmp_path, "export", "--user", user, "-o", str(empty))
    assert body_of(empty.read_text()) == []
    assert _memories(running, running.other_key) == other_before  # other users untouched

    imported = engram(running, tmp_path, "import", str(first))
    assert f"{len(records):,} restored" in imported.stderr, imported.stderr
    second = tmp_path / "second.jsonl"
    engram(running, tmp_path, "export", "--user", user, "-o", str(second))
    assert body_of(second.read_text()) == records  # exact, but for the export's own header

    # importing twice changes nothing: each batch's key is derived from its records, so the second
    # import is answered with the first one's outcomes and no event is appended
    twice = engram(running, tmp_path, "import", str(first), "--user", user)
    assert "error" not in twice.stderr, twice.stderr
    third = tmp_path / "third.jsonl"
    engram(running, tmp_path, "export", "--user", user, "-o", str(third))
    assert body_of(third.read_text()) == records

    made = engram(running, tmp_path, "keys", "create", "--user", user)
    new_key = next(w for w in made.stdout.split() if w.startswith("egm_"))
    with rest(running, new_key) as http:
        hits = http.post("/recall", json={"query": "bees on the roof"}).json()["hits"]
        assert hits and marker in hits[0]["memory"]["content"]  # vectors are back too
        assert http.get("/shared-memories", params={"title": "Trip to Kyoto"}).json()["shared_memories"]


def test_an_import_into_another_user_links_results_to_the_imported_memories(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A result's memory ids and shared memory ids name, in the new user, the records restored there:
    a keyed memory by the new user's id of its key, a free-form one by its new id, a shared memory
    by the new user's id of its title; restored with them, or in a later import (its own batch)."""
    source, source_key = new_user(running, "giver")
    target, target_key = new_user(running, "taker")
    with rest(running, source_key) as http:
        keyed = http.post("/memories", json={"content": "Runs 10 km every week", "category": "goal",
                                             "memory_key": "goal.running"}).json()["memory_id"]
        free = http.post("/memories", json={"content": "Keeps bees on the roof"}).json()["memory_id"]
        trip = http.post("/shared-memories", json={"title": "Trip to Kyoto", "event": "We planned it"}).json()
        log = http.post("/daily-logs", json={"log_date": "2024-06-01", "turns": [
            {"speaker": "user", "text": "I keep bees and I run every week."}]}).json()
        _wait_processed(http, log["id"])  # (the extractor's own result is exported too)
        recorded = http.post("/extraction-results", json={
            "log_id": log["id"], "task_id": "manual-1", "memory_ids": [keyed, free],
            "shared_memory_ids": [trip["shared_memory_id"]]})
        assert recorded.status_code in (200, 201), recorded.text

    export = tmp_path / "giver.jsonl"
    engram(running, tmp_path, "export", "--user", source, "-o", str(export))
    header, *records = export.read_text().splitlines()
    results = [r for r in records if json.loads(r)["type"] == "extraction_result"]
    assert len(results) >= 2
    # first everything but the results, then the results alone: their batch has none of the records
    # they name, which the memory service then finds in the new user by key and title
    first, second = tmp_path / "records.jsonl", tmp_path / "results.jsonl"
    first.write_text("\n".join([header, *(r for r in records if r not in results)]) + "\n")
    second.write_text("\n".join([header, *results]) + "\n")
    engram(running, tmp_path, "import", str(first), "--user", target)
    done = engram(running, tmp_path, "import", str(second), "--user", target)
    assert f"{len(results):,} restored" in done.stderr, done.stderr
    again = engram(running, tmp_path, "import", str(export), "--user", target)  # all at once: nothing new
    assert "error" not in again.stderr, again.stderr

    with rest(running, target_key) as http:
        memories = http.get("/memories", params={"limit": 100}).json()["memories"]
        ids = {m["content"]: m["id"] for m in memories}
        imported = http.get("/memories", params={"limit": 100, "source": "imported"}).json()["memories"]
        assert {m["id"] for m in imported} == set(ids.values())  # every one restored by the import
        assert all(m["origin"] == "imported" for m in memories)
        assert http.get("/memories", params={"source": "saved"}).json()["memories"] == []
        hit = http.post("/recall", json={"query": "bees on the roof", "limit": 3}).json()["hits"][0]["memory"]
        assert (hit["content"], hit["origin"]) == ("Keeps bees on the roof", "imported")
        assert http.get(f"/memories/{ids['Keeps bees on the roof']}").json()["origin"] == "imported"
        shared = http.get("/shared-memories", params={"title": "Trip to Kyoto"}).json()["shared_memories"]
        target_log = str(daily_log_id(target, "default", date(2024, 6, 1)))
        found = http.get("/extraction-results", params={"log_id": target_log}).json()["results"]
    assert ids["Runs 10 km every week"] == str(keyed_memory_id(target, "default", "goal.running"))
    manual = next(r for r in found if r["task_id"] == "manual-1")
    assert manual["memory_ids"] == [ids["Runs 10 km every week"], ids["Keeps bees on the roof"]]
    assert manual["shared_memory_ids"] == [shared[0]["id"]]
    assert len(found) == len(results)
    for result in found:  # every result names the new user's records, none of the giver's
        assert set(result["memory_ids"]) <= set(ids.values()), result


def test_an_import_into_another_user_keeps_what_its_memories_superseded_and_are_flagged_against(
        running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Found from outside (2026-12-05): memories imported into another user kept the giver's ids of
    what they superseded, what superseded them and what they were flagged against, so the new user's
    open conflicts were empty and recall named no superseded memory. Now they name the new user's."""
    source, source_key = new_user(running, "flagger")
    target, target_key = new_user(running, "flagtaker")
    with rest(running, source_key) as http:
        def save(content: str) -> dict[str, Any]:
            saved = http.post("/memories", json={"content": content})
            assert saved.status_code == 201, saved.text
            return saved.json()

        first = save("Caroline went to a support group yesterday (2023-05-07).")
        second = save("Caroline went to a support group yesterday (2023-05-14).")
        assert second["flagged"] == [first["memory_id"]]
        moved = save("I live in Lisbon.")
        now = save("I moved to Porto last month, I live in Porto now.")
        assert now["supersedes"] == [moved["memory_id"]], now
        flags = http.get("/memories/conflicts").json()["conflicts"]
        assert len(flags) == 1
    export = tmp_path / "flags.jsonl"
    engram(running, tmp_path, "export", "--user", source, "-o", str(export))
    done = engram(running, tmp_path, "import", str(export), "--user", target)
    assert ": 4 restored." in done.stderr, done.stderr
    # found from outside (2026-12-06): the same file imported again said "4 restored", the first run's
    # recorded answer; nothing is written again, and the report says so
    again = engram(running, tmp_path, "import", str(export), "--user", target)
    assert ": 4 duplicate." in again.stderr, again.stderr
    with rest(running, target_key) as http:
        ids = {m["content"]: m["id"] for m in http.get("/memories", params={"limit": 100, "status": "all"}).json()["memories"]}
        assert set(ids.values()).isdisjoint({first["memory_id"], second["memory_id"], moved["memory_id"], now["memory_id"]})
        conflicts = http.get("/memories/conflicts").json()["conflicts"]
        assert [(c["memory"]["id"], c["other"]["id"]) for c in conflicts] == [
            (ids["Caroline went to a support group yesterday (2023-05-14)."],
             ids["Caroline went to a support group yesterday (2023-05-07)."])]
        porto = ids["I moved to Porto last month, I live in Porto now."]
        lisbon = http.get(f"/memories/{ids['I live in Lisbon.']}").json()
        assert lisbon["status"] == "superseded" and lisbon["superseded_by"]["memory_id"] == porto, lisbon
        hit = next(h for h in http.post("/recall", json={"query": "where do I live?"}).json()["hits"]
                   if h["memory"]["id"] == porto)
        assert [r["memory_id"] for r in hit["relations"] if r["kind"] == "supersedes"] == [ids["I live in Lisbon."]]


def test_a_user_purged_right_after_an_import_can_be_imported_again_at_once(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Found from outside (2026-12-06): an import, a purge of the user, then the same import again
    within two minutes waited two minutes and failed ("idempotency key still being handled"),
    restoring nothing: the bus still remembered the first run's command keys, whose outcomes the
    purge had deleted. Each import run's commands now carry keys of their own."""
    source, source_key = new_user(running, "backup")
    target, _ = new_user(running, "restarted")
    with rest(running, source_key) as http:
        for content in ("I keep bees on the roof", "I moved to Porto last month", "My sister Ana lives in Madrid"):
            assert http.post("/memories", json={"content": content}).status_code == 201
    export = tmp_path / "backup.jsonl"
    engram(running, tmp_path, "export", "--user", source, "-o", str(export))
    assert ": 3 restored." in engram(running, tmp_path, "import", str(export), "--user", target).stderr
    engram(running, tmp_path, "purge", "--user", target, "--yes")
    assert body_of(engram(running, tmp_path, "export", "--user", target).stdout) == []
    again = engram(running, tmp_path, "import", str(export), "--user", target)
    assert ": 3 restored." in again.stderr, again.stderr
    restored = [json.loads(r) for r in body_of(engram(running, tmp_path, "export", "--user", target).stdout)]
    assert sorted(r["versions"][-1]["state"]["content"] for r in restored) == [
        "I keep bees on the roof", "I moved to Porto last month", "My sister Ana lives in Madrid"]


def test_an_import_into_another_user_keeps_a_link_to_a_keyed_memory_that_comes_in_a_later_batch(
        running, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A memory that superseded a keyed one, restored into another user in a batch before the keyed
    memory's own: the importer names the keyed memory's key (it read the file once before), so the
    link holds the new user's id of that key, not one derived from nothing (found 2026-12-05, left
    until 2026-12-06: the new user's recall named nothing under the memory that superseded it)."""
    source, source_key = new_user(running, "keyedgiver")
    target, target_key = new_user(running, "keyedtaker")
    with rest(running, source_key) as http:
        lisbon = http.post("/memories", json={"content": "I live in Lisbon.", "category": "user_profile",
                                              "memory_key": "profile.city"}).json()
        porto = http.post("/memories", json={"content": "I moved to Porto last month, I live in Porto now."}).json()
        assert porto["supersedes"] == [lisbon["memory_id"]], porto
        fillers = http.post("/memories/bulk", json={"memories": [
            {"content": f"Filler note {i}: the {i}th jar on the shelf holds {['rice', 'beans', 'lentils'][i % 3]}."}
            for i in range(70)]}).json()
        assert fillers["saved"] == 70, fillers
    export = tmp_path / "keyed.jsonl"
    engram(running, tmp_path, "export", "--user", source, "-o", str(export))
    header, *records = export.read_text(encoding="utf-8").splitlines()
    keyed = [r for r in records if json.loads(r).get("id") == lisbon["memory_id"]]
    rest_of = [r for r in records if json.loads(r).get("id") != lisbon["memory_id"]]
    first = [r for r in rest_of if json.loads(r).get("id") == porto["memory_id"]]
    ordered = tmp_path / "keyed-last.jsonl"  # the memory that superseded it first, the keyed one after 70 others
    ordered.write_text("\n".join([header, *first, *[r for r in rest_of if r not in first], *keyed]) + "\n",
                       encoding="utf-8")
    from deploy import export_import
    monkeypatch.setattr(export_import, "RESTORE_CONCURRENCY", 1)  # the first batch done before the next is sent
    done = engram(running, tmp_path, "import", str(ordered), "--user", target)
    assert "error" not in done.stderr, done.stderr
    with rest(running, target_key) as http:
        ids = {m["content"]: m["id"] for m in http.get("/memories", params={"limit": 100, "status": "all",
                                                                          "keyword": "live"}).json()["memories"]}
        new_porto, new_lisbon = ids["I moved to Porto last month, I live in Porto now."], ids["I live in Lisbon."]
        city = http.get(f"/memories/{new_lisbon}").json()
        assert city["memory_key"] == "profile.city" and city["status"] == "superseded", city
        assert city["superseded_by"]["memory_id"] == new_porto
        assert [w["memory_id"] for w in http.get(f"/memories/{new_porto}").json()["supersedes"]] == [new_lisbon]
        hit = next(h for h in http.post("/recall", json={"query": "where do I live?"}).json()["hits"]
                   if h["memory"]["id"] == new_porto)
        assert [r["memory_id"] for r in hit["relations"] if r["kind"] == "supersedes"] == [new_lisbon]


def _memories(running: Any, key: str) -> list[str]:
    with rest(running, key) as http:
        return sorted(m["id"] for m in http.get("/memories", params={"limit": 100}).json()["memories"])


def test_imports_from_mem0_supermemory_and_chat(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    user, key = new_user(running, "switcher")
    for name, expected in (("mem0_get_all.json", "3 saved"), ("supermemory_documents.json", "3 saved"),
                           ("chat_turns.json", "2 saved")):
        done = engram(running, tmp_path, "import", str(FIXTURES / name), "--user", user)
        assert expected in done.stderr, done.stderr
        with rest(running, key) as http:
            before = _imported_state(http, user, name)
            again = engram(running, tmp_path, "import", str(FIXTURES / name), "--user", user)
            assert "error" not in again.stderr, again.stderr
            assert _imported_state(http, user, name) == before  # nothing changed
    with rest(running, key) as http:
        contents = {m["content"] for m in http.get("/memories", params={"limit": 100}).json()["memories"]}
        assert {"Allergic to peanuts MARKER-MEM0", "Is travelling to Paris in June"} <= contents
        imported = {m["content"] for m in http.get("/memories", params={"limit": 100, "source": "imported"}).json()["memories"]}
        assert {"Allergic to peanuts MARKER-MEM0", "Is travelling to Paris in June"} <= imported
        personal = http.get("/memories", params={"project": "personal"}).json()["memories"]
        assert {m["content"] for m in personal} == {"Dana is moving to Lisbon in September",
                                                    "Dana wants a flat near the river MARKER-SM"}
        log = http.get(f"/daily-logs/{daily_log_id(user, 'default', date(2024, 7, 1))}").json()
        assert log["found"] and log["log"]["turns"][0]["text"].endswith("MARKER-CHAT")
    bad = engram(running, tmp_path, "import", str(FIXTURES / "README.md"), "--user", user, check=False)
    assert bad.returncode == 2 and "--format" in bad.stderr


def _imported_state(http: httpx.Client, user: str, fixture: str) -> Any:
    """What an import of ``fixture`` wrote: the memories (mem0, Supermemory), or the daily logs of a
    chat (whose extracted memories keep arriving from the extractor meanwhile)."""
    if fixture.startswith("chat"):
        logs = [http.get(f"/daily-logs/{daily_log_id(user, 'default', day)}").json()["log"]
                for day in (date(2024, 7, 1), date(2024, 7, 3))]
        return [(log["id"], log["turns"], log["created_at"]) for log in logs]  # (its status moves on by itself)
    return sorted((m["id"], m["version"]) for m in http.get("/memories", params={"limit": 100}).json()["memories"]
                  if m["source"] in ("mem0", "supermemory"))


def test_purge_over_rest_needs_an_unrestricted_admin(running) -> None:  # type: ignore[no-untyped-def]
    user, key = new_user(running, "doomed")
    with rest(running, key) as http:
        http.post("/memories", json={"content": "Soon gone"})
        refused = http.post(f"/users/{user}/purge")
        assert refused.status_code == 403
    admin = running.stack.create_key(None, "admin", ["admin"])["key"]
    with rest(running, admin) as http:
        report = http.post(f"/users/{user}/purge")
        assert report.status_code == 200, report.text
        removed = {s["service"]: s["removed"] for s in report.json()["services"]}
        assert removed["memory"]["memories"] == 1 and removed["auth"]["api_keys"] == 1
        assert report.json()["events"] >= 2
        again = http.post(f"/users/{user}/purge").json()  # idempotent: nothing left but its own announcement
        assert again["events"] <= 1 and all(sum(s["removed"].values()) == 0 for s in again["services"])
    with rest(running, key) as http:
        assert http.get("/memories").status_code == 401
