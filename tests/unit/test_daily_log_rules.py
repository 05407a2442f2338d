"""Every rule of the daily-log lifecycle, saves, retention, extraction tasks and results (pure)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from uuid import uuid4

import pytest
from pydantic import ValidationError

from contracts.daily_logs import (
    MAX_TRIES,
    DailyLogState,
    DeleteLogs,
    ExtractionTaskState,
    ProcessingStatus,
    RecordExtractionResult,
    RecordExtractionTask,
    SaveDailyLog,
    TaskStatus,
    UpdateLogStatus,
    daily_log_id,
    extraction_task_uuid,
    turns_from_text,
)
from contracts.memory import Provenance, SaveMemory
from services.memory.domain import daily_logs as rules
from services.memory.domain import model
from services.memory.domain.errors import Conflict, InvalidArgument, NotFound

pytestmark = pytest.mark.unit
P = ProcessingStatus
NOW = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)


def new_log(**changes: object) -> DailyLogState:
    state = rules.save(None, "alice", SaveDailyLog(log_date=date(2025, 3, 9), events="went hiking"), date(2025, 3, 9), NOW)
    assert state is not None
    return state.model_copy(update=changes)


def claimed(state: DailyLogState | None = None, at: datetime = NOW) -> DailyLogState:
    out = rules.claim(state or new_log(), at)
    assert out is not None
    return out


# saves ----------------------------------------------------------------------------------------
def test_a_new_log_is_pending_with_an_id_derived_from_tenant_project_and_date() -> None:
    log = new_log()
    assert log.processing_status is P.PENDING and log.retry_count == 0 and log.version == 1
    assert log.id == daily_log_id("alice", "default", date(2025, 3, 9))
    assert log.id != daily_log_id("bob", "default", date(2025, 3, 9))
    assert log.id != daily_log_id("alice", "work", date(2025, 3, 9))


def test_saving_new_content_into_a_processed_or_failed_log_queues_it_again() -> None:
    done = rules.mark_processed(claimed(), NOW)
    assert done is not None
    again = rules.save(done, "alice", SaveDailyLog(log_date=date(2025, 3, 9), mood=1), date(2025, 3, 9), NOW)
    assert again is not None
    assert again.processing_status is P.PENDING and again.mood == 1 and again.events == "went hiking"
    assert again.version == done.version + 1 and again.processed_at is None and again.retry_count == 0
    failed = new_log(processing_status=P.FAILED, retry_count=MAX_TRIES, error_reason="boom")
    fresh = rules.save(failed, "alice", SaveDailyLog(events="went swimming"), failed.log_date, NOW)
    assert fresh is not None and fresh.processing_status is P.PENDING and fresh.retry_count == 0
    assert fresh.error_reason is None
    assert rules.save(done, "alice", SaveDailyLog(events="went hiking"), done.log_date, NOW) is None  # same content


def test_new_content_saved_during_an_attempt_is_learned_after_it() -> None:
    held = claimed()
    during = rules.save(held, "alice", SaveDailyLog(events="went hiking, then swimming"), held.log_date, NOW)
    assert during is not None and during.processing_status is P.PROCESSING and during.resaved
    after = rules.mark_processed(during, NOW)
    assert after is not None and after.processing_status is P.PENDING and not after.resaved
    assert after.retry_count == 0 and after.processed_at is None
    # the attempt failing instead: a fresh start on the new content, whatever its tries
    spent = rules.mark_failed(during.model_copy(update={"retry_count": MAX_TRIES}), "engine down", NOW)
    assert spent.processing_status is P.PENDING and spent.retry_count == 0 and not spent.resaved
    assert rules.claim(after, NOW) is not None


def test_a_save_that_changes_nothing_writes_nothing() -> None:
    log = new_log()
    assert rules.save(log, "alice", SaveDailyLog(events="went hiking"), log.log_date, NOW) is None


def test_turns_given_replace_the_stored_turns() -> None:
    log = new_log(turns=turns_from_text("user: a\nassistant: b"))
    again = rules.save(log, "alice", SaveDailyLog(turns="user: c"), log.log_date, NOW)
    assert again is not None and [t.text for t in again.turns or []] == ["c"]


def test_a_log_dated_more_than_a_day_ahead_is_refused_naming_log_date() -> None:
    assert rules.log_date_of(SaveDailyLog(), NOW) == NOW.date()
    assert rules.log_date_of(SaveDailyLog(log_date=date(2025, 3, 11)), NOW) == date(2025, 3, 11)
    with pytest.raises(InvalidArgument) as err:
        rules.log_date_of(SaveDailyLog(log_date=date(2025, 3, 12)), NOW)
    assert err.value.field == "log_date"


def test_mood_is_an_integer_from_minus_two_to_two() -> None:
    for bad in (3, -3):
        with pytest.raises(ValidationError) as err:
            SaveDailyLog(mood=bad)
        assert err.value.errors()[0]["loc"] == ("mood",)
    assert SaveDailyLog(mood=-2).mood == -2


def test_plain_text_turns_split_on_speaker_lines() -> None:
    turns = turns_from_text("Caroline: I went to a support group\nit helped a lot\n\nMelanie: That's great!")
    assert [(t.speaker, t.text) for t in turns] == [
        ("Caroline", "I went to a support group\nit helped a lot"), ("Melanie", "That's great!")]
    assert [(t.speaker, t.text) for t in turns_from_text("no speaker here")] == [("user", "no speaker here")]
    assert SaveDailyLog(topics="hiking, tea").topics == ["hiking", "tea"]


def test_a_deleted_log_saved_again_starts_pending_on_the_same_subject() -> None:
    gone = rules.delete(rules.mark_processed(claimed(), NOW) or new_log(), NOW)
    again = rules.save(gone, "alice", SaveDailyLog(events="new day"), gone.log_date, NOW)
    assert again is not None and again.processing_status is P.PENDING and not again.deleted
    assert again.version == gone.version + 1 and again.id == gone.id


# claim --------------------------------------------------------------------------------------
def test_claim_moves_pending_to_processing_and_counts_a_try() -> None:
    c = claimed()
    assert c.processing_status is P.PROCESSING and c.retry_count == 1 and c.claimed_at == NOW


def test_a_claim_of_a_processing_log_is_lost_not_an_error() -> None:
    assert rules.claim(claimed(), NOW) is None


def test_claiming_a_processed_log_is_refused_naming_id() -> None:
    with pytest.raises(Conflict) as err:
        rules.claim(rules.mark_processed(claimed(), NOW) or new_log(), NOW)
    assert err.value.field == "id"


def test_claims_take_pending_logs_only_and_a_failed_log_comes_back_through_pending() -> None:
    failed = new_log(processing_status=P.FAILED, retry_count=MAX_TRIES, error_reason="boom")
    with pytest.raises(Conflict) as err:
        rules.claim(failed, NOW)
    assert err.value.field == "id" and "update_log_status(pending)" in str(err.value)
    with pytest.raises(Conflict):
        rules.change_status(failed, P.PROCESSING, None, NOW)
    back = rules.change_status(failed, P.PENDING, None, NOW)
    assert back is not None and claimed(back).retry_count == 1


# processed / failed -------------------------------------------------------------------------
def test_mark_processed_resets_retry_count_and_sets_processed_at() -> None:
    done = rules.mark_processed(claimed(new_log(retry_count=1)), NOW)
    assert done is not None
    assert done.processing_status is P.PROCESSED and done.retry_count == 0 and done.processed_at == NOW


def test_mark_processed_twice_is_a_no_op_and_needs_a_claim_first() -> None:
    done = rules.mark_processed(claimed(), NOW)
    assert done is not None and rules.mark_processed(done, NOW) is None
    with pytest.raises(Conflict):
        rules.mark_processed(new_log(), NOW)


def test_a_log_carrying_an_error_reason_cannot_be_marked_processed() -> None:
    with pytest.raises(InvalidArgument) as err:
        rules.mark_processed(claimed().model_copy(update={"error_reason": "x"}), NOW)
    assert err.value.field == "error_reason"


@pytest.mark.parametrize(("tries", "expected"), [(1, P.PENDING), (2, P.PENDING), (3, P.FAILED), (4, P.FAILED)])
def test_mark_failed_goes_back_to_pending_below_three_tries_and_to_failed_at_three(tries: int, expected: P) -> None:
    after = rules.mark_failed(claimed().model_copy(update={"retry_count": tries}), "timeout", NOW)
    assert after.processing_status is expected and after.error_reason == "timeout" and after.claimed_at is None


def test_three_failed_attempts_end_in_failed() -> None:
    log = new_log()
    for attempt in range(1, MAX_TRIES + 1):
        log = rules.mark_failed(claimed(log), f"attempt {attempt}", NOW)
    assert log.processing_status is P.FAILED and log.retry_count == MAX_TRIES and log.error_reason == "attempt 3"


def test_only_a_processing_log_can_fail() -> None:
    with pytest.raises(Conflict):
        rules.mark_failed(new_log(), "x", NOW)


# recover ------------------------------------------------------------------------------------
def test_recover_only_touches_logs_stuck_longer_than_the_timeout() -> None:
    timeout = timedelta(minutes=30)
    fresh = claimed(at=NOW - timedelta(minutes=10))
    assert rules.recover(fresh, NOW, timeout) is None
    assert rules.recover(new_log(), NOW, timeout) is None
    stuck = claimed(at=NOW - timedelta(minutes=31))
    back = rules.recover(stuck, NOW, timeout)
    assert back is not None and back.processing_status is P.PENDING and "30 minutes" in (back.error_reason or "")
    spent = rules.recover(stuck.model_copy(update={"retry_count": 3}), NOW, timeout)
    assert spent is not None and spent.processing_status is P.FAILED


# reconcile ----------------------------------------------------------------------------------
def test_requeue_sends_a_processed_log_back_to_pending_only() -> None:
    done = rules.mark_processed(claimed(), NOW)
    assert done is not None
    back = rules.requeue(done, NOW)
    assert back is not None and back.processing_status is P.PENDING and back.processed_at is None
    assert rules.requeue(new_log(), NOW) is None and rules.requeue(claimed(), NOW) is None


# update_log_status --------------------------------------------------------------------------
def test_update_log_status_follows_the_legal_transitions_only() -> None:
    with pytest.raises(Conflict) as err:
        rules.change_status(new_log(), P.PROCESSED, None, NOW)
    assert err.value.field == "processing_status"
    with pytest.raises(Conflict):
        rules.change_status(new_log(), P.FAILED, "x", NOW)
    done = rules.change_status(claimed(), P.PROCESSED, None, NOW)
    assert done is not None and done.processing_status is P.PROCESSED
    with pytest.raises(Conflict):
        rules.change_status(done, P.FAILED, "x", NOW)
    assert rules.change_status(new_log(), P.PENDING, None, NOW) is None  # already so


def test_update_log_status_refuses_processed_with_an_error_reason() -> None:
    with pytest.raises(ValidationError) as err:
        UpdateLogStatus(id=uuid4(), processing_status=P.PROCESSED, error_reason="broke")
    assert "error_reason" in str(err.value)
    with pytest.raises(InvalidArgument) as err2:
        rules.change_status(claimed(), P.PROCESSED, "broke", NOW)
    assert err2.value.field == "error_reason"


def test_update_log_status_failed_then_pending_grants_fresh_tries() -> None:
    failed = rules.change_status(claimed(), P.FAILED, "bad input", NOW)
    assert failed is not None and failed.processing_status is P.FAILED and failed.error_reason == "bad input"
    back = rules.change_status(failed, P.PENDING, None, NOW)
    assert back is not None and back.retry_count == 0 and back.error_reason is None
    claimed_again = rules.change_status(back, P.PROCESSING, None, NOW)
    assert claimed_again is not None and claimed_again.retry_count == 1


def test_an_unknown_status_is_refused_by_the_contract() -> None:
    with pytest.raises(ValidationError) as err:
        UpdateLogStatus.model_validate({"id": str(uuid4()), "processing_status": "done"})
    assert err.value.errors()[0]["loc"] == ("processing_status",)


# retention ----------------------------------------------------------------------------------
def test_retention_deletes_only_processed_logs_older_than_the_cutoff() -> None:
    cutoff = rules.retention_cutoff(NOW, None, None, 14)
    assert cutoff == NOW - timedelta(days=14)
    old = NOW - timedelta(days=15)
    done = rules.mark_processed(claimed(at=old), old)
    assert done is not None and rules.deletable(done, cutoff)
    assert not rules.deletable(done.model_copy(update={"updated_at": NOW}), cutoff)
    failed = new_log(processing_status=P.FAILED, updated_at=old)
    assert not rules.deletable(failed, cutoff) and not rules.deletable(new_log(updated_at=old), cutoff)
    tomb = rules.delete(done, NOW)
    assert tomb.deleted and tomb.events is None and tomb.turns is None and not rules.deletable(tomb, cutoff)


def test_retention_cutoff_takes_older_than_then_retention_days() -> None:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    assert rules.retention_cutoff(NOW, 3, at, 14) == at
    assert rules.retention_cutoff(NOW, 3, None, 14) == NOW - timedelta(days=3)
    with pytest.raises(InvalidArgument) as err:
        rules.retention_cutoff(NOW, None, datetime(2025, 1, 1), 14)
    assert err.value.field == "older_than"


# extraction tasks and results ----------------------------------------------------------------
def test_a_task_is_identified_by_task_id_and_updated_in_place() -> None:
    cmd = RecordExtractionTask(task_id="nightly-1", log_ids=[uuid4()], status=TaskStatus.RUNNING)
    tid, task_id = rules.task_identity("alice", cmd, "key")
    assert tid == extraction_task_uuid("alice", "nightly-1") and task_id == "nightly-1"
    task = rules.record_task(None, "alice", task_id, tid, cmd, NOW)
    assert task is not None and task.started_at == NOW and task.finished_at is None
    done = rules.record_task(task, "alice", task_id, tid, RecordExtractionTask(id=tid, status=TaskStatus.SUCCESS), NOW)
    assert done is not None and done.version == 2 and done.finished_at == NOW and done.log_ids == task.log_ids
    assert rules.record_task(done, "alice", task_id, tid, RecordExtractionTask(id=tid, status=TaskStatus.SUCCESS),
                             NOW) is None
    with pytest.raises(Conflict) as err:
        rules.task_identity("alice", RecordExtractionTask(id=uuid4(), task_id="other"), "key")
    assert err.value.field == "id"
    with pytest.raises(NotFound):
        rules.record_task(None, "alice", None, uuid4(), RecordExtractionTask(id=uuid4()), NOW)


def test_a_task_that_succeeds_after_a_failure_has_no_error() -> None:
    """failed → running → success: the error is dropped (the attempts' count is the task's metrics,
    untouched); failed → failed replaces it; a success refuses an error."""
    tid = extraction_task_uuid("alice", "pipe-1")

    def record(current: ExtractionTaskState | None, **fields: object) -> ExtractionTaskState:
        state = rules.record_task(current, "alice", "pipe-1", tid, RecordExtractionTask(task_id="pipe-1", **fields),
                                  NOW)
        assert state is not None
        return state

    failed = record(None, status=TaskStatus.FAILED, error="endpoint down", metrics={"retry_count": 1})
    assert failed.error == "endpoint down" and failed.finished_at == NOW
    again = record(failed, status=TaskStatus.FAILED, error="timed out")
    assert again.status is TaskStatus.FAILED and again.error == "timed out"  # replaced, never appended
    running = record(again, status=TaskStatus.RUNNING)
    assert running.error == "timed out"  # a retry still shows why the last attempt failed
    done = record(running, status=TaskStatus.SUCCESS, metrics={"retry_count": 2})
    assert done.status is TaskStatus.SUCCESS and done.error is None and done.metrics == {"retry_count": 2}
    assert done.version == 4 and done.finished_at == NOW
    assert rules.task_view(done).error is None
    assert record(failed, status=TaskStatus.SUCCESS).error is None  # failed → success directly
    assert rules.record_task(done, "alice", "pipe-1", tid, RecordExtractionTask(id=tid, status=TaskStatus.SUCCESS),
                             NOW) is None  # nothing left to clear: nothing written

    # a success cannot carry an error: given with it (the contract refuses it, naming the field),
    # or given alone to a successful task (the domain does)
    with pytest.raises(ValidationError) as invalid:
        RecordExtractionTask(task_id="pipe-1", status=TaskStatus.SUCCESS, error="partly")
    assert invalid.value.errors()[0]["loc"] == ("error",)
    with pytest.raises(Conflict) as err:  # a valid request against the task's state: a conflict
        record(done, error="partly")
    assert err.value.field == "error"

    # a successful task recorded failed again (a later run under the same task id) is failed with
    # the new reason; a redelivered command never reaches this rule (its key answers it)
    later = record(done, status=TaskStatus.FAILED, error="model gone")
    assert later.status is TaskStatus.FAILED and later.error == "model gone" and later.metrics == {"retry_count": 2}


def test_a_success_recorded_before_the_rule_reads_without_its_stale_error() -> None:
    """Events are the task's full state: one written before the rule (success, the failed attempt's
    error kept) replays without the error; every other state reads as written."""
    failed = {"id": str(uuid4()), "tenant": "alice", "task_id": "pipe-1", "status": "failed", "error": "endpoint down",
              "version": 1, "created_at": NOW.isoformat(), "updated_at": NOW.isoformat()}
    for status in ("failed", "running", "pending"):
        assert ExtractionTaskState.model_validate({**failed, "status": status}).error == "endpoint down"
    old_success = ExtractionTaskState.model_validate({**failed, "status": "success", "version": 3})
    assert old_success.error is None and old_success.status is TaskStatus.SUCCESS and old_success.version == 3
    assert ExtractionTaskState.model_validate_json(old_success.model_dump_json()) == old_success


def test_dates_are_iso_strings_never_numbers() -> None:
    for bad in (12345, "0.5", " 17e3 "):
        with pytest.raises(ValidationError):
            DeleteLogs.model_validate({"older_than": bad})
        with pytest.raises(ValidationError):
            SaveDailyLog.model_validate({"log_date": bad})
    assert DeleteLogs.model_validate({"older_than": "2025-01-01T00:00:00Z"}).older_than
    with pytest.raises(ValidationError):
        RecordExtractionTask.model_validate({"task_id": "t", "metrics": {"Bad Key": 1}})


def test_a_result_repeat_replaces_its_lists_never_duplicates() -> None:
    log_id, m1, m2 = uuid4(), uuid4(), uuid4()
    first = rules.record_result(None, "alice", "default",
                                RecordExtractionResult(log_id=log_id, task_id="t1", memory_ids=[m1, m1, m2]), NOW)
    assert first is not None and first.memory_ids == [m1, m2]
    same = RecordExtractionResult(log_id=log_id, task_id="t1", memory_ids=[m1, m2])
    assert rules.record_result(first, "alice", "default", same, NOW) is None
    replaced = rules.record_result(first, "alice", "default",
                                   RecordExtractionResult(log_id=log_id, task_id="t1", memory_ids=[m2]), NOW)
    assert replaced is not None and replaced.id == first.id and replaced.version == 2 and replaced.memory_ids == [m2]


# provenance on memories ----------------------------------------------------------------------
def test_provenance_rides_on_a_memory_and_alone_makes_no_new_version() -> None:
    prov = Provenance(log_id=uuid4(), task_id="t1", turns=[0, 2])
    cmd = SaveMemory(category="preference", memory_key="preference.tea", content="likes sencha", provenance=prov)
    state = model.new_memory("alice", cmd, NOW, memory_key="preference.tea")
    assert state.provenance == prov
    assert model.save_over(state, cmd.model_copy(update={"provenance": None}), NOW) is None
    newer = model.save_over(state, cmd.model_copy(update={"content": "likes gyokuro"}), NOW)
    assert newer is not None and newer.provenance == prov
    assert "provenance" not in SaveMemory(content="x").model_dump()  # old requests keep their fingerprint
    with pytest.raises(ValidationError):
        Provenance(log_id=uuid4(), task_id="t1", turns=[-1])
