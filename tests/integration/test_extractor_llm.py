"""The LLM engine against a real HTTP server started by the test, answering recorded
OpenAI-compatible chat responses: the request (JSON-schema output, model, auth, token limit),
retries of transient failures, timeouts, tokens, and what is done with a bad, cut or ungrounded
answer. Against a real local model (llama.cpp's server, SmolLM2 from PyPI, `make llm`):
test_extractor_llm_local.py, opt-in with ``-m llm_local``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from contracts.memory import Category
from services.extractor.adapters.llm import LlmError, LlmExtraction
from services.extractor.domain.engine import turns_from_text

pytestmark = pytest.mark.integration

RECORDED_FACTS = {
    "facts": [
        {"content": "The user lives in Lyon.", "category": "user_profile", "memory_key": "profile.location",
         "importance": 5, "confidence": 0.9, "turns": [0], "speaker": "user"},
        {"content": "The user loves hiking with their dog.", "category": "preference",
         "memory_key": "profile.hiking", "importance": 3, "confidence": 0.8, "turns": [0, 9], "speaker": "user"},
        {"content": "Not a category.", "category": "weather", "memory_key": None, "importance": 3,
         "confidence": 0.5, "turns": [0], "speaker": "user"},
    ]
}


def completion(content: str, prompt_tokens: int = 120, completion_tokens: int = 45) -> dict[str, Any]:
    return {
        "id": "chatcmpl-recorded", "object": "chat.completion", "created": 1764547200, "model": "recorded",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class Recorded:
    """The server's script: what each successive request is answered with."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.delay_s = 0.0


@pytest.fixture
def server() -> Iterator[tuple[str, Recorded]]:
    script = Recorded()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append(body)
            script.headers.append(dict(self.headers))
            status, answer = script.answers.pop(0) if script.answers else (500, {"error": "no more answers"})
            if script.delay_s:
                threading.Event().wait(script.delay_s)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()


TURNS = turns_from_text("user: I live in Lyon and I love hiking with my dog.")


async def test_facts_follow_the_schema_and_tokens_are_counted(server: tuple[str, Recorded]) -> None:
    url, script = server
    script.answers.append((200, completion(json.dumps(RECORDED_FACTS))))
    engine = LlmExtraction(url, "qwen2.5:0.5b", api_key="sk-test", backoff_s=0.01)
    try:
        out = await engine.extract(TURNS)
    finally:
        await engine.close()
    assert [f.content for f in out.facts] == ["The user lives in Lyon.", "The user loves hiking with their dog."]
    assert out.facts[0].memory_key == "profile.location" and out.facts[0].category is Category.USER_PROFILE
    assert out.facts[1].memory_key is None  # a key outside its category's namespace is dropped
    assert out.facts[1].turn_refs == ("turn:0",)  # turn 9 is not in the piece
    assert (out.prompt_tokens, out.completion_tokens) == (120, 45)
    request = script.requests[0]
    assert request["model"] == "qwen2.5:0.5b" and request["temperature"] == 0 and request["max_tokens"] == 4096
    assert request["response_format"]["type"] == "json_schema"
    assert "[0] user: I live in Lyon" in request["messages"][1]["content"]
    assert script.headers[0]["Authorization"] == "Bearer sk-test"


async def test_facts_not_grounded_in_the_turns_they_cite_are_dropped(server: tuple[str, Recorded]) -> None:
    url, script = server
    turns = turns_from_text("Ana: I adopted a beagle last week.\nBo: Nice! I work as a nurse.")

    def fact(content: str, cited: list[int], speaker: str = "") -> dict[str, Any]:
        return {"content": content, "category": "user_profile", "memory_key": None, "importance": 3,
                "confidence": 0.8, "turns": cited, "speaker": speaker}

    answer = {"facts": [
        fact("Ana lives in Lyon.", [0], "Ana"),  # the prompt's example, copied: nothing of turn 0 says it
        fact("Ana adopted a beagle.", [], "Ana"),  # cites no turn
        fact("Ana adopted a beagle.", [7], "Ana"),  # cites a turn outside the piece
        fact("Ana adopted a beagle dog.", [0], "Ana"),
        fact("Bo works as a nurse.", [1], "the nurse"),  # a speaker the piece does not have: the turn's
    ]}
    script.answers.append((200, completion(json.dumps(answer))))
    engine = LlmExtraction(url, "m", backoff_s=0.01)
    try:
        out = await engine.extract(turns)
    finally:
        await engine.close()
    assert [(f.content, f.turn_refs, f.speaker) for f in out.facts] == [
        ("Ana adopted a beagle dog.", ("turn:0",), "Ana"), ("Bo works as a nurse.", ("turn:1",), "Bo")]


