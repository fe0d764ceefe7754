#!/usr/bin/env bash
# Type checks (CI runs this). The folders agent/, recommender/ (and contract/) are installed
# under the import names perfweb_agent, perfweb_recommender (perfweb_contract) (setup.py),
# and mypy finds modules by folder name. So this links .names/<import name> -> ../<folder>
# (git ignores .names/) and runs mypy, which checks the packages pyproject.toml lists
# ([tool.mypy] mypy_path and packages) under the names the code imports them by.
# Arguments pass through to mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .names
for pair in perfweb_agent:agent perfweb_recommender:recommender perfweb_contract:contract; do
    name="${pair%%:*}" folder="${pair#*:}"
    if [ -d "$folder" ]; then
        ln -sfn "../$folder" ".names/$name"
    else
        rm -f ".names/$name"
    fi
done
exec .venv/bin/mypy "$@"
