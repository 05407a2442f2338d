"""Security review, issue 29, tried from outside on the running stack as an attacker would:

* M3 — a crafted `engram import` file for user A carrying user B's memory id (a file naming A as
  its user keeps ids) must not replace B's memory: the record is refused and named, B's list,
  history and recall are as they were, A's recall never returns B's id.
* L1 — a key restricted to one project records extraction results (and provenance) naming only
  what lies in its project: another project's memory, any shared memory (tenant-wide) or another
  project's log is "not found", exactly as an id that names nothing (no existence oracle).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_portability import engram, new_user, rest

pytestmark = pytest.mark.e2e


def test_a_crafted_import_never_overwrites_another_users_memory(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bob, bob_key = new_user(running, "m3-bob")
    alice, alice_key = new_user(running, "m3-alice")
    marker = uuid.uuid4().hex[:8]
    secret = f"Bob's safe combination is 31-17-42 ({marker})"
    pwned = f"PWNED by Alice's import ({marker}): the safe combination is 00-00-00"
    with rest(running, bob_key) as http:
        saved = http.post("/memories", json={"content": secret})
        assert saved.status_code == 201, saved.text
        bob_id = saved.json()["memory_id"]
        history_before = http.get(f"/memories/{bob_id}/history").json()
    with rest(running, alice_key) as http:
        assert http.post("/memories", json={"content": f"Alice waters the plants on Sundays ({marker})"}).status_code == 201

    # the attacker's file: Bob's memory record (its id), Alice's header (ids kept), other content
    exported = tmp_path / "bob.jsonl"
    engram(running, tmp_path, "export", "--user", bob, "-o", str(exported))
    header, *records = (json.loads(line) for line in exported.read_text().splitlines())
    (memory,) = [r for r in records if r["type"] == "memory" and r["id"] == bob_id]
    for version in memory["versions"]:
        version["state"]["content"] = pwned
    header["user"] = alice
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text(json.dumps(header) + "\n" + json.dumps(memory) + "\n")

    done = engram(running, tmp_path, "import", str(crafted), check=False)

    with rest(running, bob_key) as http:
        listed = {m["id"]: m["content"] for m in http.get("/memories", params={"limit": 100}).json()["memories"]}
        assert listed == {bob_id: secret}
        assert http.get(f"/memories/{bob_id}/history").json() == history_before
        hits = http.post("/recall", json={"query": "What is the safe combination?"}).json()["hits"]
        assert [(h["memory"]["id"], h["memory"]["content"]) for h in hits][:1] == [(bob_id, secret)]
    with rest(running, alice_key) as http:
        for query in ("What is the safe combination?", "PWNED"):
            hits = http.post("/recall", json={"query": query}).json()["hits"]
            assert bob_id not in {h["memory"]["id"] for h in hits}
            assert all("PWNED" not in h["memory"]["content"] and "31-17-42" not in h["memory"]["content"] for h in hits)
        listed = http.get("/memories", params={"limit": 100}).json()["memories"]
        assert bob_id not in {m["id"] for m in listed} and all("PWNED" not in m["content"] for m in listed)
    # the record is refused, named, and the import says so
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "1 error" in done.stderr
    assert "line 2" in done.stderr and "another user's" in done.stderr and bob_id in done.stderr, done.stderr


@dataclass
class Work:
    """An owner's memory in project `home`, a shared memory and a `home` log, and a key restricted
    to project `work` (with maintenance: it may record extraction results) with a log and a
    memory of its own."""

    owner_key: str
    work_key: str
    home_memory: str
    shared_memory: str
    home_log: str
    work_log: str
    work_memory: str


@pytest.fixture(scope="module")
def work(running) -> Work:  # type: ignore[no-untyped-def]
    user, owner_key = new_user(running, "l1-owner")
    admin = running.stack.create_key(user, "l1-admin", ["admin"])["key"]
    turns = [{"speaker": "user", "text": "I keep the garage code in my head."}]
    with rest(running, owner_key) as http:
        home_memory = http.post("/memories", json={"content": "The garage code is 4711", "project": "home"}).json()
        shared = http.post("/shared-memories", json={"title": "Hotel stay", "event": "room code 9911"}).json()
        home_log = http.post("/daily-logs", json={"log_date": "2024-06-01", "project": "home", "turns": turns}).json()
        made = http.post("/keys", headers={"Authorization": f"Bearer {admin}"}, json={
            "user_id": user, "name": "work only", "scopes": ["memory:read", "memory:write", "memory:maintenance"],
            "project": "work"})
        assert made.status_code == 201, made.text
    work_key = made.json()["key"]
    with rest(running, work_key) as http:
        work_log = http.post("/daily-logs", json={"log_date": "2024-06-02", "turns": turns}).json()
        work_memory = http.post("/memories", json={"content": "The work badge is blue"}).json()
    return Work(owner_key, work_key, home_memory["memory_id"], shared["shared_memory_id"], home_log["id"],
                work_log["id"], work_memory["memory_id"])


def refusal(response: httpx.Response, named: str) -> tuple[int, str, str, str]:
    """A refusal with the id it names taken out: (status, code, field, message)."""
    error = response.json()["error"]
    return response.status_code, error["code"], error["field"], error["message"].replace(named, "<id>")


@pytest.mark.parametrize("field", ["memory_ids", "shared_memory_ids"])
def test_a_restricted_key_records_no_result_naming_what_lies_outside_its_project(running, work: Work,
                                                                                 field: str) -> None:  # type: ignore[no-untyped-def]
    """Another project's memory, or a shared memory (tenant-wide: out of reach of a key restricted
    to a project), named on the key's own log: not found, answered exactly as an id that names
    nothing; the owner's results never say that memory came from the restricted log."""
    outside = work.home_memory if field == "memory_ids" else work.shared_memory
    nowhere = str(uuid.uuid4())
    task = f"l1-{field}-{uuid.uuid4().hex[:6]}"
    with rest(running, work.work_key) as http:
        named = http.post("/extraction-results", json={"log_id": work.work_log, "task_id": task, field: [outside]})
        missing = http.post("/extraction-results", json={"log_id": work.work_log, "task_id": task, field: [nowhere]})
        assert named.status_code == 404, named.text
        assert refusal(named, outside) == refusal(missing, nowhere)
        assert refusal(named, outside)[2] == field
        # its own memory, among others it may not name: refused as a whole, nothing recorded
        mixed = http.post("/extraction-results", json={"log_id": work.work_log, "task_id": task,
                                                       "memory_ids": [work.work_memory], field: [outside]})
        assert mixed.status_code == 404, mixed.text
        assert http.get("/extraction-results", params={"task_id": task}).json()["results"] == []
        # what lies in its project is recorded as before
        own = http.post("/extraction-results", json={"log_id": work.work_log, "task_id": task,
                                                     "memory_ids": [work.work_memory]})
        assert own.status_code in (200, 201), own.text
    with rest(running, work.owner_key) as http:
        results = http.get("/extraction-results", params={"log_id": work.work_log, "limit": 1000}).json()["results"]
        assert results and all(outside not in r["memory_ids"] + r["shared_memory_ids"] for r in results)


