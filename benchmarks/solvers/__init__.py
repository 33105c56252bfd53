"""Trained non-LLM solvers of the tasks (ITP, RPP, STP, SSP, ER), cross-fitted by family: ``rescue-bench evaluate
--agent trained:linear --crossfit``. What they read: ``features.py``; the models: ``models.py`` (ER's:
``emotion.py``); the protocol (grouped K-fold, every instance predicted by a model that never saw its couple or
family): ``crossfit.py``."""

from benchmarks.solvers.crossfit import CrossFitAgent, assign_folds
from benchmarks.solvers.models import SOLVERS, TASKS

__all__ = ["SOLVERS", "TASKS", "CrossFitAgent", "assign_folds"]
