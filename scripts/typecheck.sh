#!/usr/bin/env bash
# mypy --strict over the installed names (hopsearch.service, .loaders, .cli): the folders are mapped
# into one namespace by setuptools, so give mypy the same view through symlinks in .typecheck/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .typecheck/hopsearch
for d in service loaders cli es_mappings; do ln -sfn "../../$d" ".typecheck/hopsearch/$d"; done
ln -sfn ../../hopsearch/__init__.py .typecheck/hopsearch/__init__.py
exec .venv/bin/mypy -p hopsearch "$@"