def test_a_restricted_key_names_no_log_of_another_project(running, work: Work) -> None:  # type: ignore[no-untyped-def]
    """A result on, or a provenance naming, another project's log: not found, as a log that does not
    exist (these held before the review; kept here beside the result's memories)."""
    nowhere = str(uuid.uuid4())
    with rest(running, work.work_key) as http:
        def result(log_id: str) -> httpx.Response:
            return http.post("/extraction-results", json={"log_id": log_id, "task_id": "l1-log",
                                                          "memory_ids": [work.work_memory]})

        def save(log_id: str) -> httpx.Response:
            return http.post("/memories", json={"content": f"Extracted {uuid.uuid4().hex[:6]}",
                                                "provenance": {"log_id": log_id, "task_id": "l1-log"}})

        def update(log_id: str) -> httpx.Response:
            return http.post("/memories/update", json={"id": work.work_memory, "importance": 4,
                                                       "provenance": {"log_id": log_id, "task_id": "l1-log"}})

        for attempt, field in ((result, "log_id"), (save, "provenance.log_id"), (update, "provenance.log_id")):
            named, missing = attempt(work.home_log), attempt(nowhere)
            assert named.status_code == 404, named.text
            assert refusal(named, work.home_log) == refusal(missing, nowhere)
            assert refusal(named, work.home_log)[2] == field


def test_an_edited_record_is_that_lines_error_and_the_lines_around_it_are_restored(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A memory record whose versions an edit put out of order (an import appends them as written:
    the older one would become the memory's state, and its next change would repeat a version
    number) or whose versions name another memory: refused, naming the line and the field; the good
    lines of the same file are restored (they used to fail with it, 64 records a command)."""
    owner, owner_key = new_user(running, "m3-order")
    marker = uuid.uuid4().hex[:8]
    with rest(running, owner_key) as http:
        ids = []
        for text in (f"Plays chess on Fridays ({marker})", f"Grows tomatoes ({marker})"):
            saved = http.post("/memories", json={"content": text})
            assert saved.status_code == 201, saved.text
            ids.append(saved.json()["memory_id"])
        assert http.post(f"/memories/{ids[0]}/pin", json={"pinned": True}).status_code == 200
    exported = tmp_path / "order.jsonl"
    engram(running, tmp_path, "export", "--user", owner, "-o", str(exported))
    header, *records = (json.loads(line) for line in exported.read_text().splitlines())
    memories = {r["id"]: r for r in records if r["type"] == "memory"}
    reversed_ = {**memories[ids[0]], "versions": memories[ids[0]]["versions"][::-1]}
    foreign = json.loads(json.dumps(memories[ids[1]]))
    foreign["versions"][0]["state"]["id"] = str(uuid.uuid4())
    target, target_key = new_user(running, "m3-order-taker")
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text("\n".join(json.dumps(r) for r in (header, reversed_, foreign, memories[ids[1]])) + "\n")
    done = engram(running, tmp_path, "import", str(crafted), "--user", target, check=False)
    assert done.returncode == 1 and "2 error" in done.stderr and "1 restored" in done.stderr, done.stderr
    assert "line 2: memory.versions" in done.stderr and "oldest first" in done.stderr, done.stderr
    assert "line 3: memory.versions" in done.stderr and "the record's id" in done.stderr, done.stderr
    with rest(running, target_key) as http:
        assert [m["content"] for m in http.get("/memories").json()["memories"]] == [f"Grows tomatoes ({marker})"]
