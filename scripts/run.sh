#!/usr/bin/env bash
# Set up, then run the main job on the embedded default (config/default.yaml):
#   snakemake --cores 4   (extra arguments are passed on to snakemake)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/snakemake --cores 4 "$@"
