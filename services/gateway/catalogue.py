"""The gateway's catalogue: one row per public operation — the contract model (its result model is
the contract's), the scope, the project rule, the toolset, the MCP tool's name, title, annotations,
description and parameter descriptions, how MCP presents the result, and the REST route (:class:`Rest`).

A row's MCP tool is derived from its contract model (``mcp_tools.catalogue_tool``: every field a
parameter, ``project`` offered as ``containerTag``, the contract's own constraints), its REST route
by one factory (``rest.catalogue_route``: path parameters from the path, query parameters or a body
from the contract's other fields, the contract's validators and the row's rules kept), and every
row runs through one generic :meth:`services.gateway.operations.Operations.run`. A row with
``mcp=False`` has a seed-compatible MCP adapter over ``run`` instead, whose names or parameters
differ from the contract (``memory``, ``recall``, ``save_memory``, ``update_memory``,
``listProjects``, ``save_daily_log`` with its plain-text turns, the graph app's tools), or no tool
(the profile is a resource; API keys are REST only). Adding a public operation means its contract,
its handler row in the owning service, and a row here (docs/architecture.md, "Adding a public
command or query").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mcp.types import ToolAnnotations
from pydantic import BaseModel

from contracts.auth import (
    CreateApiKey,
    CreateMyApiKey,
    ListApiKeys,
    ListMyApiKeys,
    ListUsers,
    RevokeApiKey,
    RevokeMyApiKey,
    Scope,
)
from contracts.daily_logs import (
    ClaimDailyLog,
    DeleteLogs,
    GetDailyLog,
    GetExtractionResults,
    GetExtractionTasks,
    GetUnprocessedLogs,
    ListDailyLogs,
    MarkLogFailed,
    MarkLogProcessed,
    ReconcileLogStatuses,
    RecordExtractionResult,
    RecordExtractionTask,
    RecoverStuckLogs,
    SaveDailyLog,
    UpdateLogStatus,
)
from contracts.extraction_modes import GetExtractionModes, SetExtractionMode
from contracts.graph import GraphPageQuery
from contracts.memory import (
    MAX_RECALL_LIMIT,
    MAX_STRUCTURED_CONTENT_CHARS,
    MEMORY_KEY_PATTERN,
    NAMESPACE_FOR_CATEGORY,
    ForgetMemory,
    GetMemory,
    GetMemoryByKey,
    GetProfile,
    GetSharedMemories,
    ListConflicts,
    ListProjects,
    MemoryHistoryQuery,
    MergeMemory,
    MoveMemory,
    PinMemory,
    Recall,
    RecallMemory,
    SaveMemory,
    SaveSharedMemory,
    SettleConflict,
    UnmergeMemory,
    UpdateMemory,
)
from services.gateway.toolsets import ASSISTANT, MAINTENANCE

READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False)
#: a claim or a failed attempt: calling it again has another effect (one more try)
CLAIM = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)


class ProjectRule(StrEnum):
    """How an operation's ``project`` resolves (the key's restriction and the connection's pin first)."""

    NONE = "none"  # the contract names no project
    SEARCH = "search"  # a filter: the restriction or pin, else the request's, else every project
    WRITE = "write"  # where it acts: the restriction or pin, else the request's, else 'default'
    #: the install operator's (API keys): install-wide, so refused to a credential restricted to a project
    OPERATOR = "operator"
    #: the user's own (their API keys): the caller's user, never one a credential acts for; within the
    #: caller's project and scopes
    OWNER = "owner"


@dataclass(frozen=True)
class Rest:
    """A row's REST route (``rest.catalogue_route`` builds it): path parameters from the path, a GET's
    or DELETE's query parameters from the contract's other fields, a POST's or PUT's body from them."""

    method: str
    path: str  # under /v1; ``{name}`` is a path parameter
    name: str  # the route's name: its OpenAPI operationId is this, the path and the method
    summary: str
    doc: str | None = None  # the route's description
    status: int = 200
    tags: tuple[str, ...] = ("daily logs",)
    fields: Mapping[str, str] = field(default_factory=dict)  # path parameter -> contract field, where named otherwise
    body: str | None = None  # the body model's name (OpenAPI's schema), if not <contract>Request
    optional_body: bool = False  # the body may be left out (every field has a default)
    rules: Mapping[str, Any] | None = None  # the contract's rules across fields, as JSON Schema (OpenAPI's body)
    defaults: Mapping[str, Any] = field(default_factory=dict)  # REST's own defaults, by contract field
    responses: Mapping[int | str, Mapping[str, Any]] = field(default_factory=dict)  # more documented answers


