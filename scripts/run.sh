#!/usr/bin/env bash
# Set up, then run the main job on the embedded default (config/default.yaml):
#   sandbatch run --cores 4   (extra arguments are passed on: config files, --set, Snakemake's options)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/sandbatch run --cores 4 "$@"
