#!/usr/bin/env bash
# The real NeMo Gym (PyPI nemo-gym 0.4.0) in a Python 3.12 environment of its own, for the
# tests that check this project's outputs with NeMo Gym's own code (its NeMoGymResponse
# model, its reward profiling, its example data). Its dependencies (Python >= 3.12, a
# capped openai, ray, mlflow) do not fit sandbatch's environment, so it lives apart, at
# ${SANDBATCH_NEMO_GYM_VENV:-/var/lib/sandbatch/nemo-gym-0.4.0} (tests/gym_env.py finds it
# there). The interpreter: $SANDBATCH_PYTHON312, else python3.12 on PATH, else pyenv's
# newest 3.12, else one that `pyenv install 3.12` builds; none is one line and exit 1.
# Idempotent: a complete environment is kept.
set -euo pipefail
version=0.4.0
venv=${SANDBATCH_NEMO_GYM_VENV:-/var/lib/sandbatch/nemo-gym-$version}
stamp="$venv/.sandbatch-nemo-gym-$version"
if [ -f "$stamp" ] && "$venv/bin/python" -c 'import nemo_gym' 2>/dev/null; then
    echo "nemo-gym: $version ready in $venv"
    exit 0
fi

pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
is_312() { [ -n "$1" ] && [ -x "$1" ] && "$1" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
find_312() {
    local candidate
    for candidate in "${SANDBATCH_PYTHON312:-}" "$(command -v python3.12 || true)" \
            $(ls -d "$pyenv_root"/versions/3.12*/bin/python 2>/dev/null | sort -V -r); do
        if is_312 "$candidate"; then echo "$candidate"; return 0; fi
    done
    return 1
}
python=$(find_312 || true)
pyenv=$(command -v pyenv || echo "$pyenv_root/bin/pyenv")
if [ -z "$python" ] && [ -x "$pyenv" ]; then  # pyenv builds one when its sources are reachable
    PYENV_ROOT=$pyenv_root "$pyenv" install -s 3.12 >/dev/null 2>&1 || true
    python=$(find_312 || true)
fi
if [ -z "$python" ]; then
    echo "nemo_gym.sh: no Python 3.12 found (nemo-gym $version needs it); install one (pyenv install 3.12, or Debian's python3.12) or set SANDBATCH_PYTHON312 to its python" >&2
    exit 1
fi

rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q "nemo-gym==$version"
"$venv/bin/python" -c 'import nemo_gym.openai_utils, nemo_gym.reward_profile'
touch "$stamp"
echo "nemo-gym: $version installed in $venv ($("$venv/bin/python" --version))"
