#!/usr/bin/env bash
# The real-GPU check in one command (bench/gpu/README.md): planted-cause CUDA workloads under
# the offline agent, analysed by the recommender, one JSON + one Markdown report.
#   bash bench/gpu/run.sh [--smoke] [--device cpu] [--budget-s 450] [--only a,b] [--skip ab]
# Writes to $OUT when set (the device machine's return folder), else bench/results/gpu/<date>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-python3}"
out="${OUT:-bench/results/gpu/$(date -u +%Y-%m-%d)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" -m bench.gpu.kit --out "$out" "$@"
