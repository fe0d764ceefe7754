#!/usr/bin/env bash
# Type checks (CI runs this): mypy on the packages pyproject.toml lists ([tool.mypy]), read
# from the folders they are imported by (agent/perfweb_agent/, recommender/
# perfweb_recommender/, contract/perfweb_contract/, perfweb/). Arguments pass through to mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/mypy "$@"
