"""rescue-env: the RESCUE-Bench setting (relation-aware, multi-party emotional support) as data, tasks and
environments.

- ``rescue_env.data``: the release's data model, loaders, domain helpers, statistics, demo and synthetic data.
- ``rescue_env.taxonomy``: relation-pattern and support-strategy labels (paper App. D).
"""

__version__ = "0.1.0"


def _register_environments() -> None:
    from gymnasium.envs.registration import register, registry

    if "Rescue-v0" not in registry:
        register(id="Rescue-v0", entry_point="rescue_env.envs.replay:RescueEnv")
    if "RescueFlat-v0" not in registry:
        register(id="RescueFlat-v0", entry_point="rescue_env.envs.wrappers:make_flat_env")
    if "Rescue-v1" not in registry:
        register(id="Rescue-v1", entry_point="rescue_env.envs.replay_v1:RescueEnvV1")
    if "RescueFlat-v1" not in registry:
        register(id="RescueFlat-v1", entry_point="rescue_env.envs.wrappers:make_flat_env", kwargs={"version": 1})


_register_environments()
