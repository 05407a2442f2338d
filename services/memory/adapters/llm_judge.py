"""The LLM judge: a second opinion on a pair of memories the rules flagged as perhaps changing one
another, from any OpenAI-compatible chat endpoint (:mod:`kit.llm_chat`). Asked only for the pairs
the rules could not settle (a second pet of one kind, "now" without what changed, another language),
it answers one of the rules' four verdicts with a confidence and a reason; what it answers is
checked like any input (an unknown verdict, a confidence outside 0-1 or no JSON: no opinion, the
flag stands). Never constructed unless ``ENGRAM_TRUTH_LLM_URL`` is set.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
from pydantic import BaseModel, Field, ValidationError

from kit.llm_chat import ChatEndpoint, LlmError
from services.memory.domain.supersession import Candidate, Opinion, Statement, Verdict

log = logging.getLogger("engram.memory.llm_judge")

SYSTEM_PROMPT = """You keep a user's long-term memory true. Given a fact already remembered about the user and a
new statement, decide what the new statement does to the remembered fact. Return JSON only, following the schema.
verdict:
- supersedes: both are about the same thing (the same person and the same attribute: where they live, their job,
  their pet's name, a number) and give different values, so only the later one is true now; not when the earlier
  one also says something else the later one does not change ("I live in Lisbon and work as a nurse" / "I moved
  to Porto": the job still holds): answer uncertain then;
- duplicate: both say the same fact;
- unrelated: both can be true at once (other people, other attributes, one more item of a list: a second pet);
- uncertain: you cannot tell from the words.
confidence: 0-1, how sure you are. reason: one short sentence naming what changed or why not."""

OPINION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["verdict", "confidence", "reason"],
    "properties": {
        "verdict": {"type": "string", "enum": [v.value for v in Verdict]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
}


class _Answer(BaseModel):
    verdict: Verdict
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field(min_length=1, max_length=2_000)


def question(new: Statement, held: Candidate) -> str:
    """The pair as the model reads it: each with the day it was said."""
    return (f"Remembered (said {held.created_at.date().isoformat()}): {held.content}\n"
            f"New statement (said {new.created_at.date().isoformat()}): {new.content}")


def parse_opinion(content: str) -> Opinion | None:
    """The model's JSON as an opinion; None when it is not one."""
    try:
        answer = _Answer.model_validate(json.loads(content))
    except (json.JSONDecodeError, ValidationError) as exc:
        log.warning("the LLM judge's answer is not an opinion (the pair stays flagged): %s", str(exc)[:200])
        return None
    return Opinion(verdict=answer.verdict, confidence=round(answer.confidence, 3),
                   reason=" ".join(answer.reason.split())[:300])


class LlmJudge:
    """The memory service's judge port over an OpenAI-compatible chat endpoint."""

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout_s: float = 20.0,
                 attempts: int = 2, backoff_s: float = 0.5, max_tokens: int = 200,
                 client: httpx.AsyncClient | None = None) -> None:
        self.endpoint = ChatEndpoint(url, model, api_key=api_key, timeout_s=timeout_s, attempts=attempts,
                                     backoff_s=backoff_s, client=client)
        self.max_tokens = max_tokens

    async def close(self) -> None:
        await self.endpoint.close()

    async def judge(self, new: Statement, held: Candidate) -> Opinion | None:
        try:
            answer = await self.endpoint.ask(SYSTEM_PROMPT, question(new, held), name="opinion",
                                             schema=OPINION_SCHEMA, max_tokens=self.max_tokens)
        except (LlmError, httpx.HTTPError) as exc:
            log.warning("the LLM judge did not answer (the pair stays flagged): %s", str(exc)[:200])
            return None
        return parse_opinion(answer.content)
