"""setup.py's builders and start-up checks, without a model: the device, the length check's limits, reward
functions and their columns, the schedule's arguments, the optimiser's and schedule's settings, TA-GRPO's
rephrasings, the reward phase and the training-time eval (prompt shaping: test_prompt_builder.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import build_config
from rlvr.config.tagrpo import TAGRPOConfig
from rlvr.data import PromptFormat
from rlvr.models.tiny import tiny_byte_tokenizer
from rlvr.train.plan import compile_plan, run_length
from rlvr.train.setup import (
    attach_rephrasings,
    build_optimizer,
    build_scheduler,
    build_training_eval,
    check_reward_functions,
    check_scheduler,
    check_training_lengths,
    needed_columns,
    open_r1_chat,
    read_rephrasings_file,
    resolve_device,
    rewarder_recipe,
)


def test_resolve_device_without_cuda(monkeypatch):
    """auto means cpu when torch sees no GPU (also under torchrun); asking for cuda then is an error naming it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu") == resolve_device("auto", local_rank=1)
    for name in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match=f"device={name} but torch sees no CUDA device"):
            resolve_device(name)


def test_resolve_device_under_torchrun_takes_the_local_rank_s_gpu(monkeypatch):
    """With CUDA, auto and cuda are cuda:LOCAL_RANK under torchrun; one explicit cuda:N for every rank is refused."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("auto", local_rank=2) == torch.device("cuda", 2) == resolve_device("cuda", local_rank=2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="device=cuda:1 with several processes would put every rank on one GPU"):
        resolve_device("cuda:1", local_rank=0)


def _lengths(rows, *, max_completion_length=32, max_prompt_length=None, refuse=True):
    """check_training_lengths with a 64-position policy behind an engine that takes 40; a row's ``n`` is its prompt's
    token count."""
    policy = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=64))
    return check_training_lengths(rows, source="toy", max_completion_length=max_completion_length,
                                  max_prompt_length=max_prompt_length, prompt_format=PromptFormat(), policy=policy,
                                  tokenizer=tiny_byte_tokenizer(), engine=SimpleNamespace(max_model_len=40),
                                  tokenize=lambda row: [[1] * row["n"]], refuse=refuse)


def test_training_lengths_use_the_tighter_of_the_model_s_and_the_engine_s_positions():
    """Budget = min(policy 64, engine 40) − max_completion_length 32 = 8 prompt tokens: 8 passes, 9 is refused with
    the row, the limit and the option to change; refuse=False returns the rows over it instead."""
    rows = [{"id": "ok", "prompt": "q", "n": 8}, {"id": "long", "prompt": "q", "n": 9}]
    with pytest.raises(ValueError, match=r"1 of 2 prompts of toy do not fit the model's 40 positions with "
                                         r"max_completion_length=32 \(at most 8 prompt tokens\): row 1 \(id 'long'\)"):
        _lengths(rows)
    check = _lengths(rows, refuse=False)
    assert (check.budget, check.too_long, check.longest) == (8, (1,), 9)
    assert _lengths(rows, max_prompt_length=5, refuse=False).budget == 5
    with pytest.raises(ValueError, match="are longer than max_prompt_length=5 tokens"):
        _lengths(rows, max_prompt_length=5)
    with pytest.raises(ValueError, match="max_completion_length=40 does not fit the model's 40 positions"):
        _lengths(rows, max_completion_length=40, refuse=False)  # refused whatever truncation says


def needs_difficulty(prompts, completions, difficulty, weight=1.0, **kwargs):
    return [0.0] * len(completions)


class Declared:
    """A reward that declares a column it reads from **kwargs."""

    required_columns = ("solution",)

    def __call__(self, prompts, completions, *, answer, **kwargs):
        return [0.0] * len(completions)


def test_needed_columns_are_declared_ones_and_parameters_without_defaults():
    """required_columns first, then every parameter without a default (keyword-only too); **kwargs and defaulted
    parameters are not needed; a callable without a signature has only its declared ones."""
    assert needed_columns(needs_difficulty) == ("prompts", "completions", "difficulty")
    assert needed_columns(Declared()) == ("solution", "prompts", "completions", "answer")
    assert needed_columns(len) == ()


def test_check_reward_functions_names_the_missing_column_before_any_model():
    """A function needing a column the data lacks is refused naming the function, the column, the data and the
    columns it has; the call's own arguments are never missing; with the column present, the logged names come
    back (a duplicate gets _2)."""
    rows = [{"id": "a", "prompt": "q", "answer": "1"}]
    cfg = build_config({"reward_funcs": [needs_difficulty], "data": "toy.jsonl"})
    with pytest.raises(ValueError, match=r"reward function needs_difficulty needs the dataset column\(s\) "
                                         r"\['difficulty'\], which toy.jsonl lacks \(it has \['answer', 'id'\]\)"):
        check_reward_functions(cfg, rows)
    cfg = build_config({"reward_funcs": [needs_difficulty, needs_difficulty, "format"], "data": "toy.jsonl"})
    names = check_reward_functions(cfg, [{**rows[0], "difficulty": 2}])
    assert names[:2] == ["needs_difficulty", "needs_difficulty_2"] and len(names) == 3


def test_check_scheduler_refuses_arguments_the_schedule_does_not_take():
    """lr_scheduler_kwargs are tried on a stand-in parameter: cosine_with_min_lr needs min_lr or min_lr_rate, and an
    argument a schedule does not take fails naming the schedule and its kwargs."""
    check_scheduler(build_config({"lr_scheduler_type": "cosine_with_min_lr",
                                  "lr_scheduler_kwargs": {"min_lr_rate": 0.1}}), total_steps=10)
    check_scheduler(build_config({}), total_steps=0)  # a run of no optimiser step still gets a schedule
    with pytest.raises(ValueError, match="lr_scheduler_type=cosine_with_min_lr with lr_scheduler_kwargs=None"):
        check_scheduler(build_config({"lr_scheduler_type": "cosine_with_min_lr"}), total_steps=10)
    with pytest.raises(ValueError, match=r"lr_scheduler_type=linear with lr_scheduler_kwargs=\{'power': 2\}"):
        check_scheduler(build_config({"lr_scheduler_type": "linear", "lr_scheduler_kwargs": {"power": 2}}), 10)


def test_the_optimizer_and_schedule_take_the_configured_settings():
    """AdamW gets learning_rate, betas, epsilon and weight decay; a fractional warmup_steps is that share of the
    run rounded up (0.25 of 10 steps: 3), then constant_with_warmup holds the rate."""
    cfg = build_config({"learning_rate": 0.3, "adam_beta1": 0.8, "adam_beta2": 0.95, "adam_epsilon": 1e-5,
                        "weight_decay": 0.1, "warmup_steps": 0.25})
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg.optim)
    group = optimizer.param_groups[0]
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.95), 1e-5, 0.1)
    scheduler = build_scheduler(optimizer, cfg.optim, total_steps=10)
    rates = []
    for _ in range(6):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.3, 0.3])


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_read_rephrasings_file_joins_by_id_and_skips_a_half_written_line(tmp_path):
    """{id: rephrasings} with ids as text and blank rephrasings dropped; an unparsable line (a crash mid-write) is
    skipped; a record without a list is an error naming its line; a missing file names the command that makes it."""
    good = _write(tmp_path / "r.jsonl", [json.dumps({"id": 3, "rephrasings": ["A?", " ", 5, "B?"]}), "",
                                         '{"id": "x", "rephra'])
    assert read_rephrasings_file(good) == {"3": ["A?", "B?"]}
    bad = _write(tmp_path / "bad.jsonl", [json.dumps({"id": "a", "rephrasings": []}),
                                          json.dumps({"id": "b", "rephrasings": "A?"})])
    with pytest.raises(ValueError, match=r"bad.jsonl:2: expected an object with 'id' and a list 'rephrasings'"):
        read_rephrasings_file(bad)
    with pytest.raises(ValueError, match="does not exist; make it with `rlvr rephrase"):
        read_rephrasings_file(tmp_path / "none.jsonl")


def test_attach_rephrasings_prefers_the_row_s_own_then_the_file_and_keeps_n(tmp_path):
    """A row's own rephrasings win over the file's; each row keeps at most num_rephrasings; the input rows are not
    changed; with rephrase_missing=error a row with none is refused naming it; TA-GRPO off leaves the rows alone."""
    path = _write(tmp_path / "r.jsonl", [json.dumps({"id": "a", "rephrasings": ["fa1", "fa2", "fa3"]}),
                                         json.dumps({"id": "b", "rephrasings": ["fb1"]})])
    rows = [{"id": "a", "prompt": "qa"}, {"id": "b", "prompt": "qb", "rephrasings": ["own1", "own2", "own3"]}]
    t = TAGRPOConfig(num_rephrasings=2, rephrasings_file=str(path), rephrase_missing="error")
    out = attach_rephrasings(rows, t, data="toy", seed=0)
    assert [row["rephrasings"] for row in out] == [["fa1", "fa2"], ["own1", "own2"]]
    assert "rephrasings" not in rows[0] and len(rows[1]["rephrasings"]) == 3
    with pytest.raises(ValueError, match="1 rows have no rephrasings \\(first: 'c'\\)"):
        attach_rephrasings([*rows, {"id": "c", "prompt": "qc"}], t, data="toy", seed=0)
    assert attach_rephrasings(rows, TAGRPOConfig(), data="toy", seed=0) is rows


def test_open_r1_chat_only_for_preset_trl_with_a_system_prompt_or_prompt_column():
    """open-r1's chat shaping is TRL's dialect with system_prompt or dataset_prompt_column, never rlvr's."""
    assert open_r1_chat(build_config({"preset": "trl", "system_prompt": "Be brief."}))
    assert open_r1_chat(build_config({"preset": "trl", "dataset_prompt_column": "problem"}))
    assert not open_r1_chat(build_config({"preset": "trl"}))
    assert not open_r1_chat(build_config({"system_prompt": "Be brief."}))


