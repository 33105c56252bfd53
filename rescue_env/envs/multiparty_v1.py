"""``rescue_multiparty_v1``: the ``Rescue-v0`` replay seen by every party of the session, as ``rescue_multiparty_v0``
shows it, with the therapist's ``infos`` as small as ``Rescue-v0``'s own default. See ``RescueMultiPartyEnvV1``.

``parallel_env()`` gives the ``ParallelEnv``; ``raw_env()`` the AEC version (``parallel_to_aec``); ``env()`` the AEC
version with the usual wrappers (as ``rescue_env.envs.multiparty``).
"""

from __future__ import annotations

from typing import Any

from rescue_env.envs.multiparty import ParticipantPolicy, RescueMultiPartyEnv, aec_factories


class RescueMultiPartyEnvV1(RescueMultiPartyEnv):
    """``rescue_multiparty_v0`` (read ``RescueMultiPartyEnv``'s docstring) whose therapist ``info`` defaults to
    ``Rescue-v0``'s ``info_level="basic"``: no gold, no annotated state.

    ## Version History

    * v1: ``info_level`` defaults to ``"basic"``. v0 passed ``RescueEnv``'s ``"full"`` info on by default, so the
      annotated support target and strategy of each decision point (``infos["therapist"]["gold"]``) and the
      annotated state reached whatever read the therapist's ``infos`` — a policy included — although nothing gold
      or annotated may reach a policy (the single-agent ids never passed it by default). ``info_level="full"``
      still gives it, for analysis and scoring outside the policy. Everything else is v0's.
    * v0: ``rescue_env.envs.multiparty`` (kept for reproducibility).
    """

    metadata = {**RescueMultiPartyEnv.metadata, "name": "rescue_multiparty_v1"}

    def __init__(
        self,
        participant_policy: ParticipantPolicy | None = None,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("info_level", "basic")
        super().__init__(participant_policy=participant_policy, render_mode=render_mode, **kwargs)


def parallel_env(**kwargs: Any) -> RescueMultiPartyEnvV1:
    """The ``ParallelEnv`` (keyword arguments: see ``RescueMultiPartyEnv``)."""
    return RescueMultiPartyEnvV1(**kwargs)


raw_env, env = aec_factories(parallel_env)

__all__ = ["RescueMultiPartyEnvV1", "env", "parallel_env", "raw_env"]
