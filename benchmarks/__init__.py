"""The six RESCUE-Bench tasks as benchmark wrappers (paper Sec. 5, App. C): ITP, RPP, STP, SSP, ER, VP.

Goes here: one module per task (build instances, render a prompt, parse an answer, score), the metrics, a task
registry and the resumable runner behind ``rescue-bench evaluate``.
"""
