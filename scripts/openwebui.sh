#!/usr/bin/env bash
# Install Open WebUI (PyPI `open-webui`, pinned) in a virtual environment of its own (its pins are not
# hopsearch's) and print the variable tests/test_openwebui.py reads:
#
#   bash scripts/openwebui.sh            # installs into ~/.cache/hopsearch/owui-venv (or $OWUI_VENV)
#   export HOPSEARCH_TEST_OPENWEBUI=~/.cache/hopsearch/owui-venv/bin/open-webui
#
# It starts offline (HF_HUB_OFFLINE=1, OFFLINE_MODE=true): the embedding model it looks for at start is
# missing and logged as an error, and it serves on. Tried with Python 3.11: 7.3 GB (torch, CUDA wheels), ~11 min.
set -euo pipefail
VERSION="${OWUI_VERSION:-0.12.4}"
VENV="${OWUI_VENV:-$HOME/.cache/hopsearch/owui-venv}"
if [[ ! -x "$VENV/bin/open-webui" ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet "open-webui==$VERSION"
fi
"$VENV/bin/pip" show open-webui | grep -E '^(Name|Version):'
echo "export HOPSEARCH_TEST_OPENWEBUI=$VENV/bin/open-webui"
