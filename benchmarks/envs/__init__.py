"""The six tasks as Gymnasium environments (``benchmarks/envs/task_env.py``; flat SB3 variants in ``flat.py``;
playing one through, with the harness's metrics, in ``play.py``).

Registered when ``benchmarks`` is imported (``import benchmarks``, or ``gym.make("benchmarks:RescueRPP-v0")``,
which imports it): the task envs are benchmark wrappers, a layer above ``rescue_env``, which registers only its
own environments.
"""

from __future__ import annotations

TASKS = ("itp", "rpp", "stp", "ssp", "er", "vp")
FLAT_TASKS = ("itp", "rpp", "stp", "ssp")


def task_env_id(task: str, flat: bool = False) -> str:
    """``RescueRPP-v0``, or ``RescueRPPFlat-v0`` with ``flat``."""
    return f"Rescue{task.upper()}{'Flat' if flat else ''}-v0"


def register_task_envs() -> None:
    """Register every task env id with Gymnasium (idempotent: entry points are strings, nothing is imported)."""
    from gymnasium.envs.registration import register, registry

    for task in TASKS:
        if task_env_id(task) not in registry:
            register(id=task_env_id(task), entry_point="benchmarks.envs.task_env:RescueTaskEnv", kwargs={"task": task})
    for task in FLAT_TASKS:
        if task_env_id(task, flat=True) not in registry:
            register(
                id=task_env_id(task, flat=True),
                entry_point="benchmarks.envs.flat:make_task_flat_env",
                kwargs={"task": task},
            )
