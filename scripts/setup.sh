#!/usr/bin/env bash
# Shared set-up for scripts/run.sh and scripts/test.sh: a .venv with the CPU build of torch and the project.
# Sourced, not run: leaves the venv activated. Idempotent: a second run installs nothing new.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
# torch first, pinned: this machine carries the 2.13.0 CPU wheel; any other request pulls a multi-GB CUDA build.
if ! python -c "import torch" >/dev/null 2>&1; then
  python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
fi
stamp=".venv/.rescue-env-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install --quiet --disable-pip-version-check -e ".[${RESCUE_EXTRAS:-all}]"
  touch "$stamp"
fi
