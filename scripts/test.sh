#!/usr/bin/env bash
# Set up a fresh machine and run the test suite (tests needing ../shared/data skip when it is absent).
set -euo pipefail
# shellcheck source=scripts/setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# One worker process per core, up to 4 (pytest-xdist; about 3 min 50 s on 2 cores). Your arguments come last, so
# they win: `bash scripts/test.sh -n 0` runs in one process.
python -m pytest -q -n auto --maxprocesses 4 "$@"
