"""Model access for rescue-env: LLM agents that answer the benchmark tasks and act in the environment.

Goes here: the single litellm-based client (async, connection limit, retries with backoff, on-disk response
cache, token and cost totals) and the agents built on it. Non-LLM policies live in ``policies``.
"""
