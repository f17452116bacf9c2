# The two set-up commands: `make demo` (the main job on local defaults) and `make test`.
.PHONY: install demo test lint typecheck clean

install:
	bash scripts/bootstrap.sh

demo: install
	.venv/bin/hopsearch demo

lint: install
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

typecheck: install
	bash scripts/typecheck.sh

test: install lint typecheck
	.venv/bin/python -m pytest

clean:
	rm -rf .typecheck .mypy_cache .ruff_cache .pytest_cache build dist *.egg-info
