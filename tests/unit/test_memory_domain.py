"""Memory aggregate rules, without I/O."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from contracts.memory import MemoryEventType, MemoryStatus, Recall, SaveMemory
from contracts.subjects import Names
from kit.events import typed
from services.memory.domain import model
from services.memory.domain.errors import Conflict

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_a_free_form_memory_is_identified_by_its_owner_project_content_and_generation() -> None:
    a = model.new_memory("alice", SaveMemory(content="I  like tea"), NOW)
    assert a.id == model.new_memory("alice", SaveMemory(content="i like\ttea "), NOW).id  # compared normalised
    assert a.id != model.new_memory("bob", SaveMemory(content="I like tea"), NOW).id
    assert a.id != model.new_memory("alice", SaveMemory(content="I like tea", project="work"), NOW).id
    assert a.id != model.new_memory("alice", SaveMemory(content="I like coffee"), NOW).id
    again = model.new_memory("alice", SaveMemory(content="I like tea"), NOW, generation=1)
    assert again.id not in (a.id, model.new_memory("alice", SaveMemory(content="I like tea"), NOW, generation=2).id)
    assert model.same_content_active(a, model.content_hash("I like tea"))
    assert not model.same_content_active(model.forget(a, None, NOW, None), model.content_hash("I like tea"))


def test_content_is_compared_normalised() -> None:
    assert model.content_hash("I  like\ttea ") == model.content_hash("i like tea")
    assert model.content_hash("I like tea") != model.content_hash("I like coffee")


def test_forget_keeps_history_and_refuses_twice() -> None:
    state = model.new_memory("alice", SaveMemory(content="likes cats"), NOW)
    gone = model.forget(state, "changed their mind", NOW)
    assert gone.status is MemoryStatus.FORGOTTEN and gone.version == 2 and gone.forget_reason == "changed their mind"
    assert gone.content == state.content
    with pytest.raises(Conflict):
        model.forget(gone, None, NOW)


def test_event_carries_new_state_and_deterministic_id() -> None:
    state = model.new_memory("alice", SaveMemory(content="x"), NOW)
    e1 = model.event_for(state, MemoryEventType.SAVED, command_id="key-00000003", correlation_id="c", now=NOW)
    e2 = model.event_for(state, MemoryEventType.SAVED, command_id="key-00000003", correlation_id="c", now=NOW)
    assert e1.event_id == e2.event_id
    assert model.state_of(typed(e1)) == state


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"content": ""}, "content"),
        ({"content": "x" * 200_001}, "content"),
        ({"content": "x", "project": "has space"}, "project"),
        ({"content": "x", "project": "p" * 129}, "project"),
        ({"content": "x", "importance": 6}, "importance"),
        ({"content": "x", "confidence": 1.5}, "confidence"),
        ({"content": "x", "category": "hobby"}, "category"),
        ({"content": "x", "surprise": 1}, "surprise"),
        ({"content": "x", "context": ""}, "context"),
        ({"content": "x", "context": "c" * 2_001}, "context"),
    ],
)
def test_save_limits_name_the_field(payload: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValidationError) as info:
        SaveMemory.model_validate(payload)
    assert info.value.errors()[0]["loc"][0] == field


def test_recall_limit_bounds() -> None:
    with pytest.raises(ValidationError):
        Recall(query="x", limit=0)
    with pytest.raises(ValidationError):
        Recall(query="x", limit=101)
    assert Recall(query="x").limit == 10


def test_subjects_are_tenant_scoped_and_safe() -> None:
    names = Names("engram")
    assert names.event("u1", "memory", "abc") == "engram.evt.u1.memory.abc"
    with pytest.raises(ValueError):
        names.event("u1.evil", "memory", "abc")
    with pytest.raises(ValueError):
        names.event("*", "memory", "abc")
    assert {s.name for s in names.streams()} == {"ENGRAM_EVENTS", "ENGRAM_COMMANDS", "ENGRAM_DLQ"}


def test_generated_topics_are_valid_keys() -> None:
    import re

    from contracts.memory import TOPIC_PATTERN

    assert model.topic_from_content("I am fluent in Portuguese and Spanish") == "fluent_portuguese_spanish"
    chinese = model.topic_from_content("我最喜欢喝绿茶")
    assert chinese.startswith("note_") and re.fullmatch(TOPIC_PATTERN, chinese)
    assert model.topic_from_content("I love love love tea") == "love_tea"


def test_keyed_identity_and_versions() -> None:
    cmd = SaveMemory(category="preference", content="Likes cats")
    key = model.resolve_key(cmd)
    assert key == "preference.likes_cats"
    first = model.new_memory("alice", cmd, NOW, memory_key=key)
    assert first.id == model.keyed_memory_id("alice", "default", key)
    same = model.save_over(first, cmd, NOW)
    assert same is None
    second = model.save_over(first, SaveMemory(category="preference", content="Likes dogs"), NOW)
    assert second is not None and second.version == 2 and second.id == first.id


def test_update_rules() -> None:
    from contracts.memory import UpdateMemory

    state = model.new_memory("alice", SaveMemory(category="goal", content="Run 5k"), NOW,
                             memory_key="goal.run")
    assert model.update(state, UpdateMemory(memory_key="goal.run", content="Run 5k"), NOW) is None
    with pytest.raises(Exception, match="does not match"):
        model.update(state, UpdateMemory(memory_key="goal.run", category="skill"), NOW)
    gone = model.forget(state, None, NOW)
    with pytest.raises(Conflict):
        model.update(gone, UpdateMemory(memory_key="goal.run", content="x"), NOW)


def test_shared_memory_rules() -> None:
    from contracts.memory import SaveSharedMemory
    from services.memory.domain import shared

    first = shared.save(None, "alice", SaveSharedMemory(title="  Trip  to Rome ", event="Pasta"), NOW)
    assert first is not None and first.title == "Trip to Rome"
    assert first.id == shared.shared_id("alice", "Trip to Rome") != shared.shared_id("bob", "Trip to Rome")
    assert shared.save(first, "alice", SaveSharedMemory(title="Trip to Rome", event="Pasta"), NOW) is None
    again = shared.save(first, "alice", SaveSharedMemory(title="Trip to Rome", event="Pasta and gelato"), NOW)
    assert again is not None and again.version == 2


def test_context_rules() -> None:
    from contracts.memory import UpdateMemory

    saved = model.new_memory("alice", SaveMemory(content="3 years now", context="  How long have\tyou had them? "), NOW)
    assert saved.context == "How long have you had them?"  # normalised like content
    assert model.new_memory("alice", SaveMemory(content="x", context="   "), NOW).context is None
    # update_memory keeps the context unless it is given...
    kept = model.update(saved, UpdateMemory(id=saved.id, content="4 years now"), NOW)
    assert kept is not None and kept.context == saved.context and kept.version == 2
    changed = model.update(saved, UpdateMemory(id=saved.id, context="Asked about the turtles"), NOW)
    assert changed is not None and changed.context == "Asked about the turtles" and changed.content == saved.content
    assert model.update(saved, UpdateMemory(id=saved.id, context="How long have you had them?"), NOW) is None
    # ...while saving a key again describes the memory anew, context included
    cmd = SaveMemory(category="preference", content="Likes tea", context="Talking about breakfast")
    first = model.new_memory("alice", cmd, NOW, memory_key=model.resolve_key(cmd))
    again = model.save_over(first, SaveMemory(category="preference", content="Likes tea"), NOW)
    assert again is not None and again.context is None and again.version == 2
    with pytest.raises(ValidationError, match="context"):
        UpdateMemory(id=saved.id, context="c" * 2_001)
