# The course's commands. `make grade` is the main job, `make test` the test suite; both create the
# virtual environment .venv first (Python >= 3.11 for nbgrader 0.9).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The torch to install. 2.13.0 is on PyPI for every platform (and, as a CPU build, on the course's
# CI machines' disk, which keeps installs fast); any torch >= 2.5 works: make TORCH=torch
TORCH  ?= torch==2.13.0

SAMPLES := reference blank typical_mistakes

.PHONY: install dev browser sandbox postgres slurm hub build check grade test test-deploy gpu-test clean

# The student's and the instructor's packages: the course's package with JupyterLab and nbgrader (the
# `course` extra). Nothing for the course's own tests.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[course]"
	touch $@

# What the course's developers (and `make test`, CI) need on top: pytest, pytest-xdist, Playwright (the
# `test` extra), psycopg (the `postgres` extra, for the PostgreSQL gradebook's tests) and JupyterHub (the
# `hub` extra, for the hub test).
$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[course,test,postgres,hub]"
	touch $@

# Debian's chromium + chromium-driver for the course's own browser test, when missing (needs root and
# apt-get; otherwise the test skips and says so). Only `make test` (and CI) wants it: students never
# need a browser installed by the course. Playwright drives it; its own browser downloads are never used.
browser:
	@bash .ci/install-browser

# Debian's bubblewrap, the sandbox every graded notebook runs in (autograde and selfcheck), when
# missing (needs root and apt-get; otherwise grading refuses to start and says how to install it).
sandbox:
	@bash .ci/install-sandbox

# Debian's PostgreSQL server, which the tests start (a throwaway cluster) to check the PostgreSQL
# gradebook and concurrent shards (needs root and apt-get; otherwise those tests skip and say so).
# Only `make test` (and CI) wants it: students never need it.
postgres:
	@bash .ci/install-postgres

# Debian's Slurm (slurm-wlm) and MUNGE, which the tests start as a throwaway one-node cluster to run
# deploy/slurm-autograde.sh as a real array job (needs root and apt-get; otherwise that test skips and
# says so). Only `make test` (and CI) wants it: students never need it.
slurm:
	@bash .ci/install-slurm

# configurable-http-proxy, JupyterHub's proxy, from npm into the virtual environment, for the hub test
# (tests/test_hub.py; without npm that test skips and says so). Only `make test` (and CI) wants it.
hub: $(VENV)/.installed-dev
	@VENV=$(VENV) bash .ci/install-hub

# The student's and the instructor's install: the virtual environment and the sandbox.
install: $(VENV)/.installed sandbox

# The developer's install: `make install`, the test packages, and the browser, PostgreSQL, Slurm and
# the hub's proxy the tests use.
dev: install $(VENV)/.installed-dev browser postgres slurm hub

# notebooks/ -> source/ -> release/
build: install
	$(BIN)/attnlab build

# fail if source/ or release/ is stale against notebooks/
check: install
	$(BIN)/attnlab build --check

# The main job: build, write the sample submissions, autograde them, print one table per assignment, export grades.csv.
# Grading workers side by side: JOBS=N (default: one per GPU, else one per core; capped so N kernels at their memory limit fit; printed).
JOBS ?=
grade: install
	$(BIN)/attnlab grade-samples $(if $(JOBS),--jobs $(JOBS))

# Two pytest-xdist workers (the suite's machines have 2 cores): TEST_WORKERS=0 runs it in one process.
# The 25 slowest tests are listed at the end: where the suite's time goes.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS))
# The deployment tests: the course where it runs (a fresh Colab-like environment, JupyterLab in Chromium,
# JupyterHub with nbgrader's exchange, Slurm and PostgreSQL shards). Each builds a whole environment once;
# `make test-deploy` runs them, CI runs them after `make test`.
DEPLOY := colab or browser or hub or cluster
test: dev
	$(PYTEST) -m "not ($(DEPLOY))" --durations=25
test-deploy: dev
	$(PYTEST) -m "$(DEPLOY)" --durations=10

# On a machine with a CUDA GPU: the GPU test files in two processes (Triton reads TRITON_INTERPRET when it is
# imported, so one process cannot run both): compiled kernels first, then the interpreter tests (files marked
# interpreter_only, skipped in the first) under TRITON_INTERPRET=1. GPU_PYTHON=python3 runs them without the
# venv, on a device machine that has torch and triton (notes/gpu/2026-12-04/session10: 63 + 113 passed).
GPU_PYTHON ?= $(BIN)/python
GPU_TESTS := tests/test_gpu_compile.py tests/test_fast_path.py tests/test_decoding.py tests/test_gpu_host_cases.py tests/test_fp8_kernel.py \
	tests/test_launcher_strides.py tests/test_tuning.py tests/test_kernel_source.py
GPU_INTERPRETER_TESTS := tests/test_gpu_compile.py tests/test_launcher_strides.py tests/test_tuning.py
gpu-test:
	@env -u TRITON_INTERPRET $(GPU_PYTHON) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'make gpu-test: no CUDA GPU here (make test is the CPU suite)')"
	env -u TRITON_INTERPRET $(GPU_PYTHON) -m pytest -q -p no:cacheprovider -rfE $(GPU_TESTS)
	TRITON_INTERPRET=1 $(GPU_PYTHON) -m pytest -q -p no:cacheprovider -rfE $(GPU_INTERPRETER_TESTS)

# Removes the sample submissions' files only; real submissions and the gradebook are never touched.
clean:
	rm -rf $(addprefix submitted/,$(SAMPLES)) $(addprefix autograded/,$(SAMPLES)) \
		$(addprefix feedback/,$(SAMPLES)) grades.csv grading_report.csv grading_report_*.csv
