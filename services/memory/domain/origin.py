"""Where a memory came from, as a person filters it (``GET /v1/memories?source=``): pure rules.

Every memory is one of three, its :data:`contracts.memory.Origin`, which says where its current
version came from:

* ``imported``: an import put it here. Either an Engram export's record, restored with its ids
  and versions (its events carry ``origin: import`` in the log, so a replay knows it too), or a
  save of ``engram import`` from another system's export (its ``source``: mem0, Supermemory, a
  chat). A restored memory edited here afterwards is a version written here: saved (or extracted,
  when it carries a log's provenance).
* ``extracted``: learnt here from a daily log (it carries the log and turns as provenance).
* ``saved``: written here by a save (MCP, REST, a bulk save).
"""

from __future__ import annotations

from contracts.memory import IMPORTED_SOURCES, Origin


def origin_of(*, restored: bool, source: str, extracted: bool) -> Origin:
    """``restored``: an event of the memory was appended by an import; ``source``: the state's
    channel; ``extracted``: it has provenance."""
    if restored or source in IMPORTED_SOURCES:
        return "imported"
    return "extracted" if extracted else "saved"

