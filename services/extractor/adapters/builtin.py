"""The built-in engine behind the engine port (the rules are synchronous and fast: ~5,000 turns/s)."""

from __future__ import annotations

from collections.abc import Sequence

from services.extractor.domain.engine import BuiltinEngine
from services.extractor.domain.model import Extraction, Turn


class BuiltinExtraction:
    name = "builtin"

    def __init__(self, max_chars: int = 200_000) -> None:
        self.max_chars = max_chars
        self.engine = BuiltinEngine()

    async def extract(self, turns: Sequence[Turn]) -> Extraction:
        return Extraction(facts=self.engine.extract(turns), engine=self.name)
