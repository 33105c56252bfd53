"""rescue-env: the RESCUE-Bench setting (relation-aware, multi-party emotional support) as data, tasks and
environments.

- ``rescue_env.data``: the release's data model, loaders, domain helpers, statistics, demo and synthetic data.
- ``rescue_env.taxonomy``: relation-pattern and support-strategy labels (paper App. D).
"""

__version__ = "0.1.0"


def _register_environments() -> None:
    from gymnasium.envs.registration import register, registry

    if "Rescue-v0" not in registry:
        register(id="Rescue-v0", entry_point="rescue_env.env:RescueEnv")
    if "RescueFlat-v0" not in registry:
        register(id="RescueFlat-v0", entry_point="rescue_env.wrappers:make_flat_env")


_register_environments()
