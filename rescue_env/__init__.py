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
    if "RescueSim-v0" not in registry:
        register(id="RescueSim-v0", entry_point="rescue_env.envs.sim:RescueSimEnv")
    if "RescueSim-v1" not in registry:
        register(
            id="RescueSim-v1",
            entry_point="rescue_env.envs.sim_v1:RescueSimEnvV1",
            vector_entry_point="rescue_env.envs.sim_v1_vector:RescueSimVectorEnvV1",
        )
    if "RescueSimFlat-v0" not in registry:
        register(id="RescueSimFlat-v0", entry_point="rescue_env.envs.wrappers:make_sim_flat_env")
    # The same flat observations with one Discrete action (wrappers.DiscreteSupportAction): a quicker learner's
    # action space than RescueFlat's MultiDiscrete; a different action space, so ids of their own.
    for env_id, entry_point, kwargs in (
        ("RescueFlatDiscrete-v0", "make_flat_env", {"action": "discrete"}),
        ("RescueFlatDiscrete-v1", "make_flat_env", {"action": "discrete", "version": 1}),
        ("RescueSimFlatDiscrete-v0", "make_sim_flat_env", {"action": "discrete"}),
        ("RescueSimFlat-v1", "make_sim_flat_env", {"version": 1}),
        ("RescueSimFlatDiscrete-v1", "make_sim_flat_env", {"action": "discrete", "version": 1}),
    ):
        if env_id not in registry:
            register(id=env_id, entry_point=f"rescue_env.envs.wrappers:{entry_point}", kwargs=kwargs)

    # The multi-party views, by id in PettingZoo's registry (``pettingzoo.make("parallel" | "aec", id)``). That
    # registry only exists from PettingZoo 1.27 on (pyproject allows older ones): without it, the views are still
    # importable, just not by id.
    try:
        from pettingzoo import EnvSpec, aec_registry, parallel_registry
        from pettingzoo import register as register_multiparty
    except ImportError:
        return
    for env_id, module in (
        ("rescue/rescue_multiparty_v0", "rescue_env.envs.multiparty"),
        ("rescue/rescue_multiparty_v1", "rescue_env.envs.multiparty_v1"),
        ("rescue/rescue_sim_multiparty_v0", "rescue_env.envs.sim_multiparty"),
    ):
        for kind, multiparty_registry, factory in (("parallel", parallel_registry, "parallel_env"),
                                                   ("aec", aec_registry, "env")):  # fmt: skip
            # Registry keys are normalised ("_v0" -> "-v0"); registering twice would warn on re-import.
            if EnvSpec(id=env_id).id not in multiparty_registry:
                register_multiparty(kind, env_id, entry_point=f"{module}:{factory}")


_register_environments()
