#!/usr/bin/env bash
# Set up a fresh machine and run the main job on the embedded demo data: the heuristic agent on all six tasks.
# Extra arguments go to `rescue-bench evaluate` (e.g. --agent oracle, or --model ... --judge-model ...).
set -euo pipefail
# shellcheck source=scripts/setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
rescue-bench data validate demo
rescue-bench evaluate --data demo --tasks all --agent heuristic --output runs/demo-heuristic "$@"
