"""RESCUE-Bench data: schema (``schema``), loading and validation (``loading``), shared domain rules
(``domain``), statistics (``stats``) and synthetic conversations for scale tests (``synthetic``)."""

from rescue_env.data.loading import DEMO, DataError, Dataset, LoadProblem, LoadReport, demo_path, load_dataset
from rescue_env.data.schema import SCENARIOS, Row, Sample, Scenario

__all__ = [
    "DEMO",
    "SCENARIOS",
    "DataError",
    "Dataset",
    "LoadProblem",
    "LoadReport",
    "Row",
    "Sample",
    "Scenario",
    "demo_path",
    "load_dataset",
]
