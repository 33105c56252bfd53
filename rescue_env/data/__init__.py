"""RESCUE-Bench data: schema (``schema``), loading and validation (``loading``), shared domain rules
(``domain``), statistics (``stats``) and synthetic conversations for scale tests (``synthetic``)."""

from rescue_env.data.loading import DEMO, DataError, Dataset, LoadProblem, LoadReport, demo_path, load_dataset
from rescue_env.data.schema import SCENARIOS, Row, Sample, Scenario
from rescue_env.data.splits import SPLITS, Split, SplitConfig

__all__ = [
    "DEMO",
    "SCENARIOS",
    "SPLITS",
    "DataError",
    "Dataset",
    "LoadProblem",
    "LoadReport",
    "Row",
    "Sample",
    "Scenario",
    "Split",
    "SplitConfig",
    "demo_path",
    "load_dataset",
]
