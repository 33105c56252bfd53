"""An LLM that plays the task envs (``RescueITP-v0`` ... ``RescueVP-v0``, ``benchmarks/envs/``): one prompt per
instance, through the project's one client (``agents.client.LLMClient``: any litellm model, an OpenAI-compatible
server, or the offline ``mock``).

The prompt is the observation as it is: ``instructions`` as the system message and ``prompt`` as the user
message, which are the harness's messages for a batch of this one instance (normalised to the envs' charset). The
answer goes back through the env's own parser (``env.action_from_answer``): a failed call or an answer the task
cannot parse is counted in ``failures`` and played as the env's fallback (ITP: keep listening; a ranking or a
text answer: empty, scored wrong).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from agents.client import LLMClient, ModelConfig

__all__ = ["LLMTaskAgent"]


class LLMTaskAgent:
    """``act(observation, env) -> action`` for a task env (``aact`` inside an event loop)."""

    def __init__(
        self,
        model: str | ModelConfig,
        *,
        client: LLMClient | None = None,
        max_connections: int = 8,
        cache_dir: str | None = None,
    ) -> None:
        config = model if isinstance(model, ModelConfig) else ModelConfig(model=model)
        self.client = client or LLMClient(config, max_connections=max_connections, cache_dir=cache_dir)
        self.failures: Counter[str] = Counter()
        self.answers = 0

    @staticmethod
    def messages(observation: dict[str, Any]) -> list[dict[str, str]]:
        """The request for one instance: the observation's instructions and prompt, nothing else."""
        return [
            {"role": "system", "content": str(observation["instructions"])},
            {"role": "user", "content": str(observation["prompt"])},
        ]

    async def aact(self, observation: dict[str, Any], env: Any) -> Any:
        completion = await self.client.complete(self.messages(observation))
        self.answers += 1
        if not completion.ok:
            self.failures["api_error"] += 1
            action, _ = env.unwrapped.action_from_answer(None)
            return action
        action, failure = env.unwrapped.action_from_answer(completion.text)
        if failure is not None:
            self.failures[failure.split(":", 1)[0]] += 1
        return action

    def act(self, observation: dict[str, Any], env: Any) -> Any:
        return asyncio.run(self.aact(observation, env))

    @property
    def usage(self) -> dict[str, Any]:
        return self.client.usage.model_dump()
