# Sourced by the other scripts: create .venv (once) and install gitscale into it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.gitscale-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=23.2"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
  touch "$stamp"
fi
