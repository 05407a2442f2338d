"""An OpenAI-compatible chat endpoint asked for JSON (Ollama, llama.cpp's server, vLLM, a hosted API).

One ``POST {url}/chat/completions`` per question, with a JSON schema the answer must follow
(``response_format: json_schema``), ``temperature`` 0 and a ``max_tokens`` bound; a timeout per
request; transient failures (connection errors, timeouts, 429 and 5xx) retried with exponential
backoff by tenacity. What the model says is the caller's to check: this only carries it. Used by
the extractor's LLM engine and the memory service's LLM judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential


class LlmError(RuntimeError):
    """The endpoint failed or answered something that is not a chat completion."""


@dataclass(frozen=True)
class ChatAnswer:
    content: str
    cut: bool  # stopped at max_tokens (finish_reason "length")
    usage: dict[str, Any] = field(default_factory=dict)


def transient(exc: BaseException) -> bool:
    """Whether a failed request is worth trying again."""
    if isinstance(exc, httpx.TransportError | httpx.TimeoutException):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code == 429 or exc.response.status_code >= 500
    return False


class ChatEndpoint:
    def __init__(
        self, url: str, model: str, *, api_key: str | None = None, timeout_s: float = 60.0, attempts: int = 3,
        backoff_s: float = 1.0, client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.attempts = attempts
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), headers=headers)

    async def close(self) -> None:
        await self.client.aclose()

    async def ask(self, system: str, user: str, *, name: str, schema: dict[str, Any], max_tokens: int) -> ChatAnswer:
        """The model's answer to ``user`` under ``system``, asked to follow ``schema``."""
        body = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}},
        }
        answer = await self._post(body)
        try:
            choice = answer["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LlmError("the endpoint's answer has no choices[0].message.content") from exc
        return ChatAnswer(content=content or "", cut=choice.get("finish_reason") == "length",
                          usage=answer.get("usage") or {})

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts), retry=retry_if_exception(transient), reraise=True,
            wait=wait_exponential(multiplier=self.backoff_s, max=30),
        )
        async for attempt in retrying:
            with attempt:
                response = await self.client.post(f"{self.url}/chat/completions", json=body)
                response.raise_for_status()
                result: dict[str, Any] = response.json()
                return result
        raise LlmError("unreachable")  # pragma: no cover
