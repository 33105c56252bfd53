#!/usr/bin/env bash
# Set up a fresh machine and run the test suite (tests needing ../shared/data skip when it is absent).
set -euo pipefail
# shellcheck source=scripts/setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python -m pytest -q "$@"
