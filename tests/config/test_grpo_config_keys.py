"""Every key of the installed TRL's GRPOConfig: honoured, renamed, translated, a no-op, or refused in one line
naming the key and why; never "unknown option". TRL's own defaults (as to_dict() writes them) are taken."""

import dataclasses
import warnings

import pytest
import yaml

from rlvr.config import FIELD_SECTION, build_config, load_config
from rlvr.config.parsing import _coerce
from rlvr.config.training_arguments import any_value
from rlvr.config.trl_names import ACCEPTED, NOT_IMPLEMENTED, RENAMED, SAME_IN_TRL, TRANSLATED
from rlvr.config.trl_table import installed_grpo_config_defaults

trl = pytest.importorskip("trl")

DEFAULTS = installed_grpo_config_defaults()
BASE = {"model_name_or_path": "tiny-random"}  # a TRL config: TRL's defaults under the key


def test_the_installed_grpo_config_is_the_one_the_tables_were_written_for():
    assert len(DEFAULTS) == len(dataclasses.fields(trl.GRPOConfig)) >= 190


@pytest.mark.parametrize("key", list(DEFAULTS))
def test_trls_default_value_of_each_key_is_accepted(key):
    cfg = build_config({**BASE, key: DEFAULTS[key]})
    assert cfg.run.preset == "trl"
    if key in FIELD_SECTION and DEFAULTS[key] is not None and key not in ("report_to", "eval_steps"):
        assert cfg.flat()[key] == _coerce(key, DEFAULTS[key])  # honoured as TRL's value


@pytest.mark.parametrize("key", ["report_to", "eval_steps", "num_completions_to_print", "hub_token", "do_train",
                                 "pad_to_multiple_of", "vllm_importance_sampling_cap"])
def test_trls_defaults_that_were_refused_mean_what_they_mean_in_trl(key):
    cfg = build_config({**BASE, key: DEFAULTS[key]})
    plain = build_config(BASE)
    meaning = {"report_to": cfg.run.report_to == [],  # no tracker (transformers' "none")
               "eval_steps": not cfg.eval.enabled,  # eval_strategy no: unused
               "num_completions_to_print": cfg.run.num_completions_to_log is None,  # every completion
               "vllm_importance_sampling_cap": cfg.vllm.vllm_importance_sampling_clip_max == 3.0}  # not given
    assert meaning.get(key, cfg == plain)


