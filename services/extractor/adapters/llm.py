"""The LLM engine: any OpenAI-compatible chat endpoint (Ollama, llama.cpp server, vLLM, a hosted API).

One ``POST {url}/chat/completions`` per piece of a log, asking for JSON that follows a schema
(``response_format: json_schema``) within ``max_tokens`` (:mod:`kit.llm_chat`: timeouts per
request, transient failures retried with backoff); tokens taken from ``usage``. What the model answers is checked like any input: an unknown category drops
the fact, a key that does not fit its category is dropped (the fact is kept), turn numbers outside
the piece are ignored, and a fact must be grounded in the piece — it cites at least one of its
turns and shares a content word (stemmed) with them, else it is dropped (a small model copies the
prompt's example or invents). An answer cut at ``max_tokens`` (``finish_reason: length``) keeps
the facts it completed. Never constructed unless ``ENGRAM_EXTRACTOR_LLM_URL`` is set.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import httpx
import snowballstemmer
from pydantic import BaseModel, Field, ValidationError

from contracts.memory import Category, memory_key_problem
from kit.llm_chat import ChatEndpoint, LlmError
from services.extractor.domain.model import Extraction, Fact, Turn
from services.extractor.domain.text import content_words

log = logging.getLogger("engram.extractor.llm")

SYSTEM_PROMPT = """You extract durable facts about the people in a conversation for a long-term memory.
Return JSON only, following the schema. Rules:
- One atomic fact per item, written in the third person with the person's name ("Ana lives in Lyon"),
  never "I" or "you". Drop greetings, questions, thanks, small talk and anything the assistant says.
- category: one of user_profile, preference, personality, goal, skill, relationship, emotional_pattern,
  conversation_style.
- memory_key: only when the fact fills a slot a later fact would replace (where they live, their job,
  a favourite): "<namespace>.<topic>" with namespace profile, preference, personality, goal, skill,
  relationship, emotion or style (matching the category) and topic of [a-z0-9_]; else null.
- importance 1-5 (5 = identity, lasting), confidence 0-1, turns: the numbers of the turns it comes from."""

FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["facts"],
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["content", "category", "memory_key", "importance", "confidence", "turns", "speaker"],
                "properties": {
                    "content": {"type": "string"},
                    "category": {"type": "string", "enum": [c.value for c in Category]},
                    "memory_key": {"type": ["string", "null"]},
                    "importance": {"type": "integer", "minimum": 1, "maximum": 5},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    "turns": {"type": "array", "items": {"type": "integer"}},
                    "speaker": {"type": "string"},
                },
            },
        }
    },
}


class _LlmFact(BaseModel):
    content: str = Field(min_length=1, max_length=4000)
    category: Category
    memory_key: str | None = None
    importance: int = Field(3, ge=1, le=5)
    confidence: float = Field(0.7, ge=0.0, le=1.0)
    turns: list[int] = Field(default_factory=list)
    speaker: str = ""


def render(turns: Sequence[Turn]) -> str:
    """The piece as numbered lines the model cites back."""
    return "\n".join(f"[{i}] {t.speaker}: {t.text}" for i, t in enumerate(turns))


_STEM = snowballstemmer.stemmer("english")


def stems(text: str) -> set[str]:
    return set(_STEM.stemWords(content_words(text)))


def _complete_items(content: str) -> list[Any]:
    """The facts a cut answer completed: the objects of its ``facts`` array up to the cut."""
    start = content.find("[", max(0, content.find('"facts"')))
    if start < 0:
        return []
    decoder, items, at = json.JSONDecoder(), [], start + 1
    while True:
        while at < len(content) and content[at] in " \t\r\n,":
            at += 1
        try:
            item, at = decoder.raw_decode(content, at)
        except json.JSONDecodeError:
            return items
        items.append(item)


def parse_facts(content: str, turns: Sequence[Turn], *, cut: bool = False) -> list[Fact]:
    """The model's JSON as facts; invalid or ungrounded items are dropped, never guessed at. ``cut``:
    the answer stopped at its token limit, so the facts it completed are kept."""
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        if not cut:
            raise LlmError(f"the model's answer is not JSON: {exc}") from exc
        data = {"facts": _complete_items(content)}
    items = data.get("facts") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise LlmError("the model's answer has no 'facts' list")
    speakers = {t.speaker for t in turns}
    facts, ungrounded = [], 0
    for item in items:
        try:
            parsed = _LlmFact.model_validate(item)
        except ValidationError:
            continue
        key = parsed.memory_key
        if key is not None and memory_key_problem(parsed.category, key):
            key = None
        cited = list(dict.fromkeys(i for i in parsed.turns if 0 <= i < len(turns)))
        said = set().union(*(stems(turns[i].text) for i in cited))
        if not said & stems(parsed.content):  # cites no turn of the piece, or none that says it
            ungrounded += 1
            continue
        speaker = parsed.speaker if parsed.speaker in speakers else turns[cited[0]].speaker
        facts.append(Fact(
            content=parsed.content.strip(), category=parsed.category, importance=parsed.importance,
            confidence=round(parsed.confidence, 3), turn_refs=tuple(turns[i].ref for i in cited), speaker=speaker,
            memory_key=key,
        ))
    if ungrounded:
        log.info("dropped %d of the model's %d facts: not grounded in the turns they cite", ungrounded, len(items))
    return facts


class LlmExtraction:
    """The engine port over an OpenAI-compatible chat endpoint (:class:`kit.llm_chat.ChatEndpoint`)."""

    name = "llm"

    def __init__(
        self, url: str, model: str, *, api_key: str | None = None, timeout_s: float = 60.0, attempts: int = 3,
        max_chars: int = 24_000, max_tokens: int = 4096, backoff_s: float = 1.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.endpoint = ChatEndpoint(url, model, api_key=api_key, timeout_s=timeout_s, attempts=attempts,
                                     backoff_s=backoff_s, client=client)
        self.max_chars = max_chars
        self.max_tokens = max_tokens

    async def close(self) -> None:
        await self.endpoint.close()

    async def extract(self, turns: Sequence[Turn]) -> Extraction:
        answer = await self.endpoint.ask(SYSTEM_PROMPT, render(turns), name="facts", schema=FACTS_SCHEMA,
                                         max_tokens=self.max_tokens)
        usage = answer.usage
        return Extraction(
            facts=parse_facts(answer.content, turns, cut=answer.cut), engine=self.name,
            prompt_tokens=int(usage.get("prompt_tokens") or 0), completion_tokens=int(usage.get("completion_tokens") or 0),
        )
