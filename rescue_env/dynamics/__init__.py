"""The dynamics of the group objective (paper App. B, Eq. 12-14): the annotated state (``state``), the outcome
model F fitted on the data (``outcome``), its validation (``report``) and fitting with a cache (``fitting``)."""

from rescue_env.dynamics.outcome import NO_INTERVENTION, OutcomeModel, SupportAction, fit_outcome_model
from rescue_env.dynamics.state import StateConfig, objective, utility

__all__ = [
    "NO_INTERVENTION",
    "OutcomeModel",
    "StateConfig",
    "SupportAction",
    "fit_outcome_model",
    "objective",
    "utility",
]
