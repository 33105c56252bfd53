"""LLMClient (agents/client.py) against litellm's mock_response and a real local OpenAI-compatible server
(agents/fake_server.py). Nothing here reaches the network beyond 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from pydantic import ValidationError

from agents.client import (
    MAX_ERROR_CHARS,
    Completion,
    LLMClient,
    ModelConfig,
    ModelSetupError,
    check_model_config,
    redact,
)
from agents.fake_server import DEFAULT_REPLY, GARBAGE_REPLY, FakeOpenAIServer, Fault
from agents.mock import MOCK_MODEL, is_mock, mock_responder
from agents.openai_route import ROUTE_ENV

SECRET = "sk-test-SECRET123"
MESSAGES = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "How are you feeling?"}]


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(autouse=True, params=["direct", "litellm"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test on both routes of an OpenAI-compatible endpoint (``agents.openai_route``): the openai SDK
    (``openai/fake`` has no litellm price) and litellm (``RESCUE_MODEL_ROUTE=litellm``)."""
    monkeypatch.setenv(ROUTE_ENV, "auto" if request.param == "direct" else "litellm")
    return request.param


def local_client(server: FakeOpenAIServer, **kwargs) -> LLMClient:
    config_kwargs = {k: kwargs.pop(k) for k in ("timeout", "api_key_env", "max_tokens") if k in kwargs}
    config = ModelConfig(model="openai/fake", api_base=server.base_url, **config_kwargs)
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("backoff_max", 0.05)
    return LLMClient(config, **kwargs)


def cache_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------------------------------------------
# mock_response path (no server at all)


def test_mock_response_text_usage_and_cache_hit(tmp_path: Path) -> None:
    client = LLMClient(ModelConfig(model="openai/gpt-4o-mini"), cache_dir=tmp_path, mock_response='{"label": "calm"}')
    first = run(client.complete(MESSAGES))
    assert first.ok and first.text == '{"label": "calm"}' and not first.cached and first.attempts == 1
    assert client.usage.calls == 1 and client.usage.cache_hits == 0 and client.usage.failures == 0
    assert client.usage.prompt_tokens == first.prompt_tokens and client.usage.completion_tokens > 0

    second = run(client.complete(MESSAGES))
    assert second.cached and second.text == first.text and second.attempts == 0
    assert (second.prompt_tokens, second.completion_tokens) == (first.prompt_tokens, first.completion_tokens)
    assert client.usage.calls == 1 and client.usage.cache_hits == 1  # no second litellm call

    # a different conversation is a miss
    run(client.complete([{"role": "user", "content": "something else"}]))
    assert client.usage.calls == 2 and client.usage.cache_hits == 1


def test_mock_response_callable_gets_messages() -> None:
    seen: list[list[dict]] = []

    def mock(messages: list[dict]) -> str:
        seen.append(messages)
        return json.dumps({"n_messages": len(messages)})

    client = LLMClient(ModelConfig(model="openai/gpt-4o-mini"), mock_response=mock)
    out = run(client.complete(MESSAGES))
    assert json.loads(out.text) == {"n_messages": 2}
    assert seen == [MESSAGES]


def test_cache_file_layout_is_sharded_and_atomic(tmp_path: Path) -> None:
    client = LLMClient(ModelConfig(model="openai/gpt-4o-mini"), cache_dir=tmp_path, mock_response="hello")
    run(client.complete(MESSAGES))
    files = cache_files(tmp_path)
    assert len(files) == 1  # no temporary leftovers
    path = files[0]
    assert path.parent.name == path.stem[:2] and len(path.stem) == 64 and path.suffix == ".json"
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["text"] == "hello" and record["model"] == "openai/gpt-4o-mini"


def test_mock_answers_never_share_keys_with_real_answers(tmp_path: Path) -> None:
    config = ModelConfig(model="openai/fake")
    run(LLMClient(config, cache_dir=tmp_path, mock_response="mocked").complete(MESSAGES))
    (path,) = cache_files(tmp_path)
    assert path.stem != LLMClient.cache_key(config, MESSAGES, {})