@dataclass(frozen=True)
class Operation:
    model: type[BaseModel]
    name: str  # the MCP tool's name
    title: str
    annotations: ToolAnnotations
    scope: Scope
    toolset: str
    doc: str  # the MCP tool's description: the model's manual
    project: ProjectRule = ProjectRule.NONE
    params: Mapping[str, str] = field(default_factory=dict)  # MCP parameter descriptions, by contract field
    rest: Rest | None = None  # its REST route (None: none)
    plain: bool = False  # the MCP tool answers the result as it is (else with "success": true in front)
    mcp: bool = True  # its MCP tool derived from the contract (False: a hand-written adapter, or none)
    relations: bool = False  # a recall: the best hits come with their relations (``relations.py``)


def _given(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """JSON Schema: ``name`` is present and not null (or matches ``schema``)."""
    return {"required": [name], "properties": {name: schema or {"not": {"type": "null"}}}}


def _exactly_one(*names: str) -> dict[str, Any]:
    return {"oneOf": [_given(n) for n in names]}


# The contracts' rules across fields as JSON Schema, for the REST bodies' OpenAPI (clients and fuzzers read them there).
SAVE_RULES: dict[str, Any] = {"allOf": [
    {"if": _given("memory_key"), "then": _given("category")},
    {"if": _given("category"), "then": {"properties": {"content": {"maxLength": MAX_STRUCTURED_CONTENT_CHARS}}}},
    *({"if": _given("category", {"const": category.value}),
       "then": {"properties": {"memory_key": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": rf"^{ns}\.[a-z0-9_]{{1,64}}$"}]}}}}
      for category, ns in NAMESPACE_FOR_CATEGORY.items()),
]}
UPDATE_RULES: dict[str, Any] = {"allOf": [
    _exactly_one("id", "memory_key"),
    {"anyOf": [_given(n) for n in ("content", "context", "category", "importance", "confidence", "source")]},
    {"properties": {"memory_key": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": MEMORY_KEY_PATTERN}]}}},
]}
KEY_RULES: dict[str, Any] = {"not": {"required": ["project", "scopes"], "properties": {
    "project": {"type": "string"}, "scopes": {"type": "array", "contains": {"const": Scope.ADMIN.value}}}}}
PIN_RULES: dict[str, Any] = {"allOf": [
    {"anyOf": [_given("pinned"), _given("forget_after"), _given("clear_forget_after", {"const": True})]},
    {"not": {"allOf": [_given("forget_after"), _given("clear_forget_after", {"const": True})]}},
]}
LOG_STATUS_RULES: dict[str, Any] = {"if": _given("processing_status", {"const": "processed"}),
                                    "then": {"properties": {"error_reason": {"type": "null"}}}}

LOG_ID = "The daily log's id (save_daily_log and get_unprocessed_logs give it)."
TASK_ID = "The extraction run's id (1-128 of [A-Za-z0-9_.:-])."
REASON = "What went wrong."
LIMIT = f"1-{MAX_RECALL_LIMIT}, default 20"
AS_OF = ("As of a past moment (ISO 8601 date or date-time, UTC unless an offset is given): the memories as "
         "they stood then, each in its version of then; changed_since names what replaced one since.")


def _maintenance(model: type[BaseModel], name: str, title: str, annotations: ToolAnnotations, doc: str, *,
                 scope: Scope = Scope.MEMORY_MAINTENANCE, project: ProjectRule = ProjectRule.NONE,
                 rest: Rest | None = None, **params: str) -> Operation:
    return Operation(model, name, title, annotations, scope, MAINTENANCE, doc, project, params, rest)


#: The extraction workflow's operations (the maintenance toolset), in the order clients list them.
OPERATIONS: tuple[Operation, ...] = (
    _maintenance(
        GetUnprocessedLogs, "get_unprocessed_logs", "Logs waiting for extraction", READ,
        """List daily logs waiting for extraction (pending, and failed unless include_failed is false), oldest first.
        Long logs come fewer at a time (about 600 KB of logs an answer): ask again for the rest.

        Workflow: claim_daily_log each, extract memories (get_memory_by_key → update_memory or save_memory),
        record_extraction_result, then mark_log_processed (or mark_log_failed with the reason). A failed log
        has used its tries: update_log_status(pending) gives it a fresh start.""",
        rest=Rest("GET", "/daily-logs/unprocessed", "unprocessed_logs", "Logs waiting for extraction",
                  "Pending logs (and failed, retryable ones unless include_failed=false), oldest day first."),
        project=ProjectRule.SEARCH, limit=LIMIT, include_failed="Also failed logs (claimable once sent back to "
        "pending); default true."),
    _maintenance(
        UpdateLogStatus, "update_log_status", "Change a log's status", WRITE,
        """Move a log along the lifecycle's legal transitions (e.g. failed → pending to retry it afresh).
        Marking processed with an error_reason is refused.""",
        rest=Rest("POST", "/daily-logs/{log_id}/status", "log_status", "Change a log's status",
                  "Legal transitions only; processed with an error_reason is refused.", fields={"log_id": "id"},
                  rules=LOG_STATUS_RULES),
        id=LOG_ID, processing_status="pending, processing, processed or failed.",
        error_reason="Why (with pending or failed; never with processed)."),
    _maintenance(
        ClaimDailyLog, "claim_daily_log", "Claim a log", CLAIM,
        """Claim a pending log for processing (pending → processing, one more try). Atomic: of many workers exactly
        one gets `claimed: true`; the others get `claimed: false` and should pick another log.""",
        rest=Rest("POST", "/daily-logs/{log_id}/claim", "claim_log", "Claim a log",
                  "Atomic: of many concurrent claimers exactly one gets `claimed: true`.", fields={"log_id": "id"}),
        id=LOG_ID),
    _maintenance(
        MarkLogProcessed, "mark_log_processed", "Mark a log processed", WRITE,
        """Mark a claimed log processed (retry_count back to 0). Record its extraction result first.""",
        rest=Rest("POST", "/daily-logs/{log_id}/processed", "log_processed", "Mark a log processed", fields={"log_id": "id"}),
        id=LOG_ID),
    _maintenance(
        MarkLogFailed, "mark_log_failed", "Mark a log attempt failed", CLAIM,
        """Record a failed attempt on a claimed log: back to pending below 3 tries, failed at 3.""",
        rest=Rest("POST", "/daily-logs/{log_id}/failed", "log_failed", "Mark a log attempt failed",
                  "Back to pending below 3 tries, failed at 3.", fields={"log_id": "id"}, body="MarkLogFailedRequest"),
        id=LOG_ID, error_reason=REASON),
    _maintenance(
        RecoverStuckLogs, "recover_stuck_logs", "Recover stuck logs", WRITE,
        """Send logs stuck in processing back to pending (below 3 tries) or to failed (at 3).""",
        rest=Rest("POST", "/daily-logs/recover", "recover_logs", "Recover logs stuck in processing", optional_body=True),
        project=ProjectRule.SEARCH, timeout_minutes="Processing longer than this is stuck; default 30."),
    _maintenance(
        ReconcileLogStatuses, "reconcile_log_statuses", "Reconcile log statuses", WRITE,
        """Send processed logs that have no extraction result back to pending, so they are really extracted.""",
        rest=Rest("POST", "/daily-logs/reconcile", "reconcile_logs", "Requeue processed logs without an extraction result",
                  optional_body=True),
        project=ProjectRule.SEARCH),
    _maintenance(
        DeleteLogs, "delete_logs", "Delete old processed logs", DESTRUCTIVE,
        """Delete processed logs older than the retention (failed logs are kept for retry).""",
        rest=Rest("DELETE", "/daily-logs", "delete_logs", "Delete old processed logs",
                  "Processed logs last updated before the cut-off (older_than, else now − retention_days, default 14\n"
                  "days) are deleted; failed logs are kept for retry."),
        project=ProjectRule.SEARCH, retention_days="Keep this many days; default 14.",
        older_than="Cut-off (ISO 8601 with time zone); overrides retention_days."),
    _maintenance(
        RecordExtractionTask, "record_extraction_task", "Record an extraction task", WRITE,
        """Record or update an extraction run's metadata (never the extracted text).""",
        rest=Rest("POST", "/extraction-tasks", "record_task", "Record an extraction task"),
        project=ProjectRule.SEARCH, id="An existing task's id (or give task_id).",
        task_id="The run's id; omitted = generated.", log_ids="The logs the run covers.",
        status="pending, running, success or failed.", engine="Which extractor ran it.",
        error="Why the run failed.", metrics="Counts of the run (tokens, cost, facts…): up to 32 numbers."),
    _maintenance(
        RecordExtractionResult, "record_extraction_result", "Record an extraction result", WRITE,
        """Link a log to the memories one run produced. One result per (log_id, task_id): recording it again
        replaces it (never a duplicate) and never deletes a memory.""",
        rest=Rest("POST", "/extraction-results", "record_result", "Record an extraction result",
                  "One result per (log_id, task_id): a repeat replaces it, never duplicates, never deletes a memory."),
        log_id=LOG_ID, task_id=TASK_ID, memory_ids="Memories this run produced or updated from the log.",
        shared_memory_ids="Shared memories it produced."),
    _maintenance(
        GetExtractionTasks, "get_extraction_tasks", "List extraction tasks", READ,
        """List extraction runs, newest first.""",
        rest=Rest("GET", "/extraction-tasks", "list_tasks", "List extraction tasks"),
        status="Only tasks in this status.", task_id="Only this task.",
        log_id="Only the tasks that cover this daily log.", limit=LIMIT),
    _maintenance(
        ListDailyLogs, "list_daily_logs", "List daily logs", READ,
        """List daily logs of any status (pending, processing, processed, failed) by day range, newest day first,
        each with its retry_count and error_reason. get_extraction_tasks(log_id) gives a log's runs.""",
        rest=Rest("GET", "/daily-logs", "list_logs", "List daily logs",
                  "Logs of any status by day (date_from, date_to: log_date, inclusive) and status, newest day first,\n"
                  "each with its retry_count and error_reason; next_cursor pages on. A restricted key or pinned\n"
                  "connection lists its project."),
        project=ProjectRule.SEARCH, status="pending, processing, processed or failed.",
        date_from="Only logs of this day or later (YYYY-MM-DD).", date_to="Only logs of this day or earlier.",
        limit=LIMIT, cursor="next_cursor of the page before (same filters)."),
    _maintenance(
        GetDailyLog, "get_daily_log", "Read a daily log", READ,
        """One daily log with its turns, fields and where its extraction stands (status, retry_count, error).""",
        rest=Rest("GET", "/daily-logs/{log_id}", "get_daily_log", "A daily log", fields={"log_id": "id"}),
        id=LOG_ID),
    _maintenance(
        GetExtractionResults, "get_extraction_results", "List extraction results", READ,
        """Extraction results (which memories a task produced from a log), newest first.""",
        rest=Rest("GET", "/extraction-results", "list_results", "List extraction results"),
        log_id="Only the results of this log.", task_id="Only this task's results.", limit="1-1000, default 100"),
    _maintenance(
        SetExtractionMode, "set_extraction_mode", "Set a project's extraction mode", WRITE,
        """Set who learns from a project's daily logs. Switching to auto lets the engine take the logs waiting.""",
        rest=Rest("PUT", "/projects/{project}/extraction-mode", "set_extraction_mode", "Set a project's extraction mode",
                  "auto: the engine extracts each log at once; agent: only external agents extract; handoff: agents first,\n"
                  "the engine after the hand-off time; null: the install default. Needs `memory:maintenance`.",
                  body="ExtractionModeRequest"),
        project=ProjectRule.WRITE, mode=(
            "auto: Engram's engine extracts each log at once; agent: only external agents (you) extract; handoff: "
            "agents first, the engine after the hand-off time; null: follow the install default.")),
    _maintenance(
        GetExtractionModes, "get_extraction_modes", "Extraction modes", READ,
        """The install's default extraction mode, the hand-off time, and the projects with a mode of their own.""",
        rest=Rest("GET", "/extraction/modes", "extraction_modes", "Who learns from daily logs",
                  "The install's default extraction mode (auto, agent or handoff), the hand-off time, and the projects\n"
                  "that have a mode of their own. Needs `memory:read`."),
        scope=Scope.MEMORY_READ),
)

#: The memory operations (the assistant toolset). ``mcp=False``: the MCP tool is a seed-compatible
#: adapter over ``Operations.run`` in ``entrypoints/mcp_tools.py`` (``memory``, ``recall``,
#: ``save_memory``…), or there is none (the profile is a resource, the graph an MCP App).
OPERATIONS += (
    Operation(
        SaveMemory, "save_memory", "Save a categorised memory", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """Save a memory (the MCP tools memory and save_memory).""", ProjectRule.WRITE, mcp=False,
        rest=Rest("POST", "/memories", "save", "Save a memory",
                  "Save a memory. The same content saved again in the same project is not duplicated.",
                  status=201, tags=(), body="SaveRequest", rules=SAVE_RULES, defaults={"source": "api"}),
    ),
    Operation(
        UpdateMemory, "update_memory", "Update a memory", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """Write a new version of a memory (the MCP tool update_memory).""", ProjectRule.WRITE, mcp=False,
        rest=Rest("POST", "/memories/update", "update", "Update a memory (new version)",
                  "Write a new version of a memory found by id or memory_key.", tags=(), body="UpdateRequest",
                  rules=UPDATE_RULES),
    ),
    Operation(
        ForgetMemory, "forget_memory", "Forget a memory", DESTRUCTIVE, Scope.MEMORY_WRITE, ASSISTANT,
        """Forget a memory (the MCP tool memory, action forget).""", ProjectRule.WRITE, mcp=False,
        rest=Rest("POST", "/memories/forget", "forget", "Forget a memory",
                  "Forget by id, or by content (exact match, then semantic similarity ≥ 0.85). The memories it had "
                  "superseded are current again (`reinstated`).", tags=(),
                  body="ForgetRequest", rules=_exactly_one("content", "memory_id")),
    ),
    Operation(
        Recall, "recall", "Recall memories", READ, Scope.MEMORY_READ, ASSISTANT,
        """Hybrid recall (the MCP tool recall).""", ProjectRule.SEARCH, mcp=False, relations=True,
        rest=Rest("POST", "/recall", "recall", "Recall memories",
                  "Hybrid search (dense + keyword, RRF; its best candidates scored by late interaction, then put in "
                  "a learned order) over the "
                  "caller's memories.", tags=()),
    ),
    Operation(
        GetMemoryByKey, "get_memory_by_key", "Get a memory by key", READ, Scope.MEMORY_READ, ASSISTANT,
        """Find the memory stored under a memory_key: `{found, memory}`. Use it before saving or updating.""",
        ProjectRule.WRITE, params={"memory_key": (
            "namespace.topic, namespace bound to the category: profile, preference, personality, goal, skill, "
            "relationship, emotion, style (e.g. preference.food)")},
        rest=Rest("GET", "/memories/by-key", "by_key", "Get a memory by memory_key", tags=()),
    ),
    Operation(
        ListProjects, "listProjects", "List projects", READ, Scope.MEMORY_READ, ASSISTANT,
        """The user's projects (the MCP tool listProjects).""", mcp=False,
        rest=Rest("GET", "/projects", "projects", "List projects", tags=()),
    ),
    Operation(
        GetProfile, "profile", "The user's profile", READ, Scope.MEMORY_READ, ASSISTANT,
        """The user's profile (the MCP resource engram://profile and the prompt context).""", ProjectRule.SEARCH,
        params={"as_of": AS_OF},
        mcp=False, rest=Rest("GET", "/profile", "profile", "The user's profile", tags=()),
    ),
    Operation(
        SaveDailyLog, "save_daily_log", "Save the day's log", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """The day's log (the MCP tool save_daily_log and POST /v1/daily-logs: their turns and topics are
        written by hand, the tool's may be plain text).""", ProjectRule.WRITE, mcp=False,
    ),
    Operation(
        GraphPageQuery, "memory-graph", "Memory graph", READ, Scope.MEMORY_READ, ASSISTANT,
        """One page of the memory graph (the MCP App's tools, entrypoints/graph_tools.py).""", ProjectRule.SEARCH,
        mcp=False,
    ),
    Operation(
        ListConflicts, "list_conflicts", "Memories flagged as contradicting", READ, Scope.MEMORY_READ, ASSISTANT,
        """List pairs of memories that may contradict each other, flagged when the later one was saved (a change
        Engram's rules could not settle on their own: a second pet of the same kind, 'now' without what changed,
        another language). Ask the user which holds, then settle_conflict. Most confident first.""",
        ProjectRule.SEARCH, params={"limit": LIMIT},
        rest=Rest("GET", "/memories/conflicts", "list_conflicts", "Memories flagged as contradicting", tags=()),
    ),
    Operation(
        SettleConflict, "settle_conflict", "Settle a flagged pair", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """Settle a pair from list_conflicts: keep both (they do not contradict), or say which one is current (the
        other is then superseded by it: it leaves recall and stays in its history, marked).""",
        ProjectRule.WRITE, params={"memory_id": "The flagged memory (list_conflicts' memory.id).",
                                   "other_id": "The memory it was flagged against (list_conflicts' other.id).",
                                   "keep": "both, memory (memory_id is current) or other (other_id is current).",
                                   "reason": "Why, in a few words (kept with the supersession)."},
        rest=Rest("POST", "/memories/conflicts/settle", "settle_conflict", "Settle a flagged pair", tags=()),
    ),
    Operation(
        PinMemory, "pin_memory", "Pin a memory or set its expiry", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """Pin a memory so it never fades in recall (or unpin it), or set when it leaves recall (forget_after: a
        temporary fact, e.g. a parking spot for this week; it stays in its history).""",
        ProjectRule.WRITE, params={"memory_id": "The memory's id.", "pinned": "true to pin, false to unpin.",
                                   "forget_after": "ISO 8601 date-time (one already past: it leaves recall now).",
                                   "clear_forget_after": "true to remove an expiry set before."},
        rest=Rest("POST", "/memories/{memory_id}/pin", "pin_memory", "Pin a memory or set its expiry", tags=(),
                  rules=PIN_RULES),
    ),
    Operation(
        UnmergeMemory, "unmerge_memory", "Undo a merge", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """Undo a merge: when Engram took a saying for the same fact said again (×N in recall) and it was not,
        the saying that merge added (a MemoryMerged version in get_memory_history) becomes a memory of its own
        again, in its own words; the memory counts one saying fewer.""",
        ProjectRule.WRITE, params={"memory_id": "The merged memory's id.",
                                   "version": "The version the merge wrote (get_memory_history: event MemoryMerged)."},
        rest=Rest("POST", "/memories/{memory_id}/unmerge", "unmerge_memory", "Undo a merge", tags=()),
    ),
    Operation(
        MergeMemory, "merge_memory", "Merge two memories of one fact", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """Merge two memories that say the same fact (two phrasings Engram did not fold when they were saved):
        memory_id becomes one more saying of into (×N in recall; its words, when and where it was said are kept
        among into's sayings) and leaves recall, forgotten with a reason naming into. Both must be current and in
        one project. unmerge_memory on the MemoryMerged version this writes undoes it.""",
        ProjectRule.WRITE, params={"memory_id": "The duplicate's id: it becomes a saying of into.",
                                   "into": "The id of the memory that stays.",
                                   "reason": "Why they are the same fact (kept in the duplicate's history)."},
        rest=Rest("POST", "/memories/{memory_id}/merge", "merge_memory", "Merge a memory into another", tags=()),
    ),
    Operation(
        MoveMemory, "move_memory", "Move a memory to another project", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """Move a memory to another project: it becomes a memory of to_project (its words, fields, how often and
        when it was said, and its pin go with it; a keyed memory keeps its key there) and the one left behind is
        forgotten with a reason naming the new one, which the answer gives. A credential restricted to a project
        moves nothing out of it.""",
        ProjectRule.WRITE, params={"memory_id": "The memory's id.", "to_project": "The project it moves to."},
        rest=Rest("POST", "/memories/{memory_id}/move", "move_memory", "Move a memory to another project", tags=()),
    ),
    Operation(
        GetMemory, "get_memory", "Read a memory", READ, Scope.MEMORY_READ, ASSISTANT,
        """One memory by its id as it stands now: its content, fields, status (active or forgotten) and current
        version (get_memory_history gives every version). A memory outside the credential's or connection's
        project is not found.""",
        params={"memory_id": "The memory's id (recall, save_memory and recall_memory give it)."},
        rest=Rest("GET", "/memories/{memory_id}", "get_memory", "A memory (its current version)", tags=()),
    ),
    Operation(
        RecallMemory, "recall_memory", "List memories by category or keyword", READ, Scope.MEMORY_READ, ASSISTANT,
        """List memories by category and/or keyword, most important first (a filter, not a semantic search).""",
        ProjectRule.SEARCH, params={"category": "Only this category.",
                                    "keyword": "Substring to match in the content (any language).", "limit": LIMIT,
                                    "as_of": AS_OF,
                                    "status": "current (default: what stands now), superseded (replaced by a later "
                                              "fact), forgotten, or all.",
                                    "created_from": "Only memories created at or after this (ISO 8601 date or "
                                                    "date-time).",
                                    "created_to": "Only memories created up to this (a date: through its end).",
                                    "source": "saved (written here by a save), extracted (learnt here from a "
                                              "daily log) or imported (by an import).",
                                    "sort": "importance (default), newest or oldest.",
                                    "cursor": "next_cursor of the page before (same sort)."},
        rest=Rest("GET", "/memories", "list_memories", "List memories: filters, a sort and pages", tags=(),
                  doc="By category, keyword, status, when created (created_from, created_to) and source (saved, "
                      "extracted or imported), sorted by importance (default), newest or oldest; next_cursor pages on in the "
                      "same sort. A restricted key or pinned connection lists its project only."),
    ),
    Operation(
        MemoryHistoryQuery, "get_memory_history", "A memory's history", READ, Scope.MEMORY_READ, ASSISTANT,
        """Every version of a memory from the event log, oldest first, each with when it stopped being true.""",
        params={"memory_id": "The memory's id."}, plain=True,
        rest=Rest("GET", "/memories/{memory_id}/history", "history", "A memory's versions",
                  "Every version from the event log, oldest first, each with when it stopped being true.", tags=()),
    ),
    Operation(
        SaveSharedMemory, "save_shared_memory", "Save a shared memory", WRITE, Scope.MEMORY_WRITE, ASSISTANT,
        """Save a shared experience with the user. Saving the same title again updates it (idempotent).""",
        params={"title": "Short title of the shared experience.", "event": "What happened.",
                "importance": "1 (trivia) to 5 (core fact); default 3"},
        rest=Rest("POST", "/shared-memories", "save_shared", "Save a shared memory",
                  "Idempotent per title: the same title again updates it.", tags=()),
    ),
    Operation(
        GetSharedMemories, "get_shared_memories", "Get shared memories", READ, Scope.MEMORY_READ, ASSISTANT,
        """Find shared experiences by exact title or keyword, newest first.""",
        params={"title": "Exact title.", "keyword": "Substring of title or event."},
        rest=Rest("GET", "/shared-memories", "get_shared", "Find shared memories", tags=()),
    ),
)

#: API keys and users: the install operator's (``admin``, never with a project restriction); REST only.
OPERATIONS += (
    Operation(
        CreateApiKey, "create_api_key", "Create an API key", WRITE, Scope.ADMIN, ASSISTANT,
        """Create an API key.""", ProjectRule.OPERATOR, mcp=False,
        rest=Rest("POST", "/keys", "create_key", "Create an API key",
                  "Create an API key (the secret is in this response only). Needs the `admin` scope: the install\n"
                  "operator's role, never restricted to a project.", status=201, tags=("admin",), rules=KEY_RULES),
    ),
    Operation(
        ListApiKeys, "list_api_keys", "List API keys", READ, Scope.ADMIN, ASSISTANT,
        """List API keys.""", ProjectRule.OPERATOR, mcp=False,
        rest=Rest("GET", "/keys", "list_keys", "List API keys",
                  "Every key (or one user's), never their secrets. Needs the `admin` scope.", tags=("admin",)),
    ),
    Operation(
        ListUsers, "list_users", "List users", READ, Scope.ADMIN, ASSISTANT,
        """List users.""", ProjectRule.OPERATOR, mcp=False,
        rest=Rest("GET", "/users", "list_users", "List users",
                  "Every user of the install (id, sign-in name, name, disabled, created), never a password. Needs an\n"
                  "unrestricted `admin` key.", tags=("admin",)),
    ),
    Operation(
        RevokeApiKey, "revoke_api_key", "Revoke an API key", DESTRUCTIVE, Scope.ADMIN, ASSISTANT,
        """Revoke an API key.""", ProjectRule.OPERATOR, mcp=False,
        rest=Rest("DELETE", "/keys/{key_id}", "revoke_key", "Revoke an API key",
                  "Revoke a key; every gateway refuses it at once. Needs the `admin` scope.", tags=("admin",)),
    ),
)

#: A user's own API keys (``keys:manage``): what the console's Keys page uses; REST only.
OPERATIONS += (
    Operation(
        CreateMyApiKey, "create_my_api_key", "Create a key of your own", WRITE, Scope.KEYS_MANAGE, ASSISTANT,
        """Create an API key of your own.""", ProjectRule.OWNER, mcp=False,
        rest=Rest("POST", "/me/keys", "create_my_key", "Create an API key of your own",
                  "A key for the same user, with at most the scopes of the credential that asks (memory:read,\n"
                  "memory:write, memory:maintenance) and, when that credential is restricted to a project, restricted\n"
                  "to it too. The secret is in this response only. Needs the `keys:manage` scope.",
                  status=201, tags=("keys",)),
    ),
    Operation(
        ListMyApiKeys, "list_my_api_keys", "List your keys", READ, Scope.KEYS_MANAGE, ASSISTANT,
        """List your API keys.""", ProjectRule.OWNER, mcp=False,
        rest=Rest("GET", "/me/keys", "list_my_keys", "List your API keys",
                  "Your keys (a credential restricted to a project: that project's), never their secrets. Needs the\n"
                  "`keys:manage` scope.", tags=("keys",)),
    ),
    Operation(
        RevokeMyApiKey, "revoke_my_api_key", "Revoke a key of yours", DESTRUCTIVE, Scope.KEYS_MANAGE, ASSISTANT,
        """Revoke one of your API keys.""", ProjectRule.OWNER, mcp=False,
        rest=Rest("DELETE", "/me/keys/{key_id}", "revoke_my_key", "Revoke an API key of yours",
                  "Revoke one of your keys; every gateway refuses it at once. Another user's key is not found.\n"
                  "Needs the `keys:manage` scope.", tags=("keys",)),
    ),
)

BY_MODEL: dict[type[BaseModel], Operation] = {op.model: op for op in OPERATIONS}


def operation(model: type[BaseModel]) -> Operation:
    """The catalogue row of a contract model."""
    return BY_MODEL[model]


__all__ = ["BY_MODEL", "CLAIM", "DESTRUCTIVE", "OPERATIONS", "READ", "WRITE", "Operation", "ProjectRule", "operation"]
