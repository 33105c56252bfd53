"""rescue-env: the RESCUE-Bench setting (relation-aware, multi-party emotional support) as data, tasks and
environments.

- ``rescue_env.data``: the release's data model, loaders, domain helpers, statistics, demo and synthetic data.
- ``rescue_env.taxonomy``: relation-pattern and support-strategy labels (paper App. D).
"""

__version__ = "0.1.0"