def test_build_rewarder_takes_the_reward_options():
    """The reward phase gets the functions (callables kept), their weights, the failure policy and the run length."""

    def toy(prompts, completions, **kwargs):
        return [1.0] * len(completions)

    cfg = build_config({"reward_funcs": [toy, "format"], "reward_weights": [2.0, 0.5], "max_reward_error_frac": 0.25,
                        "reward_timeout": 9.0, "verifier_workers": 1})
    rewarder = rewarder_recipe(cfg).build(max_steps=7, tokenizer=None)
    try:
        assert rewarder.funcs[0] is toy and rewarder.names[0] == "toy" and len(rewarder.names) == 2
        assert rewarder.weights == [2.0, 0.5] and rewarder.max_error_frac == 0.25 and rewarder.timeout_s == 9.0
        assert rewarder.state.max_steps == 7 and rewarder.pool.num_workers == 1
    finally:
        rewarder.close()


@pytest.mark.parametrize(("options", "due"), [
    ({"eval_strategy": "epoch"}, [10, 20, 30]),  # 40 rows, 4 prompts a step: an epoch of 10 steps
    ({"eval_steps": 7}, [7, 14, 21, 28, 30]),  # every eval_steps, and the last step (transformers' rule)
    ({"eval_steps": 0.25, "eval_delay": 10}, [16, 24, 30]),  # a fraction of 30: every 8, from step 10 on
    ({"eval_strategy": "epoch", "eval_delay": 1.5, "eval_on_start": True}, [20, 30]),  # epochs >= 1.5 (and start)
])
def test_training_eval_every_epoch_or_every_k_steps(options, due):
    """When pass@k evaluates (eval_strategy, eval_steps, eval_delay, eval_on_start); the response budget falls back to
    max_completion_length; no eval options: no eval."""
    cfg = build_config({"eval_data": ["gsm8k-100"], "prompts_per_step": 4, "max_completion_length": 24,
                        "max_steps": 30, "eval_k": [1, 2], "eval_temperature": 0.3, **options})
    plan = compile_plan(cfg)
    evaluation = build_training_eval(cfg, plan, run_length(cfg, plan.batch, 40), PromptFormat())
    assert [step for step in range(1, 31) if evaluation.due(step)] == due and evaluation.datasets == ("gsm8k-100",)
    assert evaluation.on_start == options.get("eval_on_start", False) and evaluation.in_line
    assert evaluation.max_completion_length == 24 and evaluation.ks == (1, 2) and evaluation.temperature == 0.3
    plain = build_config({"max_steps": 30})
    assert build_training_eval(plain, compile_plan(plain), run_length(plain, compile_plan(plain).batch, 40),
                               PromptFormat()) is None
