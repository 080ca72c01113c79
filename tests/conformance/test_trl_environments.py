"""TRL's environments beside rlvr's: TRL 1.16's own ``GRPOTrainer(environment_factory=...).train()`` and rlvr's
``Trainer`` with the same factory on the same tiny model, conversational prompts and scripted model turns.

An environment here is a vault: ``reset(**row)`` reads the row's ``code`` and returns an observation naming its
instance and how often that instance was reset before, so the rollouts of one prompt start from different prompts
(each response must be trained on its own) and an instance taken from the pool in another order than TRL's shows; its
methods ``guess`` and ``hint`` are the rollout's tools and change its state; ``get_reward`` scores it from that state
(a reward named after the class, weight 1), and a reward function reads ``environments``. The dict case routes rows by
their ``environment`` column to a vault or a lamp (whose class has no ``get_reward``: its rollouts are not scored by
the vault's reward). Observed as in test_trl_tools.py: every prompt a generation was asked for (the observations,
each environment's tools listed), every completion's ids, tool mask and messages, the optimiser steps, and every
value TRL logs (``rewards/Vault/mean`` included).
"""

from __future__ import annotations

import itertools

import pytest

from .test_trl_tools import (  # noqa: F401  (a fixture)
    ScriptedEngine,
    ScriptedTurns,
    assert_same_generations,
    call,
    observed_rlvr,
    observed_trl,
    tool_model,
)
from .test_trl_training_step import G, compare, run_rlvr, run_trl

trl = pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")


class Vault:
    """A vault whose code is the row's."""

    def __init__(self, number: int):
        self.number, self.resets, self.code, self.tries, self.opened = number, 0, None, 0, False

    def reset(self, **row) -> str:
        self.code, self.tries, self.opened = row["code"], 0, False
        self.resets += 1
        return f"\nVault {self.number}, reset {self.resets} times."

    def guess(self, code: int) -> str:
        """Try a code on the vault.

        Args:
            code: The code to try.
        """
        self.tries += 1
        self.opened = code == self.code
        return "open" if self.opened else ("higher" if code < self.code else "lower")

    def hint(self) -> str:
        """The vault's last digit."""
        self.tries += 1
        return str(self.code % 10)

    def get_reward(self) -> float:
        return 1.0 if self.opened else 0.25 * self.tries


class Lamp:
    """A lamp to switch on; its class has no get_reward."""

    def __init__(self, number: int):
        self.number, self.tries, self.on = number, 0, False

    def reset(self, **row) -> None:
        self.tries, self.on = 0, False

    def switch(self) -> str:
        """Flip the lamp's switch."""
        self.tries += 1
        self.on = not self.on
        return "on" if self.on else "off"


def factories():
    """Fresh factories for one run (each numbers its instances from 0, as each trainer makes them)."""
    numbers = itertools.count()
    return (lambda: Vault(next(numbers))), (lambda: Lamp(next(numbers)))


def tries(completions, environments, **kwargs) -> list[float]:
    """A reward function of the rollouts' environments (TRL's ``environments`` keyword)."""
    return [0.5 - 0.125 * e.tries for e in environments]


ROWS = [{"prompt": [{"role": "user", "content": "Open the vault."}], "code": 12},
        {"prompt": [{"role": "user", "content": "Crack this vault."}], "code": 7}]
MIXED = [{**ROWS[0], "environment": "vault"},
         {"prompt": [{"role": "user", "content": "Light the lamp."}], "code": 0, "environment": "lamp"}]
FILL = " and that is all I will say about it" * 3  # (answers of similar length: rlvr's length buckets)


class VaultTurns(ScriptedTurns):
    """The model's turns: the first by position in the group, the next from what the last tool result said."""

    def turn(self, position: int, text: str) -> str:
        lamp = "lamp" in text
        if "<tool_response>" not in text:
            return ([call("switch"), call("switch") + call("switch"), "No." + FILL * 2, call("switch")] if lamp else
                    [call("guess", code=12), call("hint"), "I give up" + FILL * 2, call("guess", code=7)])[position % G]
        last = text.rsplit("<tool_response>", 1)[1]
        return ("Done" + FILL if "open" in last or "on" in last or text.count("<tool_response>") > 2
                else call("switch") if lamp else call("guess", code=int(last.split("\n")[1][-1])))


CASES = {
    "one-environment": dict(rows=ROWS, mixed=False, options=dict(max_steps=2)),
    "dict-by-column": dict(rows=MIXED, mixed=True, options=dict(max_steps=3)),  # (one prompt a step)
    "dapo-mu2-beta": dict(rows=ROWS, mixed=False, options=dict(loss_type="dapo", num_iterations=2, beta=0.04,
                                                                 max_steps=4)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_trls_environments_are_rlvrs(name, tmp_path, tool_model, monkeypatch):  # noqa: F811
    from transformers import AutoTokenizer

    case = CASES[name]
    options = {"max_completion_length": 400, **case["options"]}
    tokenizer = AutoTokenizer.from_pretrained(tool_model)

    def factory():
        vault, lamp = factories()
        return {"vault": vault, "lamp": lamp} if case["mixed"] else vault

    theirs, ours = [], []
    observed_rlvr(ours, monkeypatch)
    rlvr_run = run_rlvr(tmp_path / "rlvr", tool_model, {**options, "environment_factory": factory()},
                        VaultTurns(tokenizer), monkeypatch, rows=case["rows"], rewards=(tries,),
                        engine_class=ScriptedEngine)
    trl_run = run_trl(tmp_path / "trl", tool_model, options, VaultTurns(tokenizer), monkeypatch,
                      rows=case["rows"], rewards=(tries,), environment_factory=factory(),
                      trainer_class=observed_trl(theirs))
    assert_same_generations(ours, theirs)
    compare(trl_run, rlvr_run, options.get("num_iterations", 1))
    first = trl_run.prompts[0]  # not vacuous: the rollouts of a prompt started from different observations
    assert len({tuple(p) for p in first[:G]}) == G
    seen = " ".join(tokenizer.decode(p) for generation in trl_run.prompts for p in generation)
    # the probe is the pool's first instance, and step 2 resets step 1's instances again (no new ones)
    assert "Vault 0, reset 1 times" in tokenizer.decode(first[0]) and "reset 2 times" in seen
    assert f"Vault {len(case['rows']) * G}," not in seen
    vault = [line["rewards/Vault/mean"] for line in trl_run.log_history if "rewards/Vault/mean" in line]
    assert vault and any(value > 0 for value in vault)
    if case["mixed"]:  # each row listed only its environment's tools
        texts = [tokenizer.decode(p) for p in first]
        assert all(("switch" in t) != ("guess" in t) for t in texts)
