#!/usr/bin/env bash
# Creates .venv and installs the project with every extra, plus torch 2.13.0 (CPU) for the
# examples and tests. Sourced by start.sh and test.sh; reinstalls only when pyproject.toml
# changed since the last install.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
export PERFWEB_DATA_DIR="${PERFWEB_DATA_DIR:-$PWD/.data}"
mkdir -p "$PERFWEB_DATA_DIR"

if [ ! -x .venv/bin/python ]; then
    echo "perfweb: creating the virtual environment in .venv"
    "$PYTHON" -m venv .venv
fi
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "perfweb: installing torch 2.13.0 (CPU) and the project into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q torch==2.13.0
    .venv/bin/python -m pip install -q -e '.[all]'
    rm -f .venv/.installed-*
    touch "$stamp"
fi
