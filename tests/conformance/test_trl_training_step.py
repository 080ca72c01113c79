"""One TRL step = one rlvr step, end to end: TRL 1.16's own ``GRPOTrainer.train()`` beside rlvr's own
``Trainer.train()`` on the same tiny model, prompts, completions and rewards, compared after every optimiser step.

TRL's side is its trainer as a user runs it (its accumulation, scheduler, optimiser, gradient clipping, logging,
checkpoints); only generation is replaced: ``_generate_single_turn`` returns fixed completion token ids. rlvr's
side is ``build_config`` of the same TRL-named options + ``Trainer``; only its rollout engine's ``generate`` returns
the same fixed completions (``FixedEngine``, wrapping the engine the trainer builds). Nothing of the update is
restated here: the test observes both (each optimiser step's loss, gradient norm, rate and parameters; the log
lines; the checkpoints) and compares.

Float64 both sides (the tiny model is saved in float64, both load it with its own dtype); TRL computes its
log-probs in float32 (its LM head), which sets the bounds (LOSS_ABS below): grad_norm, the rate and every parameter
tensor to 1e-6 relative, the loss (terms that cancel) to 1e-7 absolute. Not covered: the vLLM importance-sampling
modes and the off-policy mask on vLLM's sampling log-probs (TRL's use_vllm needs vllm installed; test_trl_loss.py
runs TRL's loss with each mode and with the mask on the sampler's log-probs).

Controlled on TRL's side so both see the same batches: ``shuffle_dataset=False`` (both take the prompts in
order) and TRL's shuffle of a generation batch before it cuts micro-batches (``shuffle_sequence_dict``) is the
identity, so TRL's micro-batch k holds the batch's rows k·P..(k+1)·P: group k (P = num_generations). The fixed
completions make rlvr's length buckets the same micro-batches (an even group's completions are 7-8 tokens, an odd
group's 3-6), and rlvr's mini-batches of whole groups are TRL's optimiser steps (docs/from_trl.md, "Where the
numbers differ": TRL's random micro-batches are the documented departure this removes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from tests.helpers.tiny_model import save_tiny_model

from .conftest import MAX_COMPLETION_LENGTH, TEMPERATURE

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

EOS = 257
G = 4  # num_generations = per_device_train_batch_size: one group per micro-batch
PROMPTS = ["What is 2 + 3?", "Name a colour.", "x", "Count to three, slowly."]  # unequal prompt lengths
ROWS = [{"prompt": p, "answer": "5"} for p in PROMPTS]  # (rlvr's rows need a gold; the reward reads none)


def _completion(seed: int, length: int, ends: bool) -> list[int]:
    tokens = torch.randint(33, 127, (length - 1 if ends else length,), generator=torch.Generator().manual_seed(seed))
    return tokens.tolist() + ([EOS] if ends else [])


def fixed_group(index: int, *, all_truncated: bool) -> list[list[int]]:
    """The G completions of a generation batch's group ``index``: an even group's are long (8 tokens without EOS:
    truncated, or 8 / 7 with EOS), an odd group's short (6, 5, 4, 3 with EOS), so that rlvr's length buckets
    are TRL's positional micro-batches and the micro-batches hold unequal token counts."""
    if index % 2:
        shapes = [(6, True), (5, True), (4, True), (3, True)]
    elif all_truncated:
        shapes = [(8, False)] * 4
    else:
        shapes = [(8, False), (8, True), (8, False), (7, True)]
    return [_completion(100 * index + j, n, ends) for j, (n, ends) in enumerate(shapes)]


def reward(completions, **kwargs) -> list[float]:
    """A deterministic reward of the completion's text (mixed within every group of the fixed completions)."""
    return [float(sum(map(ord, text)) % 5) / 4 for text in completions]