def test_cache_key_depends_on_request_not_on_key_value(monkeypatch: pytest.MonkeyPatch) -> None:
    base = ModelConfig(model="openai/gpt-4o-mini", api_key_env="RESCUE_TEST_API_KEY")
    monkeypatch.setenv("RESCUE_TEST_API_KEY", SECRET)
    key = LLMClient.cache_key(base, MESSAGES, {})
    assert len(key) == 64 and int(key, 16) >= 0
    monkeypatch.setenv("RESCUE_TEST_API_KEY", "sk-a-completely-different-key")
    assert LLMClient.cache_key(base, MESSAGES, {}) == key  # the key's value plays no part

    other_messages = [*MESSAGES[:1], {"role": "user", "content": "How are you feeling now?"}]
    variants = {
        LLMClient.cache_key(base, other_messages, {}),
        LLMClient.cache_key(base.model_copy(update={"temperature": 0.7}), MESSAGES, {}),
        LLMClient.cache_key(base.model_copy(update={"model": "openai/gpt-4o"}), MESSAGES, {}),
        LLMClient.cache_key(base.model_copy(update={"api_base": "http://127.0.0.1:9/v1"}), MESSAGES, {}),
        LLMClient.cache_key(base.model_copy(update={"max_tokens": 64}), MESSAGES, {}),
        LLMClient.cache_key(base, MESSAGES, {"response_format": {"type": "json_object"}}),
        LLMClient.cache_key(base, MESSAGES, {"temperature": 0.7}),
    }
    assert key not in variants and len(variants) == 6  # temperature via config or per call: same request
    # the timeout does not change the answer, so it does not change the key
    assert LLMClient.cache_key(base.model_copy(update={"timeout": 5.0}), MESSAGES, {}) == key
    assert LLMClient.cache_key(base, MESSAGES, {"temperature": 0.0}) == key


def test_config_guards() -> None:
    config = ModelConfig(model="openai/gpt-4o-mini")
    with pytest.raises(ValidationError):
        config.temperature = 1.0  # frozen
    with pytest.raises(ValidationError) as info:
        ModelConfig(model="openai/gpt-4o-mini", api_key_env=SECRET)  # the key pasted instead of its name
    assert "SECRET123" not in str(info.value)
    with pytest.raises(ValidationError):
        ModelConfig(model="openai/gpt-4o-mini", extra_params={"api_key": "x"})
    client = LLMClient(config, mock_response="x")
    with pytest.raises(ValueError, match="api_key"):
        run(client.complete(MESSAGES, api_key="x"))


# ----------------------------------------------------------------------------------------------------------------
# the fake server itself


def test_fake_server_routes_and_bounded_stop() -> None:
    server = FakeOpenAIServer(faults=[Fault("timeout", seconds=30.0)]).start()
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    with urllib.request.urlopen(server.base_url + "/models", timeout=5) as resp:
        models = json.loads(resp.read())
    assert models["object"] == "list" and models["data"][0]["id"] == "fake"

    body = json.dumps({"model": "fake", "messages": MESSAGES}).encode()

    def post(path: str) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.port}{path}", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            return json.loads(resp.read())

    hung_errors: list[BaseException] = []

    def hung_request() -> None:
        try:
            post("/v1/chat/completions")
        except OSError as exc:  # the server drops the connection at stop()
            hung_errors.append(exc)

    hung = threading.Thread(target=hung_request, daemon=True)
    hung.start()  # request 0 sleeps 30 s inside the server ...
    deadline = time.monotonic() + 5
    while server.request_count < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    reply = post("/chat/completions")  # ... while request 1 (no /v1 prefix) is answered at once
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"] == DEFAULT_REPLY
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["total_tokens"] == reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]

    started = time.monotonic()
    server.stop()  # wakes the sleeping handler instead of waiting 30 s
    assert time.monotonic() - started < 3
    hung.join(5)
    assert not hung.is_alive() and len(hung_errors) == 1 and server.request_count == 2


# ----------------------------------------------------------------------------------------------------------------
# through litellm against the local server


def test_local_server_answer(route: str) -> None:
    with FakeOpenAIServer(lambda body: f"echo: {body['messages'][-1]['content']}") as server:
        client = local_client(server, max_tokens=32)
        assert (client._direct is not None) == (route == "direct")
        out = run(client.complete(MESSAGES, temperature=0.3))
    assert out == Completion(
        text="echo: How are you feeling?", prompt_tokens=out.prompt_tokens, completion_tokens=5, attempts=1
    )
    assert out.prompt_tokens > 0 and out.cost_usd == 0.0  # a local model has no price
    (body,) = server.requests
    assert body["model"] == "fake" and body["messages"] == MESSAGES
    assert body["temperature"] == 0.3 and body["max_tokens"] == 32
    assert client.usage.calls == 1 and client.usage.completion_tokens == 5 and client.usage.retries == 0


