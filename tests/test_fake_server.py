"""The local OpenAI-compatible server (agents/fake_server.py) at the HTTP level: keep-alive, what closes a
connection, faults, and its count of concurrent requests. 127.0.0.1 only."""

from __future__ import annotations

import http.client
import json
import threading

from agents.fake_server import DEFAULT_REPLY, FakeOpenAIServer, Fault

BODY = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "one two three"}]})


def post(connection: http.client.HTTPConnection, body: str = BODY, path: str = "/v1/chat/completions"):
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    return response, response.read()


def test_one_connection_serves_many_requests() -> None:
    with FakeOpenAIServer() as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        answers = [post(connection) for _ in range(3)]
        sock = connection.sock  # still open: the server kept the connection alive
        connection.close()
    assert [r.status for r, _ in answers] == [200, 200, 200] and sock is not None
    assert all(r.getheader("Connection") == "keep-alive" for r, _ in answers)
    payload = json.loads(answers[0][1])
    assert payload["choices"][0]["message"]["content"] == DEFAULT_REPLY
    assert payload["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert server.request_count == 3


def test_close_requests_unknown_paths_and_bad_bodies() -> None:
    with FakeOpenAIServer() as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        connection.request("POST", "/v1/chat/completions", body=BODY, headers={"Connection": "close"})
        closing = connection.getresponse()
        closing.read()
        connection.close()
        assert closing.status == 200 and closing.getheader("Connection") == "close"

        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        missing, missing_body = post(connection, path="/v1/embeddings")
        bad, bad_body = post(connection, body="[1, 2]")
        connection.request("GET", "/v1/models?x=1")
        models = connection.getresponse()
        listed = json.loads(models.read())
        connection.close()
    assert missing.status == 404 and "unknown path /v1/embeddings" in json.loads(missing_body)["error"]["message"]
    assert bad.status == 400 and "not a JSON object" in json.loads(bad_body)["error"]["message"]
    assert models.status == 200 and [m["id"] for m in listed["data"]] == ["fake"]
    assert server.request_count == 1  # only the valid chat request is recorded


def test_faults_in_order_then_normal_answers() -> None:
    faults = [Fault("503"), Fault("truncated"), Fault("garbage", text="nope"), Fault("429", message="slow down")]
    with FakeOpenAIServer(faults=faults) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        answers = [post(connection) for _ in range(5)]
        connection.close()
    statuses = [r.status for r, _ in answers]
    assert statuses == [503, 200, 200, 429, 200]
    assert json.loads(answers[0][1])["error"]["code"] == "service_unavailable"
    whole = json.dumps(json.loads(answers[4][1]))
    assert len(answers[1][1]) < len(whole) and answers[1][1].startswith(b'{"id": "chatcmpl-')
    assert json.loads(answers[2][1])["choices"][0]["message"]["content"] == "nope"
    assert json.loads(answers[3][1])["error"] == {
        "message": "slow down",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }


def test_max_in_flight_counts_concurrent_requests() -> None:
    release = threading.Event()

    def held(body: dict) -> str:  # every answer waits until all four requests are inside the server
        release.wait(5)
        return "ok"

    with FakeOpenAIServer(held) as server:
        results: list[int] = []

        def one() -> None:
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            results.append(post(connection)[0].status)
            connection.close()

        threads = [threading.Thread(target=one) for _ in range(4)]
        for thread in threads:
            thread.start()
        while server.in_flight < 4 and all(t.is_alive() for t in threads):
            threading.Event().wait(0.01)
        release.set()
        for thread in threads:
            thread.join(10)
    assert results == [200] * 4 and server.max_in_flight == 4 and server.in_flight == 0