class FixedCompletions:
    """The completions each generation call returns, by position in the call (the same on both sides)."""

    def __init__(self, all_truncated: bool):
        self.all_truncated = all_truncated
        self.prompts_seen: list[list[list[int]]] = []

    def __call__(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        self.prompts_seen.append([list(p) for p in prompt_ids])
        assert len(prompt_ids) % G == 0
        return [ids for k in range(len(prompt_ids) // G) for ids in fixed_group(k, all_truncated=self.all_truncated)]


class FixedEngine:
    """rlvr's engine, as the trainer built it, whose ``generate`` returns the fixed completions (the rollout
    boundary: tokens, the sampler's log-probs (0: unused without the vLLM correction), truncated = no EOS)."""

    def __init__(self, engine, fixed: FixedCompletions):
        self.engine, self.fixed = engine, fixed

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, *, max_new_tokens, sampling, **seeding):
        from rlvr.rollout import Completion

        assert max_new_tokens == MAX_COMPLETION_LENGTH
        return [Completion(ids, [0.0] * len(ids), truncated=ids[-1] != EOS) for ids in self.fixed(prompts)]


@dataclass
class OptimizerStep:
    loss: float
    grad_norm: float
    learning_rate: float
    params: dict[str, torch.Tensor]


@dataclass
class Run:
    """What one system did: each optimiser step, the log_history lines, TRL's raw metric lists per line."""

    steps: list[OptimizerStep] = field(default_factory=list)
    log_history: list[dict] = field(default_factory=list)
    raw: list[dict[str, list[float]]] = field(default_factory=list)  # TRL: its _metrics lists behind each line
    prompts: list = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    states: dict[str, dict] = field(default_factory=dict)  # checkpoint -> trainer_state.json
    tracker_steps: list[int] = field(default_factory=list)
    initial: dict[str, torch.Tensor] = field(default_factory=dict)
    evaluations: list[dict] = field(default_factory=list)  # log_history's evaluation entries (eval_*), in order


def trainable(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def trainer_states(folder: Path) -> tuple[list[str], dict[str, dict]]:
    import json

    names = sorted((p.name for p in folder.glob("checkpoint-*")), key=lambda n: int(n.split("-")[1]))
    return names, {n: json.loads((folder / n / "trainer_state.json").read_text()) for n in names}


# the options both sides are given (TRL's names; rlvr's build_config takes them), and each side's own
COMMON = dict(per_device_train_batch_size=G, num_generations=G, max_completion_length=MAX_COMPLETION_LENGTH,
              temperature=TEMPERATURE, learning_rate=1e-3, adam_epsilon=1e-4, logging_steps=1, shuffle_dataset=False,
              disable_dropout=True, bf16=False, gradient_checkpointing=False, save_strategy="no", seed=7)
TRL_ONLY = dict(use_cpu=True, report_to=[], model_init_kwargs={"dtype": "auto"})  # TRL: float32 unless told
RLVR_ONLY = dict(dtype="auto", report_to="none")
LORA_KEYS = {"modules_to_save": "lora_modules_to_save"}  # LoraConfig field -> TRL's ModelConfig key


def run_trl(folder: Path, model_dir: Path, options: dict, fixed: FixedCompletions, monkeypatch,
            initial: dict[str, torch.Tensor] | None = None, *, rows: list[dict] = ROWS, rewards=(reward,),
            tools=None, trainer_class=None, environment_factory=None) -> Run:
    """TRL's GRPOTrainer.train(), generation replaced by ``fixed``; ``initial``: trainable weights to start from
    (LoRA's random A: rlvr's); ``trainer_class(base)``: a subclass of the fixed trainer (what a test observes)."""
    import trl.trainer.grpo_trainer as grpo
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    run = Run()

    class FixedGRPOTrainer(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            return fixed(prompt_ids), None

        def log(self, logs, start_time=None):
            if "train_runtime" not in logs:
                run.raw.append({k: list(v) for k, v in self._metrics["train"].items()})
            super().log(logs, start_time)

    class Recorder(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            run.steps.append(OptimizerStep(math.nan, math.nan, math.nan, trainable(model)))

    monkeypatch.setattr(grpo, "shuffle_sequence_dict", lambda batch: batch)  # micro-batch k: the batch's group k
    options = {k: v for k, v in options.items() if k != "use_peft"}
    peft = None
    lora = options.pop("lora", False)  # True, or a dict of LoraConfig's other fields (use_rslora, ...)
    if lora:
        from peft import LoraConfig

        peft = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                          task_type="CAUSAL_LM", **(lora if isinstance(lora, dict) else {}))
    args = GRPOConfig(output_dir=str(folder), **{**COMMON, **TRL_ONLY, **options})
    cls = FixedGRPOTrainer if trainer_class is None else trainer_class(FixedGRPOTrainer)
    trainer = cls(model=str(model_dir), reward_funcs=list(rewards), args=args, peft_config=peft,
                  train_dataset=Dataset.from_list(rows), callbacks=[Recorder()], tools=tools,
                  environment_factory=environment_factory)
    if initial is not None:
        with torch.no_grad():
            for name, p in trainer.model.named_parameters():
                if p.requires_grad:
                    p.copy_(initial[name])
    run.initial = trainable(trainer.model)
    trainer.train()
    history = [line for line in trainer.state.log_history if "train_runtime" not in line]
    run.evaluations = [line for line in history if is_evaluation(line)]
    run.log_history = [line for line in history if not is_evaluation(line)]
    for line, step in zip(run.log_history, run.steps, strict=True):
        step.loss, step.grad_norm, step.learning_rate = line["loss"], line["grad_norm"], line["learning_rate"]
    run.prompts, (run.checkpoints, run.states) = fixed.prompts_seen, trainer_states(folder)
    return run


def is_evaluation(line: dict) -> bool:
    """A log_history entry of an evaluation (transformers' ``eval_*`` keys), not a step's line."""
    return any(key.startswith("eval_") for key in line)


def run_rlvr(folder: Path, model_dir: Path, options: dict, fixed: FixedCompletions, monkeypatch, *,
             rows: list[dict] = ROWS, rewards=(reward,), engine_class=None) -> Run:
    """rlvr's Trainer.train() on build_config of the same options, its engine's generate replaced by ``fixed``
    (``engine_class(engine, fixed)``: FixedEngine's place)."""
    import rlvr.train.setup as setup_module
    import rlvr.train.trainer as trainer_module
    from rlvr.config import build_config

    run, build_engine, open_trackers = Run(), setup_module.build_engine, trainer_module.open_trackers
    engine_class = engine_class or FixedEngine
    monkeypatch.setattr(setup_module, "build_engine", lambda *a, **kw: engine_class(build_engine(*a, **kw), fixed))

    def recording_trackers(*args, **kwargs):
        trackers = open_trackers(*args, **kwargs)
        log_step = trackers.log_step
        trackers.log_step = lambda step, *a, **kw: (run.tracker_steps.append(step), log_step(step, *a, **kw))[1]
        return trackers

    monkeypatch.setattr(trainer_module, "open_trackers", recording_trackers)
    options = dict(options)
    lora = options.pop("lora", False)
    if lora:  # TRL's ModelConfig keys (a `trl grpo` recipe's); LoraConfig's modules_to_save is lora_modules_to_save
        options |= dict(use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.0, lora_target_modules=["q_proj", "v_proj"])
        options |= {LORA_KEYS.get(k, k): v for k, v in (lora if isinstance(lora, dict) else {}).items()}
    cfg = build_config({"model": str(model_dir), "data": [dict(row) for row in rows], "reward_funcs": list(rewards),
                        "output_dir": str(folder), **COMMON, **RLVR_ONLY, **options})
    trainer = trainer_module.Trainer(cfg)
    run.initial = trainable(trainer.policy)
    apply = trainer.update._apply

    def observed(loss, grad_norm, result):  # PolicyUpdate's optimiser step: observed, not restated
        apply(loss, grad_norm, result)
        run.steps.append(OptimizerStep(loss, grad_norm, result.lr_used, trainable(trainer.policy)))

    trainer.update._apply = observed
    trainer.train()
    run.prompts, (run.checkpoints, run.states) = fixed.prompts_seen, trainer_states(folder)
    # trainer_state.json's log_history at the end (save_strategy="no" writes no checkpoint, as TRL's)
    run.log_history = trainer.checkpoints.hf_state(trainer.step_done, trainer.step_log.num_tokens)["log_history"]
    return run


SKIPPED = {"step_time"}  # seconds


def expected_lines(trl: Run, k: int) -> list[dict]:
    """TRL's log_history lines, exactly: rlvr's TRL log (rlvr.train.trl_log, docs/from_trl.md) writes an entry at
    each of TRL's logging steps, whatever the k optimiser steps per generation, with TRL's keys and values (a
    generation's metrics on its first optimiser step's line only, the per-micro-batch ones of that step's
    micro-batches)."""
    return trl.log_history


def assert_close(ours, theirs, what: str, *, absolute: float = 1e-9) -> None:
    if theirs is None or ours is None:
        assert ours is theirs, f"{what}: rlvr {ours}, TRL {theirs}"
    else:
        assert ours == pytest.approx(theirs, rel=1e-6, abs=absolute), f"{what}: rlvr {ours}, TRL {theirs}"


# The float32 bound: TRL's log-probs are float32 (its LM head), ~1e-7 relative on a log-prob. A loss is a sum of
# terms of size |A|·ratio that cancel to ~1e-3 (the advantages sum to 0), so it agrees to ~1e-7 absolute, not 1e-6
# relative; the gradient norm and the parameters (Adam's epsilon 1e-4 so that a gradient element near epsilon
# does not turn float32 noise into a sign) to 1e-6 relative. A tensor that starts at 0 (LoRA's B) is its update
# alone, whose relative agreement is the gradient's: 5e-6.
LOSS_ABS, PARAM_REL, ZERO_START_REL = 1e-7, 1e-6, 5e-6


def compare(trl: Run, rlvr: Run, k: int) -> None:
    """Every optimiser step's loss, grad_norm, rate and parameters, then every log_history entry TRL writes, key for
    key (rlvr's own keys only under ``rlvr/``)."""
    assert rlvr.prompts == trl.prompts  # the same prompt token ids, generation by generation
    for name, value in trl.initial.items():
        torch.testing.assert_close(rlvr.initial[name], value, rtol=0, atol=0)
    assert len(rlvr.steps) == len(trl.steps) > 0
    for i, (ours, theirs) in enumerate(zip(rlvr.steps, trl.steps), 1):
        assert_close(ours.loss, theirs.loss, f"optimiser step {i}: loss", absolute=LOSS_ABS)
        assert_close(ours.grad_norm, theirs.grad_norm, f"optimiser step {i}: grad_norm")
        assert_close(ours.learning_rate, theirs.learning_rate, f"optimiser step {i}: learning_rate")
        for name, value in theirs.params.items():  # each parameter tensor, relative (LOSS_ABS's comment)
            error = float((ours.params[name] - value).norm() / value.norm().clamp(min=1e-12))
            bound = ZERO_START_REL if not trl.initial[name].any() else PARAM_REL
            assert error <= bound, f"optimiser step {i}: {name}: relative difference {error:.2e}"
    expected = expected_lines(trl, k)
    assert [line["step"] for line in rlvr.log_history] == [line["step"] for line in expected]
    for ours, theirs in zip(rlvr.log_history, expected):
        extra = sorted(key for key in ours if key not in theirs and not key.startswith("rlvr/"))
        assert not extra, f"step {theirs['step']}: rlvr logs {extra}, which TRL does not"
        for key, value in theirs.items():
            if key not in SKIPPED:
                assert key in ours, f"step {theirs['step']}: rlvr logs no {key}"
                absolute = LOSS_ABS if key in ("loss", "policy_loss") else 1e-9
                assert_close(ours[key], value, f"step {theirs['step']}: {key}", absolute=absolute)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """The tiny model in float64 (both sides load it with its own dtype)."""
    from transformers import AutoModelForCausalLM

    folder = save_tiny_model(tmp_path_factory.mktemp("model") / "tiny", max_positions=256)
    AutoModelForCausalLM.from_pretrained(folder).double().save_pretrained(folder)
    return folder


def run_both(tmp_path: Path, model_dir: Path, options: dict, monkeypatch, *, all_truncated: bool = False):
    """(TRL's run, rlvr's run) of ``options``; both start from rlvr's initial weights (LoRA's random A)."""
    rlvr = run_rlvr(tmp_path / "rlvr", model_dir, options, FixedCompletions(all_truncated), monkeypatch)
    trl = run_trl(tmp_path / "trl", model_dir, options, FixedCompletions(all_truncated), monkeypatch,
                  initial=rlvr.initial if options.get("lora") else None)
    return trl, rlvr


def optimizer_steps_per_generation(options: dict) -> int:
    accumulation = options.get("gradient_accumulation_steps", 1)
    return options.get("num_iterations", 1) * options.get("steps_per_generation", accumulation) // accumulation


# every TRL option that changes a number; k = optimiser steps per generation (num_iterations x steps_per_generation
# / gradient_accumulation_steps). max_steps counts optimiser steps (preset=trl). "all-truncated" cases get a
# generation batch whose even groups are all truncated (with mask_truncated_completions: a micro-batch of no rows)
ACC = dict(gradient_accumulation_steps=2)  # two micro-batches an optimiser step, of unequal token counts
OFF = dict(num_iterations=2)  # a second pass: ratios away from 1, clipping
CASES = {
    "grpo": dict(loss_type="grpo", max_steps=2),
    "grpo-acc2": dict(loss_type="grpo", **ACC, max_steps=2),
    "dr_grpo-acc2": dict(loss_type="dr_grpo", **ACC, max_steps=2),
    "dapo-acc2": dict(loss_type="dapo", **ACC, max_steps=2),
    "bnpo-acc2": dict(loss_type="bnpo", **ACC, max_steps=2),
    "dapo-spg4": dict(loss_type="dapo", **ACC, steps_per_generation=4, max_steps=3),
    "grpo-spg4": dict(loss_type="grpo", **ACC, steps_per_generation=4, max_steps=3),
    "scale_rewards-batch": dict(scale_rewards="batch", **ACC, max_steps=2),
    "scale_rewards-none": dict(scale_rewards="none", **ACC, max_steps=2),
    "beta": dict(beta=0.04, use_bias_correction_kl=False, **ACC, **OFF, max_steps=2),
    "beta-bias-corrected": dict(beta=0.04, use_bias_correction_kl=True, loss_type="grpo", **OFF, max_steps=2),
    "epsilon-mu2": dict(epsilon=0.02, epsilon_high=0.03, loss_type="dr_grpo", **ACC, **OFF, max_steps=2),
    "delta-mu2": dict(epsilon=0.02, epsilon_high=0.03, delta=1.04, **OFF, max_steps=2),
    "sequence-mu2": dict(importance_sampling_level="sequence", loss_type="grpo", epsilon=0.01, **ACC, **OFF,
                         max_steps=2),
    "mu2-spg4": dict(loss_type="dapo", **ACC, steps_per_generation=4, **OFF, max_steps=5),
    "mask_truncated": dict(mask_truncated_completions=True, loss_type="dapo", **ACC, max_steps=2),
    "all-truncated-masked": dict(mask_truncated_completions=True, loss_type="grpo", epsilon=0.01, **ACC, **OFF,
                                 max_steps=2),
    "entropy_coef-dapo": dict(entropy_coef=0.05, loss_type="dapo", **ACC, max_steps=2),
    "entropy_coef-grpo-spg4": dict(entropy_coef=0.05, loss_type="grpo", **ACC, steps_per_generation=4, max_steps=2),
    "max_grad_norm-0": dict(max_grad_norm=0.0, **ACC, max_steps=2),
    "max_grad_norm-0.3": dict(max_grad_norm=0.3, **ACC, max_steps=2),
    "lora": dict(lora=True, **ACC, max_steps=2),
    "lora-rslora": dict(lora=dict(use_rslora=True), **ACC, max_steps=2),  # scale alpha/sqrt(r)
    "lora-dora": dict(lora=dict(use_dora=True), **ACC, max_steps=2),  # a trained magnitude per output row
    "lora-modules_to_save": dict(lora=dict(modules_to_save=["norm"]), **ACC, max_steps=2),  # every *norm trained in full
    # TRL's other loss types, token masks, adaptive entropy and reference sync (rlvr.core.loss_variants)
    "cispo-mu2": dict(loss_type="cispo", epsilon_high=1.001, **ACC, **OFF, max_steps=2),
    "sapo-mu2": dict(loss_type="sapo", **ACC, **OFF, max_steps=2),
    "vespo-mu2": dict(loss_type="vespo", **ACC, **OFF, max_steps=2),
    "luspo-mu2": dict(loss_type="luspo", importance_sampling_level="sequence", **ACC, **OFF, max_steps=2),
    "top_entropy_quantile": dict(top_entropy_quantile=0.3, entropy_coef=0.05, loss_type="dapo", **ACC, max_steps=2),
    "off_policy_mask-mu2": dict(off_policy_mask_threshold=1e-4, loss_type="grpo", **ACC, **OFF, max_steps=2),
    "adaptive_entropy": dict(use_adaptive_entropy=True, entropy_coef=0.02, entropy_target=10.0,
                             entropy_coef_delta=0.01, loss_type="dapo", **ACC, steps_per_generation=4, max_steps=4),
    "adaptive_entropy-down": dict(use_adaptive_entropy=True, entropy_coef=0.05, entropy_target=0.1,
                                  entropy_coef_delta=0.02, loss_type="grpo", **ACC, max_steps=3),
    "cast_lm_head_to_fp32": dict(cast_lm_head_to_fp32=True, beta=0.04, **ACC, max_steps=2),
    "sync_ref_model": dict(beta=0.04, sync_ref_model=True, ref_model_sync_steps=2, ref_model_mixup_alpha=0.3,
                           use_bias_correction_kl=False, **ACC, max_steps=3),
}


@pytest.mark.parametrize("name", list(CASES))
def test_one_trl_step_is_one_rlvr_step(name, tmp_path, model_dir, monkeypatch):
    options = CASES[name]
    trl, rlvr = run_both(tmp_path, model_dir, options, monkeypatch, all_truncated=name.startswith("all-truncated"))
    compare(trl, rlvr, optimizer_steps_per_generation(options))
    if options.get("num_iterations", 1) > 1 and "epsilon" in options:  # not vacuous: the second pass clips
        assert max(line["clip_ratio/region_mean"] for line in trl.log_history) > 0
    if name == "all-truncated-masked":  # TRL's NaN of the micro-batch with no row is out of the mean, as rlvr's
        assert any(math.isnan(v) for raw in trl.raw for v in raw["clip_ratio/high_max"])
        assert max(line["clip_ratio/high_max"] for line in rlvr.log_history) > 0


def test_the_counters_are_trls(tmp_path, model_dir, monkeypatch):
    """steps_per_generation > gradient_accumulation_steps (2 optimiser steps a generation), max_steps 3, save_steps 2:
    TRL saves checkpoint-2 and checkpoint-3 (the last); rlvr's counters are optimiser steps for a TRL-shaped config,
    so its checkpoints, their trainer_state.json (global_step, epoch), its trackers' step and its last epoch are
    TRL's. (save_steps 1 would make TRL save after optimiser step 1 too, inside a generation: rlvr saves at the end
    of the step holding it, docs/from_trl.md.)"""
    options = dict(loss_type="dapo", **ACC, steps_per_generation=4, max_steps=3, save_strategy="steps", save_steps=2)
    trl, rlvr = run_both(tmp_path, model_dir, options, monkeypatch)
    assert trl.checkpoints == rlvr.checkpoints == ["checkpoint-2", "checkpoint-3"]
    for name in trl.checkpoints:
        ours, theirs = rlvr.states[name], trl.states[name]
        assert (ours["global_step"], ours["epoch"], ours["max_steps"]) == (theirs["global_step"], theirs["epoch"],
                                                                         theirs["max_steps"])
        assert ours["save_steps"] == theirs["save_steps"] == 2
    steps = [line["step"] for line in trl.log_history]
    assert [line["step"] for line in rlvr.log_history] == [line["step"] for line in expected_lines(trl, 2)] == steps
    assert rlvr.tracker_steps == [steps[1], steps[2]] == [2, 3]  # a step's own series: at its last optimiser step
    assert rlvr.log_history[-1]["epoch"] == trl.log_history[-1]["epoch"] == 1.5


def length_reward(completions, **kwargs) -> list[float | None]:
    """A second reward, not a function of the first, None (no value) for one completion in four."""
    return [None if i % 4 == 3 else float(len(text) % 3) for i, text in enumerate(completions)]


def test_normalize_then_sum_is_trls(tmp_path, model_dir, monkeypatch):
    """multi_objective_aggregation=normalize_then_sum (GDPO) with two weighted reward functions, one of which
    gives no value for some completions: TRL's run and rlvr's take the same optimiser steps and log the same."""
    options = dict(multi_objective_aggregation="normalize_then_sum", reward_weights=[1.0, 0.5], **ACC, max_steps=2)
    rewards = (reward, length_reward)
    rlvr = run_rlvr(tmp_path / "rlvr", model_dir, options, FixedCompletions(False), monkeypatch, rewards=rewards)
    trl = run_trl(tmp_path / "trl", model_dir, options, FixedCompletions(False), monkeypatch, rewards=rewards)
    compare(trl, rlvr, optimizer_steps_per_generation(options))