@pytest.mark.parametrize(
    ("faults", "timeout"),
    [
        pytest.param([Fault("429")], 10.0, id="429-then-ok"),
        pytest.param([Fault("500"), Fault("500")], 10.0, id="500-500-then-ok"),
        pytest.param([Fault("503")], 10.0, id="503-then-ok"),
        pytest.param([Fault("timeout", seconds=1.5)], 0.5, id="timeout-then-ok"),
        pytest.param([Fault("truncated")], 10.0, id="truncated-then-ok"),
    ],
)
def test_transient_faults_are_retried(faults: list[Fault], timeout: float) -> None:
    with FakeOpenAIServer(faults=faults) as server:
        client = local_client(server, timeout=timeout)
        started = time.monotonic()
        out = run(client.complete(MESSAGES))
        elapsed = time.monotonic() - started
    assert out.ok and out.text == DEFAULT_REPLY and out.error is None
    assert out.attempts == len(faults) + 1 and server.request_count == len(faults) + 1
    assert client.usage.retries == len(faults) and client.usage.failures == 0 and client.usage.calls == 1
    assert elapsed < timeout * 1.5 * len(faults) + 3  # the client's timeout, not the server's sleep, bounded it


def test_persistent_500_returns_error_without_raising(tmp_path: Path) -> None:
    with FakeOpenAIServer(faults=lambda i, body: Fault("500")) as server:
        client = local_client(server, max_retries=3, cache_dir=tmp_path)
        out = run(client.complete(MESSAGES))
    assert out.text is None and not out.ok
    assert out.error is not None and out.error.startswith("InternalServerError: ")
    assert len(out.error) <= MAX_ERROR_CHARS
    assert out.attempts == 4 and server.request_count == 4
    assert client.usage.failures == 1 and client.usage.retries == 3 and client.usage.calls == 1
    assert cache_files(tmp_path) == []  # failures are never cached


def test_401_is_not_retried() -> None:
    with FakeOpenAIServer(expected_api_key="the-right-key") as server:
        client = local_client(server)
        out = run(client.complete(MESSAGES))
    assert out.text is None and out.error is not None and out.error.startswith("AuthenticationError: ")
    assert out.attempts == 1 and server.request_count == 1 and client.usage.retries == 0
    assert client.usage.failures == 1


def test_garbage_content_is_a_successful_completion() -> None:
    # A 200 whose content is not JSON is the caller's parsing problem, not a transport error.
    with FakeOpenAIServer(faults=[Fault("garbage")]) as server:
        out = run(local_client(server).complete(MESSAGES))
    assert out.ok and out.text == GARBAGE_REPLY and out.attempts == 1


def test_connection_refused_is_retried_then_reported() -> None:
    server = FakeOpenAIServer().start()
    client = local_client(server, max_retries=2)
    server.stop()  # nothing listens on the port any more
    out = run(client.complete(MESSAGES))
    assert out.text is None and out.error is not None and out.attempts == 3


def test_missing_key_env_is_reported_without_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESCUE_TEST_MISSING_API_KEY", raising=False)
    with FakeOpenAIServer() as server:
        out = run(local_client(server, api_key_env="RESCUE_TEST_MISSING_API_KEY").complete(MESSAGES))
    assert out.error is not None and "RESCUE_TEST_MISSING_API_KEY" in out.error and out.attempts == 1
    assert server.request_count == 0


def test_concurrency_is_bounded_by_max_connections() -> None:
    """The server counts the requests it handles at once (no timing): the client's limit is what it sees."""
    latency, n = 0.2, 16

    async def burst(client: LLMClient) -> None:
        outs = await asyncio.gather(*(client.complete([{"role": "user", "content": f"q{i}"}]) for i in range(n)))
        assert all(o.ok for o in outs)

    with FakeOpenAIServer(latency=latency) as server:
        run(burst(local_client(server, max_connections=2)))
        narrow = server.max_in_flight
        server.max_in_flight = 0
        run(burst(local_client(server, max_connections=16)))
        wide = server.max_in_flight
    assert narrow == 2
    assert 2 < wide <= 16  # overlapped (each request sleeps 0.2 s in the server, so they pile up)
    assert server.request_count == 2 * n


# ----------------------------------------------------------------------------------------------------------------
# worker processes


