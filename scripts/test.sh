#!/usr/bin/env bash
# Set up a fresh machine and run the test suite (tests needing ../shared/data skip when it is absent).
set -euo pipefail
# shellcheck source=scripts/setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# One worker process per core, up to 4 (pytest-xdist; about 3 min 50 s on 2 cores). Your arguments come last, so
# they win: `bash scripts/test.sh -n 0` runs in one process.
python -m pytest -q -n auto --maxprocesses 4 "$@"

# The verifiers bridge, in a venv of its own layered on .venv: every classic verifiers release depends on
# openai-agents, whose top-level package is also named `agents` and would shadow this project's in .venv (README,
# "verifiers"). The overlay sees .venv's packages through a .pth file and holds only verifiers and what it adds;
# PYTHONPATH puts this checkout's `agents` first, and bridges.verifiers_env.import_verifiers loads openai-agents'.
# RESCUE_SKIP_VERIFIERS=1 skips it (it is also skipped when you pass pytest arguments).
if [ "$#" -eq 0 ] && [ -z "${RESCUE_SKIP_VERIFIERS:-}" ]; then
  overlay=".venv-verifiers"
  if [ ! -x "$overlay/bin/python" ]; then
    python3 -m venv "$overlay"
  fi
  base="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  site="$("$overlay/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "import site; site.addsitedir('$base')" > "$site/_rescue_env_base.pth"
  stamp="$overlay/.rescue-env-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    spec="$(python - <<'PY'
import tomllib
print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["verifiers"][0])
PY
)"
    "$overlay/bin/python" -m pip install --quiet --disable-pip-version-check "$spec"
    touch "$stamp"
  fi
  PYTHONPATH="$PWD" "$overlay/bin/python" -m pytest -q -p no:cacheprovider tests/test_bridge_verifiers.py
fi
