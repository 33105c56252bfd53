#!/usr/bin/env bash
# Set up a fresh machine and run the main job on the embedded demo data.
set -euo pipefail
# shellcheck source=scripts/setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
rescue-bench data validate demo
rescue-bench data stats demo "$@"