def test_workers_answer_count_cache_and_retry_like_one_process(tmp_path: Path) -> None:
    """workers=2: the same answers, totals and cache as one process; retries happen inside the workers."""
    first = {"q1": Fault("500"), "q3": Fault("429")}  # each fails once, whenever it arrives

    def faults(index: int, body: dict) -> Fault | None:
        return first.pop(body["messages"][-1]["content"], None)

    with FakeOpenAIServer(lambda body: f"echo: {body['messages'][-1]['content']}", faults=faults) as server:
        client = local_client(server, max_connections=4, workers=2, cache_dir=tmp_path)
        assert client.workers == 2

        async def ask() -> list[Completion]:
            await client.probe()
            return await asyncio.gather(*(client.complete([{"role": "user", "content": f"q{i}"}]) for i in range(6)))

        try:
            outs = run(ask())
            assert [o.text for o in outs] == [f"echo: q{i}" for i in range(6)]
            assert all(o.ok and not o.cached for o in outs) and sum(o.attempts for o in outs) == 6 + 2
            again = run(client.complete([{"role": "user", "content": "q0"}]))  # a cache hit: no worker needed
            fresh = run(client.complete([{"role": "user", "content": "q6"}]))  # a new event loop: new workers
            processes = list(client._pool.processes)
        finally:
            client.close()
        assert fresh.text == "echo: q6" and all(p.poll() is not None for p in processes)  # close() stopped them
        assert again.cached and again.text == "echo: q0"
        usage = client.usage
        assert (usage.calls, usage.probe_calls, usage.retries, usage.failures, usage.cache_hits) == (7, 1, 2, 0, 1)
        assert sum(o.completion_tokens for o in [*outs, fresh]) == 14  # "echo: qN" is two words
        assert usage.completion_tokens == 14 + 6  # and the probe's answer, "echo: Reply with the word OK."
        assert server.request_count == 1 + 7 + 2 and len(cache_files(tmp_path)) == 7


def test_workers_probe_reports_setup_errors_and_options_are_checked() -> None:
    with FakeOpenAIServer(expected_api_key="the-right-key") as server:
        client = local_client(server, workers=2)
        try:
            with pytest.raises(ModelSetupError) as info:
                run(client.probe())
        finally:
            client.close()
        assert info.value.cause == "auth" and "--api-key-env" in str(info.value)
        assert server.request_count == 1  # not retried
    with pytest.raises(ValueError, match="pickled"):
        LLMClient(ModelConfig(model=MOCK_MODEL), workers=2, mock_response=lambda messages: "{}")
    assert LLMClient(ModelConfig(model=MOCK_MODEL), workers=2, mock_response=mock_responder).workers == 2
    assert LLMClient(ModelConfig(model=MOCK_MODEL), workers=8, max_connections=3).workers == 3
    with pytest.raises(ValueError, match="workers"):
        LLMClient(ModelConfig(model=MOCK_MODEL), workers=0)


# ----------------------------------------------------------------------------------------------------------------
# secrets


def test_redact_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESCUE_TEST_API_KEY", SECRET)
    monkeypatch.setenv("SOME_VENDOR_API_KEY", "vendor-key-987")
    text = f"key {SECRET} and vendor-key-987 and header Authorization: Bearer tok-abc123"
    out = redact(text)
    assert "SECRET123" not in out and "vendor-key-987" not in out and "tok-abc123" not in out
    assert out.count("***") == 3