def _other_value(value):
    """A value that is not TRL's default, of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, float):
        return value * 2 + 0.5
    if isinstance(value, str):
        return "something_else"
    if isinstance(value, list):
        return ["something_else"]
    if isinstance(value, dict):
        return {"something_else": 1}
    return 7  # None: any value says something


def _outcome(key, value):
    """honoured | renamed | no-op | refused, or the failure as text."""
    try:
        cfg = build_config({**BASE, key: value})
    except (ValueError, TypeError) as error:
        text = str(error)
        assert "unknown option" not in text, text
        lines = [line for line in text.splitlines() if key in line]
        assert len(lines) == 1 and len(text.splitlines()) <= 2, text  # one line (after the heading) that names it
        assert len(lines[0]) > len(key) + 20, text  # with a reason
        return "refused"
    if key == "eval_steps":  # TRL reads it only with eval_strategy: steps (its default is no)
        assert not cfg.eval.enabled
        return "unused"
    if key in FIELD_SECTION:
        assert cfg.flat()[key] == _coerce(key, value)
        return "honoured"
    if key in RENAMED:
        assert cfg.flat()[RENAMED[key]] == _coerce(RENAMED[key], value)
        return "renamed"
    if key in ACCEPTED:
        assert ACCEPTED[key][0](value)
        return "no-op"
    assert TRANSLATED_TO[key](cfg), key
    return "translated"


# the translated keys' other values (true, or delta 7.0 above 1 + epsilon_high; use_cpu's false: no device)
TRANSLATED_TO = {
    "use_liger_kernel": lambda cfg: cfg.optim.lm_head_chunk_tokens == 1024,
    "use_vllm": lambda cfg: cfg.rollout.rollout_engine == "vllm",
    "delta": lambda cfg: cfg.algorithm.dual_clip == 7,
    "use_cpu": lambda cfg: cfg.model.device == "auto",
    "disable_tqdm": lambda cfg: cfg.run.progress_bar is False,  # (7: true)
    "num_generations_eval": lambda cfg: not cfg.eval.enabled,  # TRL reads it only in an evaluation (none here)
}


@pytest.mark.parametrize("key", list(DEFAULTS))
def test_another_value_of_each_key_is_honoured_a_no_op_or_refused_in_one_line(key):
    value = _other_value(DEFAULTS[key])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = _outcome(key, value)
    if outcome == "no-op":  # a no-op is one whatever the value, or a value rlvr runs
        assert ACCEPTED[key][0] is any_value or ACCEPTED[key][0](value)


def test_a_refused_value_says_why_and_the_nearest_option():
    with pytest.raises(ValueError) as error:
        build_config({**BASE, "load_best_model_at_end": True})
    assert str(error.value).splitlines()[1].strip().startswith("load_best_model_at_end: True is not supported (rlvr "
                                                               "does not load the best checkpoint at the end")
    with pytest.raises(ValueError, match="data_seed: 3 is not supported .*nearest: seed"):
        build_config({**BASE, "data_seed": 3})


def test_the_whole_to_dict_is_one_config_with_trls_meaning(tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({**DEFAULTS, "output_dir": str(tmp_path / "out")}))
    cfg = load_config(str(path), [])
    assert cfg.run.preset == "trl" and cfg.model.device == "cpu"  # use_cpu: true
    assert cfg.run.report_to == [] and cfg.run.num_completions_to_log is None and not cfg.eval.enabled
    assert cfg.batch_shape(1).prompts_per_step == 1  # TRL's 8 x 1 x 1 / 8, generation_batch_size 8 as derived
    assert cfg.optim.learning_rate == 1e-6 and cfg.run.seed == 42 and cfg.model.bf16 is True


def test_the_whole_to_dict_runs_the_dry_run_from_the_command_line(tmp_path, capsys):
    from rlvr.cli import main

    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({**DEFAULTS, "output_dir": str(tmp_path / "out")}))
    assert main(["train", "--config", str(path), "--dry-run", "--no_bf16"]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["model"]["bf16"] is False
    assert "TRL 1.16's defaults and semantics apply" in err and "each step: 1 prompts x 8 completions" in err


def test_every_field_is_honoured_refused_or_a_no_op_in_trl_too():
    """Issue 50's walk over all of TRL's GRPOConfig fields (191 in 1.16): each is rlvr's own option, renamed or
    translated to one (honoured), taken at values rlvr runs and refused past them, refused unless TRL's default
    (not implemented), or accepted at any value only where TRL's GRPO computes the same numbers whatever the value
    (SAME_IN_TRL, each with its reason in docs/from_trl.md's table). A field in none of these fails."""
    kinds = {}
    for key in DEFAULTS:
        if key in FIELD_SECTION or key in RENAMED or key in TRANSLATED:
            kinds[key] = "honoured"
        elif key in ACCEPTED and ACCEPTED[key][0] is not any_value:
            kinds[key] = "honoured at rlvr's values, else refused"
        elif key in NOT_IMPLEMENTED:
            kinds[key] = "refused unless TRL's default"
        elif key in ACCEPTED and key in SAME_IN_TRL:
            kinds[key] = "no-op in TRL too"
        else:
            kinds[key] = "silently ignored"
    ignored = sorted(key for key, kind in kinds.items() if kind == "silently ignored")
    assert not ignored, f"GRPOConfig fields neither honoured, refused nor a no-op in TRL's GRPO too: {ignored}"
    assert sorted(SAME_IN_TRL - set(ACCEPTED)) == []  # every listed key is accepted, with its reason
    assert len(kinds) >= 190
