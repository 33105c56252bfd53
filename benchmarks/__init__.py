"""The six RESCUE-Bench tasks as benchmark wrappers (paper Sec. 5, App. C): ITP, RPP, STP, SSP, ER, VP.

Goes here: one module per task (build instances, render a prompt, parse an answer, score), the metrics, a task
registry and the resumable runner behind ``rescue-bench evaluate``; the same tasks as Gymnasium environments
(``benchmarks/envs/``: ``RescueITP-v0`` ... ``RescueVP-v0``, registered on import); reports (``benchmarks/reports/``).
"""

from benchmarks.envs import register_task_envs

register_task_envs()