@pytest.mark.parametrize("case", ["rejected-key", "persistent-500-echoing-authorization"])
def test_api_key_never_leaks(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RESCUE_TEST_API_KEY", SECRET)
    if case == "rejected-key":
        server = FakeOpenAIServer(expected_api_key="other")  # its 401 message quotes the key it got
    else:
        server = FakeOpenAIServer(faults=lambda i, body: Fault("500", echo_auth=True))
    caplog.set_level(logging.DEBUG, logger="agents.client")
    with server:
        client = local_client(server, api_key_env="RESCUE_TEST_API_KEY", max_retries=2, cache_dir=tmp_path)
        out = run(client.complete(MESSAGES))
        # the key did reach the server (so there was something to leak) ...
        assert server.request_count >= 1
    assert out.text is None and out.error is not None
    # ... but nothing the client returns, stores or logs contains it
    assert "SECRET123" not in out.error and "***" in out.error
    assert "SECRET123" not in repr(out) and "SECRET123" not in out.model_dump_json()
    assert "SECRET123" not in repr(client.usage) and "SECRET123" not in repr(client)
    for path in cache_files(tmp_path):
        assert "SECRET123" not in path.read_text(encoding="utf-8")
    assert "SECRET123" not in caplog.text
    captured = capfd.readouterr()
    assert "SECRET123" not in captured.out and "SECRET123" not in captured.err


def test_key_is_sent_as_bearer_and_success_is_cached_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESCUE_TEST_API_KEY", SECRET)
    with FakeOpenAIServer(expected_api_key=SECRET) as server:
        client = local_client(server, api_key_env="RESCUE_TEST_API_KEY", cache_dir=tmp_path)
        out = run(client.complete(MESSAGES))
        again = run(client.complete(MESSAGES))
    assert out.ok and again.cached and server.request_count == 1
    (path,) = cache_files(tmp_path)
    assert "SECRET123" not in path.read_text(encoding="utf-8") and "SECRET123" not in path.name


# ----------------------------------------------------------------------------------------------------------------
# set-up checks, the probe and the mock model


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_check_model_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESCUE_TEST_UNSET_KEY", raising=False)
    with pytest.raises(ModelSetupError, match="RESCUE_TEST_UNSET_KEY.*not set or empty") as info:
        check_model_config(ModelConfig(model="openai/gpt-4o-mini", api_key_env="RESCUE_TEST_UNSET_KEY"))
    assert "\n" not in str(info.value) and info.value.cause == "auth"
    monkeypatch.setenv("RESCUE_TEST_UNSET_KEY", "")
    with pytest.raises(ModelSetupError, match="not set or empty"):
        check_model_config(ModelConfig(model="openai/gpt-4o-mini", api_key_env="RESCUE_TEST_UNSET_KEY"))
    with pytest.raises(ModelSetupError, match="model string is empty"):
        check_model_config(ModelConfig(model="  "))
    with pytest.raises(ModelSetupError, match="--api-base must be an http"):
        check_model_config(ModelConfig(model="openai/x", api_base="127.0.0.1:8000"))
    # no key variable named: a local server needs none; a mock model needs nothing at all
    check_model_config(ModelConfig(model="openai/x", api_base="http://127.0.0.1:8000/v1"))
    check_model_config(ModelConfig(model=MOCK_MODEL, api_key_env="RESCUE_TEST_UNSET_KEY"))


def test_env_var_name_refuses_a_pasted_key_without_echoing_it() -> None:
    from benchmarks.runner import EvalConfig

    for build in (
        lambda: ModelConfig(model="openai/x", api_key_env="sk-abc-123-PASTED"),
        lambda: EvalConfig(api_key_env="sk-abc-123-PASTED"),
        lambda: EvalConfig(judge_api_key_env="sk-abc-123-PASTED"),
    ):
        with pytest.raises(ValidationError) as info:
            build()
        assert "PASTED" not in str(info.value) and "NAME of an environment variable" in str(info.value)
    assert EvalConfig(api_key_env="OPENAI_API_KEY").api_key_env == "OPENAI_API_KEY"


def test_probe_succeeds_without_counting_a_call_or_caching(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        client = local_client(server, cache_dir=tmp_path)
        run(client.probe())
        (body,) = server.requests
    assert body["max_tokens"] <= 16
    assert client.usage.probe_calls == 1 and client.usage.calls == 0 and client.usage.failures == 0
    assert cache_files(tmp_path) == []


def test_probe_connection_refused_stops_at_once() -> None:
    client = LLMClient(
        ModelConfig(model="openai/fake", api_base=f"http://127.0.0.1:{closed_port()}/v1"),
        max_retries=4,
        backoff_base=1.0,
    )
    started = time.monotonic()
    with pytest.raises(ModelSetupError) as info:
        run(client.probe())
    assert time.monotonic() - started < 8  # no back-off sleeps: a refused connection is not retried
    assert info.value.cause == "connection" and "--api-base" in str(info.value) and "\n" not in str(info.value)
    assert client.usage.probe_calls == 1 and client.usage.calls == 0


def test_probe_401_names_the_key_option_and_not_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESCUE_TEST_API_KEY", SECRET)
    with FakeOpenAIServer(expected_api_key="the-right-key") as server:  # its 401 message quotes the key it got
        client = local_client(server, api_key_env="RESCUE_TEST_API_KEY", max_retries=3)
        with pytest.raises(ModelSetupError) as info:
            run(client.probe())
        assert server.request_count == 1  # not retried
    message = str(info.value)
    assert info.value.cause == "auth" and "--api-key-env" in message and "RESCUE_TEST_API_KEY" in message
    assert "SECRET123" not in message


def test_probe_404_unknown_model_names_the_model_option() -> None:
    with FakeOpenAIServer(known_models=["fake"]) as server:
        client = LLMClient(ModelConfig(model="openai/no-such-model", api_base=server.base_url), max_retries=3)
        with pytest.raises(ModelSetupError) as info:
            run(client.probe())
        assert server.request_count == 1
        # the known model is served as usual, and listed
        assert run(local_client(server).complete(MESSAGES)).ok
        with urllib.request.urlopen(server.base_url + "/models", timeout=5) as resp:
            assert [m["id"] for m in json.loads(resp.read())["data"]] == ["fake"]
    assert info.value.cause == "model" and "--model" in str(info.value) and "no-such-model" in str(info.value)


def test_probe_retries_server_errors_then_raises() -> None:
    with FakeOpenAIServer(faults=lambda i, body: Fault("503")) as server:
        client = local_client(server, max_retries=1)
        with pytest.raises(ModelSetupError) as info:
            run(client.probe())
        assert server.request_count == 2
    assert info.value.cause == "server" and "after 2 attempts" in str(info.value)
    assert client.usage.probe_calls == 2 and client.usage.retries == 0 and client.usage.calls == 0


def test_missing_provider_credentials_are_an_auth_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    # litellm reports a missing OPENAI_API_KEY as a 500 "Missing credentials": not retried, and named as such
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = LLMClient(ModelConfig(model="openai/gpt-4o-mini"), max_retries=3, backoff_base=1.0)
    started = time.monotonic()
    with pytest.raises(ModelSetupError) as info:
        run(client.probe())
    assert time.monotonic() - started < 5 and client.usage.probe_calls == 1
    assert info.value.cause == "auth" and "--api-key-env" in str(info.value)


def test_failed_calls_log_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="agents.client")
    with FakeOpenAIServer(faults=lambda i, body: Fault("500")) as server:
        client = local_client(server, max_retries=1)

        async def three() -> list[Completion]:
            return await asyncio.gather(*(client.complete([{"role": "user", "content": f"q{i}"}]) for i in range(3)))

        outs = run(three())
    assert all(not o.ok and o.status_code == 500 for o in outs)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # the caller tallies and reports
    assert any("failed after 2 attempt(s)" in r.getMessage() for r in caplog.records)


def test_mock_model_needs_no_network_and_answers_task_prompts(tmp_path: Path) -> None:
    from benchmarks.base import PromptOptions
    from benchmarks.registry import get_task, make_batches
    from rescue_env.data import load_dataset
    from rescue_env.data.overlaps import leak_groups

    assert is_mock("mock") and not is_mock("openai/mock") and not is_mock(None)
    client = LLMClient(ModelConfig(model=MOCK_MODEL), cache_dir=tmp_path)
    run(client.probe())  # returns at once, sends nothing
    assert client.usage.probe_calls == 0
    dataset = load_dataset("demo")
    samples = {s.sample_id: s for s in dataset}
    for name in ("itp", "rpp", "stp", "ssp", "er", "vp"):
        task = get_task(name)
        batch = make_batches(task.build_instances(dataset.samples), task.batch_size, leak_groups(dataset))[0]
        out = run(client.complete(task.render(batch, samples, PromptOptions(mode="dialogue"))))
        assert out.ok and not out.cached, name
        predictions = task.parse(out.text, batch)
        assert all(p.ok for p in predictions), (name, [p.failure for p in predictions])
    assert client.usage.calls == 6 and client.usage.failures == 0
    assert {json.loads(p.read_text())["model"] for p in cache_files(tmp_path)} == {"mock"}


def test_mock_responder_fills_judge_templates() -> None:
    from benchmarks import judge

    likert = judge.er_judge_messages(speaker="Maya", gold_emotion="hurt", predicted_emotion="sad")
    assert judge.parse_judge_answer(mock_responder(likert)).score == 3.0
    authors = judge.vp_judge_messages(speaker="Maya", gold=[], predicted=[], rubric="authors")
    assert judge.parse_judge_answer(mock_responder(authors), "authors").score == 1.0 + 2.0
    assert mock_responder([{"role": "user", "content": "hello"}]) == DEFAULT_REPLY
