#!/usr/bin/env bash
# Set up a fresh machine and run the main job on the embedded demo data: the heuristic agent on all six tasks,
# then an LLM-policy rollout of the replay and of the closed loop (with LLM personas as the participants), all
# with the offline mock model (no network, no key); then the reports (figures, Markdown, HTML) of the demo data,
# of the replay rollout and, last, of the six-task run, whose path it prints.
# Extra arguments go to `rescue-bench evaluate` (e.g. --agent oracle, or --model ... --judge-model ...).
set -euo pipefail
# shellcheck source=scripts/setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
rescue-bench data validate demo
rescue-bench evaluate --data demo --tasks all --agent heuristic --output runs/demo-heuristic "$@"
rescue-bench rollout --data demo --model mock --output runs/demo-rollout-mock
rescue-bench rollout --data demo --env RescueSim-v0 --model mock --participants llm --output runs/demo-sim-mock
rescue-bench report --data demo --output runs/demo-data-report
rescue-bench report runs/demo-rollout-mock
rescue-bench report runs/demo-heuristic
echo "To call rescue-bench yourself, first run: source .venv/bin/activate   (or call .venv/bin/rescue-bench)"