async def test_an_answer_cut_at_the_token_limit_keeps_the_facts_it_completed(server: tuple[str, Recorded]) -> None:
    url, script = server
    whole = json.dumps(RECORDED_FACTS)
    cut = whole[: whole.index('{"content": "The user loves') + 30]  # the second fact half written
    answer = completion(cut)
    answer["choices"][0]["finish_reason"] = "length"
    script.answers += [(200, answer), (200, completion(cut))]
    engine = LlmExtraction(url, "m", max_tokens=64, backoff_s=0.01)
    try:
        out = await engine.extract(TURNS)
        assert [f.content for f in out.facts] == ["The user lives in Lyon."]
        assert script.requests[0]["max_tokens"] == 64
        with pytest.raises(LlmError, match="not JSON"):  # not cut by the limit: a broken answer
            await engine.extract(TURNS)
    finally:
        await engine.close()


async def test_transient_failures_are_retried(server: tuple[str, Recorded]) -> None:
    url, script = server
    script.answers += [(503, {"error": "loading"}), (429, {"error": "slow down"}),
                       (200, completion(json.dumps(RECORDED_FACTS)))]
    engine = LlmExtraction(url, "m", attempts=3, backoff_s=0.01)
    try:
        out = await engine.extract(TURNS)
    finally:
        await engine.close()
    assert len(out.facts) == 2 and len(script.requests) == 3


async def test_a_client_error_is_not_retried(server: tuple[str, Recorded]) -> None:
    url, script = server
    script.answers += [(400, {"error": "bad request"}), (200, completion(json.dumps(RECORDED_FACTS)))]
    engine = LlmExtraction(url, "m", attempts=3, backoff_s=0.01)
    try:
        with pytest.raises(httpx.HTTPStatusError):
            await engine.extract(TURNS)
    finally:
        await engine.close()
    assert len(script.requests) == 1


async def test_a_slow_endpoint_times_out_after_its_attempts(server: tuple[str, Recorded]) -> None:
    url, script = server
    script.delay_s = 1.0
    script.answers += [(200, completion("{}"))] * 2
    engine = LlmExtraction(url, "m", attempts=2, timeout_s=0.2, backoff_s=0.01)
    try:
        with pytest.raises(httpx.TimeoutException):
            await engine.extract(TURNS)
    finally:
        await engine.close()
    assert len(script.requests) == 2


async def test_an_answer_that_is_not_the_facts_json_is_an_error(server: tuple[str, Recorded]) -> None:
    url, script = server
    script.answers += [(200, completion("Sure! Here are the facts: ...")), (200, completion('{"items": []}'))]
    engine = LlmExtraction(url, "m", backoff_s=0.01)
    try:
        with pytest.raises(LlmError, match="not JSON"):
            await engine.extract(TURNS)
        with pytest.raises(LlmError, match="no 'facts'"):
            await engine.extract(TURNS)
    finally:
        await engine.close()


def test_the_llm_engine_is_never_built_unless_configured() -> None:
    from services.extractor.adapters.builtin import BuiltinExtraction
    from services.extractor.config import ExtractorSettings
    from services.extractor.main import build_engine

    assert isinstance(build_engine(ExtractorSettings(_env_file=None)), BuiltinExtraction)  # type: ignore[call-arg]
    with pytest.raises(SystemExit, match="ENGRAM_EXTRACTOR_LLM_URL"):
        build_engine(ExtractorSettings(extractor_engine="llm"))  # type: ignore[call-arg]
