"""The ``similar`` lists' rule, without I/O: each memory keeps its ``limit`` nearest neighbours.

A memory's list is computed when it is written (the memory service's nearest neighbours of it).
Similarity is symmetric, so the memory is then offered to each of those neighbours' lists too: a
neighbour whose list is not full, or whose weakest edge is weaker than the new score, takes the
memory and lets go of its weakest beyond ``limit``. A neighbour saved long ago thereby gains a
closer memory that arrived after it, without asking the memory service again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Offer:
    """What a neighbour's list does with an offered memory."""

    take: bool  # the list gains (or re-weighs) an edge to the offered memory
    drop: tuple[str, ...] = ()  # the targets it lets go of (its weakest beyond the limit)


def offer(current: Mapping[str, float | None], candidate: str, score: float, limit: int) -> Offer:
    """Offer ``candidate`` at ``score`` to a list (target → weight) kept to its ``limit`` strongest.

    Already on the list: its weight becomes ``score``. Else taken when the list has fewer than
    ``limit`` edges or its weakest is weaker than ``score`` (a tie keeps what is there); then the
    weakest go until ``limit`` remain (ties broken by target, so every replica decides the same).
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if candidate in current:
        return Offer(take=True)
    ranked = sorted(current.items(), key=lambda kv: (-(kv[1] if kv[1] is not None else float("-inf")), kv[0]))
    if len(ranked) >= limit:
        weakest = ranked[limit - 1][1]
        if weakest is not None and weakest >= score:
            return Offer(take=False)
    keep = limit - 1  # the candidate takes one place
    return Offer(take=True, drop=tuple(target for target, _ in ranked[keep:]))
