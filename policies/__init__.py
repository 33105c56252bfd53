"""Non-LLM policies for rescue-env: random, majority, heuristic and oracle baselines, and RL policies trained
with stable-baselines3 on the flat environment variant. LLM agents live in ``agents``.
"""
