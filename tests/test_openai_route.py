"""The direct route for OpenAI-compatible endpoints (agents/openai_route.py): which requests take it, that it
sends litellm's request, and that it never imports litellm. The client's behaviour on both routes (answers,
retries, errors, cache) is tests/test_client.py's, which runs every test on each."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.client import LLMClient, ModelConfig, ModelSetupError, check_model_config
from agents.fake_server import DEFAULT_REPLY, FakeOpenAIServer
from agents.openai_route import ROUTE_ENV, litellm_has_price, uses_direct_route

SECRET = "sk-test-SECRET123"
MESSAGES = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "How are you feeling?"}]


def run(coro):
    return asyncio.run(coro)


def test_direct_route_applies_to_unpriced_openai_compatible_models_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROUTE_ENV, "auto")
    base = "http://127.0.0.1:9/v1"
    assert uses_direct_route("openai/fake", base) and not litellm_has_price("openai/fake")
    assert litellm_has_price("openai/gpt-4o-mini")  # litellm prices it: its cost stays litellm's
    assert not uses_direct_route("openai/gpt-4o-mini", base)
    assert not uses_direct_route("openai/fake", None)  # OpenAI itself, or a provider: litellm
    assert not uses_direct_route("hosted_vllm/fake", base) and not uses_direct_route("openai/", base)
    assert LLMClient(ModelConfig(model="mock"))._direct is None
    monkeypatch.setenv(ROUTE_ENV, "litellm")
    assert not uses_direct_route("openai/fake", base)
    monkeypatch.setenv(ROUTE_ENV, "fast")
    with pytest.raises(ValueError, match="RESCUE_MODEL_ROUTE must be one of auto, litellm, got 'fast'"):
        uses_direct_route("openai/fake", base)
    with pytest.raises(ModelSetupError, match="RESCUE_MODEL_ROUTE must be one of"):
        check_model_config(ModelConfig(model="openai/fake", api_base=base))


def test_both_routes_send_the_same_request(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = {}
    extra = {"top_p": 0.5, "seed": 7, "stop": ["\n\n"], "response_format": {"type": "json_object"}}
    for name in ("auto", "litellm"):
        monkeypatch.setenv(ROUTE_ENV, name)
        with FakeOpenAIServer(expected_api_key=SECRET) as server:
            monkeypatch.setenv("RESCUE_TEST_KEY", SECRET)
            config = ModelConfig(
                model="openai/fake", api_base=server.base_url, api_key_env="RESCUE_TEST_KEY", max_tokens=40,
                extra_params=extra,
            )  # fmt: skip
            out = run(LLMClient(config).complete(MESSAGES, temperature=0.7))
        assert out.ok and out.text == DEFAULT_REPLY, name
        (bodies[name],) = server.requests
    assert bodies["auto"] == bodies["litellm"]
    assert bodies["auto"]["model"] == "fake" and bodies["auto"]["temperature"] == 0.7 and bodies["auto"]["top_p"] == 0.5


def test_a_request_that_is_not_plain_json_goes_through_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        label: str

    monkeypatch.setenv(ROUTE_ENV, "auto")
    with FakeOpenAIServer() as server:
        client = LLMClient(ModelConfig(model="openai/fake", api_base=server.base_url))
        assert client._direct is not None
        out = run(client.complete(MESSAGES, response_format=Answer))  # litellm turns the class into a schema
    assert out.ok
    (body,) = server.requests
    assert body["response_format"]["type"] == "json_schema"


def test_direct_route_never_imports_litellm_and_closes_its_sessions(tmp_path: Path) -> None:
    """In a fresh interpreter: a run of requests (a retried 500 included) on the direct route leaves litellm
    unimported and aiohttp silent (no unclosed session at the loop's end)."""
    code = f"""
import asyncio, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from agents.client import LLMClient, ModelConfig
from agents.fake_server import FakeOpenAIServer, Fault
with FakeOpenAIServer(faults=[Fault("500")]) as server:
    client = LLMClient(ModelConfig(model="openai/fake", api_base=server.base_url), backoff_base=0.01)
    out = asyncio.run(client.complete([{{"role": "user", "content": "hi"}}]))
    out2 = asyncio.run(client.complete([{{"role": "user", "content": "again"}}]))  # a second loop
assert out.ok and out.attempts == 2 and out2.ok, (out, out2)
print("litellm" in sys.modules)
"""
    env = {k: v for k, v in os.environ.items() if k != ROUTE_ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert "Unclosed" not in done.stderr and done.stderr.strip() == ""


def test_proxies_are_read_once_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.openai_route import DirectRoute, env_proxy

    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("http://127.0.0.1:8000/v1/chat/completions") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert env_proxy("https://llm.example/v1/chat/completions") == "http://proxy.example:3128"
    assert env_proxy("http://llm.example/v1/chat/completions") is None  # no HTTP_PROXY
    assert env_proxy("https://127.0.0.1:8000/v1/chat/completions") is None  # NO_PROXY
    assert DirectRoute("https://llm.example/v1/", 4).proxy == "http://proxy.example:3128"


def test_status_errors_are_the_sdks_classes_with_its_message() -> None:
    import openai

    from agents.client import error_cause
    from agents.openai_route import _status_error

    url = "http://127.0.0.1:9/v1/chat/completions"
    body = b'{"error": {"message": "slow down", "type": "rate_limit"}}'
    error = _status_error(url, 429, {"retry-after": "3"}, body)
    assert isinstance(error, openai.RateLimitError) and error.status_code == 429
    assert str(error) == 'Error code: 429 - {"error": {"message": "slow down", "type": "rate_limit"}}'
    assert error.response.headers["retry-after"] == "3" and error_cause(error) == "rate_limit"
    assert isinstance(_status_error(url, 503, {}, b"busy"), openai.InternalServerError)
    assert str(_status_error(url, 503, {}, b"busy")) == "Error code: 503 - busy"
    teapot = _status_error(url, 418, {}, b"{}")
    assert type(teapot) is openai.APIStatusError and error_cause(teapot) == "request"
    assert error_cause(_status_error(url, 401, {}, b"{}")) == "auth"
    assert error_cause(_status_error(url, 404, {}, b"{}")) == "model"
