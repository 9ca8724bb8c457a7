# Sourced by the other scripts: create .venv (once) and install gitscale into it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.gitscale-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "installing gitscale and its pinned dependencies into .venv ..." >&2
  log=.venv/install.log
  if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade "pip>=23.2" &&
         .venv/bin/python -m pip install --disable-pip-version-check -e ".[test]"; } >"$log" 2>&1
  then
    tail -n 40 "$log" >&2
    echo "install failed; full log: $log" >&2
    exit 1
  fi
  touch "$stamp"
fi
