"""The OpenEnv bridge (``bridges.openenv_server``, ``bridges.openenv_client``, ``rescue-bench serve``): an episode
played through a server on 127.0.0.1 equals ``gym.make(env_id)``'s for the same seed and actions, observation
for observation (keys, dtypes, values), reward for reward, with the same ``terminated``/``truncated`` and
``info``, on the demo data. Skipped without openenv-core (an optional dependency)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bridges/ is a top-level folder of the checkout
    sys.path.insert(0, str(ROOT))

pytest.importorskip("openenv.core.env_server.http_server", reason="openenv-core is not installed")

import gymnasium as gym  # noqa: E402

import rescue_env  # noqa: E402, F401
from bridges.openenv_client import RemoteRescueEnv, RescueEnvClient  # noqa: E402
from bridges.openenv_models import RescueAction, jsonable  # noqa: E402
from bridges.openenv_server import BridgeError, Server  # noqa: E402
from rescue_env.cli import main  # noqa: E402

# The README's snippet, run as written below (test_the_readme_snippet_runs_as_written).
README_SNIPPET = """\
from bridges.openenv_client import RemoteRescueEnv
from bridges.openenv_server import Server

# In a shell instead: rescue-bench serve --env RescueSim-v0 --port 8000, then RemoteRescueEnv("http://127.0.0.1:8000")
with Server("RescueSim-v0", port=0) as server, RemoteRescueEnv(server.url) as env:
    observation, info = env.reset(seed=0)
    done = False
    while not done:
        action = {"intervene": 1, "target": [1, 0, 0, 0, 0, 0, 0], "strategy": 0}
        observation, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    print(env.state())
"""


def _local(env_id: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "Rescue-v0 is out of date": chosen here
        return gym.make(env_id)


def _assert_same_observation(local: dict[str, Any], remote: dict[str, Any]) -> None:
    assert set(remote) == set(local)
    for key, value in local.items():
        if isinstance(value, np.ndarray):
            assert isinstance(remote[key], np.ndarray) and remote[key].dtype == value.dtype, key
            assert remote[key].shape == value.shape and np.array_equal(remote[key], value), key
        else:
            assert type(remote[key]) is type(value) and remote[key] == value, key


def _play_both(env_id: str, remote: RemoteRescueEnv, seeds: list[int | None], action_seed: int) -> int:
    """Play one episode per seed on both sides with the same sampled actions; returns the steps compared."""
    local = _local(env_id)
    local.action_space.seed(action_seed)
    steps = 0
    for seed in seeds:  # a None seed goes on with the session's generator, as the local env does
        local_obs, local_info = local.reset(seed=seed)
        remote_obs, remote_info = remote.reset(seed=seed)
        _assert_same_observation(local_obs, remote_obs)
        assert remote_info == jsonable(local_info)
        done = False
        while not done:
            action = local.action_space.sample()
            local_obs, local_reward, local_term, local_trunc, local_info = local.step(action)
            remote_obs, remote_reward, remote_term, remote_trunc, remote_info = remote.step(action)
            _assert_same_observation(local_obs, remote_obs)
            assert remote_reward == local_reward and type(remote_reward) is float
            assert (remote_term, remote_trunc) == (local_term, local_trunc)
            assert remote_info == jsonable(local_info)
            done = local_term or local_trunc
            steps += 1
        state = remote.state()
        assert state.env_id == env_id and (state.terminated, state.truncated) == (local_term, local_trunc)
    local.close()
    return steps


@pytest.mark.parametrize("env_id", ["Rescue-v0", "RescueSim-v0", "RescueSim-v1"])
def test_a_served_episode_equals_the_local_one(env_id: str) -> None:
    with Server(env_id, port=0) as server, RemoteRescueEnv(server.url) as remote:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        assert _play_both(env_id, remote, seeds=[3, None], action_seed=7) > 2


def test_the_typed_client_and_the_http_endpoints() -> None:
    with Server("Rescue-v1", port=0) as server:
        with RescueEnvClient(base_url=server.url).sync() as client:
            result = client.reset(seed=1, options={"sample_id": "demo_family/001_the_okafors"})
            assert result.reward is None and not result.done
            assert result.observation.info["sample_id"] == "demo_family/001_the_okafors"
            result = client.step(RescueAction(intervene=0, target=[0] * 7, strategy=0))
            assert isinstance(result.reward, float) and client.state().step_count == 1
            with pytest.raises(RuntimeError, match="unknown reset option"):
                client.reset(options={"nope": 1})

        def call(path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
            data = None if body is None else json.dumps(body).encode()
            request = urllib.request.Request(server.url + path, data=data, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        assert call("/health") == (200, {"status": "healthy"})
        status, reset = call("/reset", {"seed": 0})
        assert status == 200 and reset["observation"]["elapsed"] and reset["observation"]["position"] is None
        # OpenEnv's HTTP /step makes a fresh env per call: no episode, a one-line 409, not a server error.
        status, answer = call("/step", {"action": {"intervene": 0, "target": [0] * 7, "strategy": 0}})
        assert status == 409 and "reset first" in answer["detail"] and "\n" not in answer["detail"]
        status, schema = call("/schema")
        assert status == 200 and {"intervene", "target", "strategy"} <= set(schema["action"]["properties"])


def test_the_readme_snippet_runs_as_written(capsys) -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"```python\n{README_SNIPPET}```" in readme  # the README carries exactly this block
    exec(compile(README_SNIPPET, "README.md", "exec"), {})
    assert "env_id='RescueSim-v0'" in capsys.readouterr().out


def test_errors_are_one_line(capsys) -> None:
    with pytest.raises(BridgeError, match="unknown env id"):
        Server("RescueFlat-v0", port=0)
    assert main(["serve", "--env", "Nope-v0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown env id 'Nope-v0'") and err.count("\n") == 1
    assert main(["serve", "--env", "RescueSim-v0", "--port", "0", "--env-kwarg", "bogus=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot make RescueSim-v0") and err.count("\n") == 1
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--env", "RescueSim-v0", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_rescue_bench_serve_plays_an_episode_and_stops_on_ctrl_c() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "rescue_env.cli", "serve", "--env", "RescueSim-v0", "--port", "0"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("serving RescueSim-v0 with OpenEnv on http://127.0.0.1:"), line
        url = line.split(" on ", 1)[1].split()[0]
        with RemoteRescueEnv(url) as remote:
            assert _play_both("RescueSim-v0", remote, seeds=[11], action_seed=2) > 2
        # A client that drops the connection without the close message is not a traceback either.
        from websockets.sync.client import connect

        with connect(url.replace("http://", "ws://") + "/ws") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(ws.recv())["type"] == "observation"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0 and out == "" and err == "", err
