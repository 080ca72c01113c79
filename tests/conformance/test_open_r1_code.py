"""open-r1's own code rewards beside rlvr's, on safe programs (issue 42): the same scores.

open-r1 scores code by sending an evaluation script to E2B's remote sandbox. Its files (commit 1416fa0,
``open_r1_upstream/``, unchanged) run here with stand-ins for the imports that are not installed; the E2B
client's stand-in runs each script locally as E2B's kernel runs a cell (the text of the last expression's
value; None when the cell raised). So open-r1's extraction, its evaluation script (the line-by-line zip
comparison, the 5 s per case, the pass fraction), its provider's reading of the result and its threshold are
theirs, and rlvr's rewards run their programs in rlvr's sandbox.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import types
import uuid
from pathlib import Path

import pytest

from rlvr.rewards import resolve_reward

UPSTREAM = Path(__file__).parent / "open_r1_upstream" / "open_r1"

CELL = r'''
import ast, sys, textwrap
tree = ast.parse(textwrap.dedent(sys.argv[1]))
last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
scope = {}
exec(compile(tree, "<cell>", "exec"), scope)
if last is not None:
    value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), scope)
    if value is not None:
        with open(sys.argv[2], "w") as out:
            out.write(repr(value))
'''


class Execution:
    def __init__(self, text: str | None):
        self.text = text


class LocalSandbox:
    """``e2b_code_interpreter.AsyncSandbox`` as open-r1's E2BProvider uses it, on this machine (safe programs only)."""

    sandbox_id = "local"

    def __init__(self, folder: Path):
        self.folder = folder

    @classmethod
    async def create(cls, **kwargs):
        return cls(Path(LocalSandbox.root))

    async def run_code(self, script: str, languages=None) -> Execution:
        result = self.folder / f"result-{uuid.uuid4().hex}"
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CELL, script, str(result),
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await proc.wait()
        return Execution(result.read_text() if result.exists() else None)

    async def kill(self) -> None:
        pass


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


@pytest.fixture(scope="module")
def open_r1(tmp_path_factory):
    """open-r1's ``rewards`` module, loaded from its file, its uninstalled imports stood in for."""
    LocalSandbox.root = str(tmp_path_factory.mktemp("e2b"))
    placeholder = object()
    stand_ins = {
        "open_r1": _module("open_r1", __path__=[str(UPSTREAM)]),
        "open_r1.utils": _module("open_r1.utils", __path__=[str(UPSTREAM / "utils")],
                                 is_e2b_available=lambda: True, is_morph_available=lambda: False),
        "open_r1.utils.routed_sandbox": _module("open_r1.utils.routed_sandbox", RoutedSandbox=None),
        "open_r1.utils.competitive_programming": _module(
            "open_r1.utils.competitive_programming", SubtaskResult=placeholder, add_includes=placeholder,
            get_morph_client_from_env=placeholder, get_piston_client_from_env=placeholder, patch_code=placeholder,
            score_submission=placeholder, score_subtask=placeholder),
        "e2b_code_interpreter": _module("e2b_code_interpreter", AsyncSandbox=LocalSandbox),
        "e2b_code_interpreter.models": _module("e2b_code_interpreter.models", Execution=Execution),
    }
    saved = {name: sys.modules.get(name) for name in [*stand_ins, "open_r1.rewards", "open_r1.utils.code_providers"]}
    sys.modules.update(stand_ins)
    try:
        spec = importlib.util.spec_from_file_location("open_r1.rewards", UPSTREAM / "rewards.py")
        rewards = importlib.util.module_from_spec(spec)
        sys.modules["open_r1.rewards"] = rewards
        spec.loader.exec_module(rewards)
        yield rewards
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _cases(*pairs: tuple[str, str]) -> dict:
    return {"language": "python",
            "test_cases": [{"input": i, "output": o, "type": "stdin_stdout"} for i, o in pairs]}


ADD = _cases(("1 2\n", "3\n"), ("5 5\n", "10"), ("-4 4\n", "0\n"))
LINES = _cases(("3\n", "1\n2\n3"), ("1\n", "1"))
PROGRAMS = [  # (completion, verification_info): each a program that ends by itself within a second
    ("Here:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```", ADD),
    ("```python\na, b = map(int, input().split())\nprint(a + b if a > 0 else 1)\n```", ADD),
    ("```python\nprint(10)\n```", ADD),
    ("```python\nraise ValueError('no')\n```", ADD),
    ("```python\nimport sys\nsys.exit(0)\n```", ADD),
    ("a, b = map(int, input().split())\nprint(a + b)\n", ADD),  # no fence: nothing to run
    ("```python\nprint(0)\n```\nthen\n```python\na, b = map(int, input().split())\nprint(a + b)\n```", ADD),
    ("```py\na, b = map(int, input().split())\nprint(a + b)\n```", ADD),  # not ```python
    ("```python\nn = int(input())\nfor i in range(1, n + 1):\n    print(f' {i} ')\n```", LINES),
    ("```python\nn = int(input())\nprint(1)\n```", LINES),  # zip stops at the shorter output
    ("```python\nprint(2)\n```", LINES),
    ("```python\nimport sys\nprint(sum(map(int, sys.stdin.read().split())), file=sys.stderr)\n```", ADD),
]


def _chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def test_code_and_binary_code_give_open_r1s_own_scores(open_r1):
    completions = [_chat(text) for text, _ in PROGRAMS]
    info = [case for _, case in PROGRAMS]
    theirs = open_r1.code_reward(completions, num_parallel=2, verification_info=info)
    ours = resolve_reward("code", names="trl")(completions, verification_info=info)
    assert ours == theirs
    assert theirs == [1.0, 2 / 3, 1 / 3, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]  # the stand-in ran them
    assert (resolve_reward("open-r1:binary_code")(completions, verification_info=info)
            == open_r1.binary_code_reward(completions, num_parallel=2, verification_info=info))


FORMATS = [
    "<think>\nsteps\n</think>\n<answer>\n```python\nprint(1)\n```\n</answer>",
    "<think>\nsteps\n</think>\n<answer>\nsee ```python\nprint(1)``` here\n</answer>",
    "<think>\nsteps\n</think>\n<answer>\n```cpp\nint main(){}\n```\n</answer>",
    "<think>steps</think>\n<answer>\n```python\nprint(1)\n```\n</answer>",
    "```python\nprint(1)\n```",
    "<think>\na\n</think>\n<answer>\n```python\nx\n```\n</answer>\ntrailing",
]


@pytest.mark.parametrize("languages", [None, ["python", "cpp", "cpp", "python", "python", "python"]])
def test_code_format_gives_open_r1s_own_scores(open_r1, languages):
    completions = [_chat(text) for text in FORMATS]
    extra = {} if languages is None else {"language": languages}
    theirs = open_r1.get_code_format_reward()(completions, **extra)
    assert resolve_reward("code_format", names="trl")(completions, **extra) == theirs
    assert theirs == ([1.0, 1.0, 0.0, 0.0, 0.0, 1.0] if languages is None else [1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
