"""What a daily log saved again without some of its turns takes with it (services/memory/domain/log_edits.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from contracts.daily_logs import turn_digest
from contracts.memory import MemorySource, MemoryState, MemoryStatus, Provenance
from services.memory.domain.log_edits import unlearnt

pytestmark = pytest.mark.unit

LOG, OTHER = uuid.uuid4(), uuid.uuid4()
STARTED = datetime(2026, 12, 1, tzinfo=UTC)
PIN, TEA = turn_digest("user", "my PIN is 4321"), turn_digest("user", "I like tea")


def said(log: uuid.UUID = LOG, digests: tuple[str, ...] = (PIN,)) -> Provenance:
    return Provenance(log_id=log, task_id="t", turns=list(range(len(digests))), turn_digests=list(digests))


def memory(provenance: Provenance | None = None, *, sources: tuple[Provenance | None, ...] = (), version: int | None = None,
           status: MemoryStatus = MemoryStatus.ACTIVE, created: datetime = STARTED + timedelta(hours=1)) -> MemoryState:
    return MemoryState(
        id=uuid.uuid4(), tenant="u", project="default", content="x", created_at=created, updated_at=created,
        provenance=provenance if provenance is not None else said(), status=status,
        repeats=1 + len(sources), version=version or 1 + len(sources),
        sources=[MemorySource(said_at=created, source="extractor", provenance=p) for p in sources])


def test_a_memory_learnt_only_from_removed_turns_is_unlearnt() -> None:
    assert unlearnt(memory(), LOG, STARTED, {TEA})
    assert unlearnt(memory(sources=(said(),)), LOG, STARTED, set())  # said twice, both from the removed turn


@pytest.mark.parametrize("case", [
    memory(said(digests=(PIN, TEA))),  # another of its turns is still there
    memory(sources=(said(OTHER),)),  # said in another log too
    memory(sources=(None,)),  # said again without provenance (a save)
    memory(said(OTHER)),  # learnt from another log
    memory(said(digests=())),  # learnt before digests were kept
    memory(version=2),  # changed since (edited, pinned, flagged)
    memory(status=MemoryStatus.SUPERSEDED),
    memory(created=STARTED - timedelta(days=1)),  # learnt from the log's earlier life (deleted, saved again)
], ids=["turn-left", "other-log-too", "saved-too", "other-log", "no-digests", "touched", "superseded", "earlier-log"])
def test_what_stays(case: MemoryState) -> None:
    assert not unlearnt(case, LOG, STARTED, {TEA})


def test_a_turns_digest_is_its_speaker_and_words_not_its_place() -> None:
    assert turn_digest("User", "my  PIN is\n4321") == turn_digest("user ", "my PIN is 4321") == PIN
    assert turn_digest("assistant", "my PIN is 4321") != PIN and len(PIN) == 16
