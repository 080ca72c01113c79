"""The start-up line of a TRL config names where it runs differently from TRL 1.16, only what applies."""

from rlvr.config import build_config
from rlvr.config.departures import trl_departures

BASE = {"model_name_or_path": "tiny-random", "shuffle_dataset": False, "max_steps": 2, "scale_rewards": "none",
        "disable_dropout": True}  # none of the departures applies


def test_a_config_that_runs_as_trl_names_none():
    assert trl_departures(build_config(BASE)) == []


def test_warmup_ratio_and_max_prompt_length_that_trl_drops_are_named_when_set():
    found = trl_departures(build_config({**BASE, "warmup_ratio": 0.1, "max_prompt_length": 512}))
    assert found == ["warmup_ratio=0.1 warms up (TRL 1.16 drops the key)",
                     ("max_prompt_length=512 applies (truncation=left; TRL 1.16 drops the key and tokenizes a prompt "
                     "whole)")]


def test_each_other_departure_is_named_by_the_option_that_brings_it():
    cases = {"loss_type": ("bnpo", "bnpo is per micro-batch"), "scale_rewards": ("group", "exactly 0"),
             "disable_dropout": (False, "without dropout"), "shuffle_dataset": (True, "another shuffle"),
             "max_steps": (-1, "epoch's last prompts"), "num_iterations": (2, "2 optimiser steps per step")}
    for key, (value, words) in cases.items():
        found = trl_departures(build_config({**BASE, key: value}))
        assert len(found) == 1 and words in found[0], (key, found)
