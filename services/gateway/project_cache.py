"""The user's projects, cached per process for the tools' ``containerTag`` description (issue 18 item 2).

The Supermemory design keeps each session's container tags for 5 minutes and refreshes them when a
save lands in a tag it has not seen. The gateway is stateless across replicas, so this cache lives
in one process only, keyed by (tenant, project scope) — a credential restricted to a project, or a
pinned connection, has its own entry holding only what it may see — and holds at most
:data:`MAX_ENTRIES` entries for :data:`TTL_S` seconds. A replica that did not see a project created
learns of it within the TTL, or at once with ``listProjects(refresh: true)``. No I/O here: the
caller passes the fetch.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from contracts.memory import ProjectList

TTL_S = 60.0
MAX_ENTRIES = 10_000
#: at most this many project names go into a tool's parameter description
MAX_NAMES_IN_DESCRIPTION = 50

Key = tuple[str, str | None]


class ProjectCache:
    def __init__(self, ttl_s: float = TTL_S, max_entries: int = MAX_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[Key, tuple[float, ProjectList]] = OrderedDict()

    def fresh(self, key: Key) -> ProjectList | None:
        """The cached list while it is younger than the TTL."""
        entry = self._entries.get(key)
        if entry is None or self.clock() - entry[0] > self.ttl_s:
            return None
        return entry[1]

    def store(self, key: Key, projects: ProjectList) -> ProjectList:
        self._entries[key] = (self.clock(), projects)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return projects

    async def get(self, key: Key, fetch: Callable[[], Awaitable[ProjectList]], *, refresh: bool = False) -> ProjectList:
        """The list from the cache, else (or with ``refresh``) fetched and cached."""
        cached = None if refresh else self.fresh(key)
        return cached if cached is not None else self.store(key, await fetch())

    def saw(self, key: Key, project: str) -> None:
        """A write landed in ``project``: a project the cached list does not hold makes it stale."""
        entry = self._entries.get(key)
        if entry is not None and all(p.project != project for p in entry[1].projects):
            del self._entries[key]


def describe_projects(base: str, projects: ProjectList | None) -> str:
    """A ``containerTag`` description naming the user's projects (most recently used first)."""
    if projects is None:
        return base
    if not projects.projects:
        return base + " The user has no projects yet: the first memory saved creates one."
    ordered = sorted(projects.projects, key=lambda p: p.last_updated, reverse=True)
    names = [p.project for p in ordered[:MAX_NAMES_IN_DESCRIPTION]]
    more = (projects.total or len(ordered)) - len(names)
    tail = f" and {more} more (listProjects)" if more > 0 else ""
    return base + " The user's projects: " + ", ".join(names) + tail + "."
