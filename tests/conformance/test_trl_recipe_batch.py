"""The same recipe under TRL 1.16's own ``GRPOTrainer`` and under rlvr, on the tiny model: the prompt token ids
each builds, the prompts and completions of each step, and how many optimiser steps ``num_train_epochs`` makes.

Recipes (examples/recipes/): open-r1's for Qwen2.5-1.5B-Instruct and TRL's own GRPO example, with their
model and dataset lines swapped for a tiny model folder and a local JSONL (as tests/test_recipes.py does).
Both systems get the same overrides: max_completion_length 8, max_steps 2, report_to none, use_vllm false,
push_to_hub false, output_dir a temporary folder. bf16 stays the recipes' true (TRL's default for its
example); TRL alone also gets use_cpu true, because transformers refuses bf16 without a GPU unless told
to train on the CPU (rlvr picks its device itself).

TRL's side does what its script does, with TRL's classes: open-r1's src/open_r1/grpo.py (TrlParser with
ScriptArguments, GRPOConfig, ModelConfig; open-r1's own keys system_prompt and dataset_prompt_column read from
the YAML, as open-r1's GRPOConfig / GRPOScriptArguments would; its make_conversation) or TRL's
trl/scripts/grpo.py (trl.rewards.accuracy_reward, model_init_kwargs). A subclass of GRPOTrainer records the
prompt ids of each generation batch (``_generate_single_turn``'s argument: one per completion) and reward
functions named like open-r1's record their batch sizes. rlvr's side: ``load_config`` + ``Trainer``, with
``Rewarder.reward_groups`` wrapped to record each step's groups.

Epochs: transformers' own ``Trainer.set_initial_training_values`` on TRL's ``get_train_dataloader``
(``RepeatSampler``) gives TRL's max_steps, compared with ``rlvr.train.plan.run_length``.

Where rlvr departs from TRL 1.16, on purpose (docs/from_trl.md, "Where the numbers differ"), each pinned
here: open-r1's recipe sets max_prompt_length 512 and warmup_ratio 0.1, which TRL 1.16's parser drops (its
GRPOConfig and transformers 5 have neither field), so TRL tokenizes a long prompt whole and warms up nothing;
rlvr keeps the recipe's meaning (the TRL the recipe was written for cut prompts from the left and warmed up).
The rate logged per step is the one the step used, as transformers logs it (checked with no warm-up).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from rlvr.config import load_config
from rlvr.train.plan import run_length
from rlvr.train.trainer import Trainer
from tests.helpers.recipes import offline
from tests.helpers.tiny_model import save_tiny_model

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

OPEN_R1, TRL_EXAMPLE = "open_r1_qwen2.5_1.5b_grpo.yaml", "trl_grpo_config.yaml"
STEPS = 2
OVERRIDES = {"max_completion_length": 8, "max_steps": STEPS, "report_to": "none", "use_vllm": "false",
             "push_to_hub": "false"}
SUMS = [(1, 2), (3, 4), (5, 6), (7, 8), (2, 9), (4, 4), (6, 1), (3, 3)]
# OpenR1-Math-220k's columns
OPEN_R1_ROWS = [{"problem": f"What is {a} + {b}?", "solution": f"{a} + {b} = {a + b}, so the answer is "
                 f"$\\boxed{{{a + b}}}$.", "answer": str(a + b)} for a, b in SUMS]
# a TRL math dataset's shape (trl-lib/DeepMath-103K): a chat prompt and the solution's gold
TRL_ROWS = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "solution": f"$\\boxed{{{a + b}}}$"}
            for a, b in SUMS]
# (distinct prompts, completions) of each step: open-r1's 16 per device x 1 process x 4 accumulation steps =
# 64 completions = 4 prompts of 16; TRL's defaults: 8 per device x 1 step per generation = 1 prompt of 8
SHAPE = {OPEN_R1: (4, 64), TRL_EXAMPLE: (1, 8)}
# a question whose prompt (open-r1's system prompt included) is over the recipe's max_prompt_length of 512
LONG_PROBLEM = "Add these numbers and give the total: " + " + ".join(str(i % 10) for i in range(150)) + "."


@dataclass
class Run:
    """What one system did with a recipe."""

    prompt_ids: dict[str, list[int]]  # question -> the prompt token ids built for it
    steps: list[list[list[int]]]  # per step (TRL: generation batch), the prompt ids of each completion
    learning_rates: list[float]  # as logged, per optimiser step
    reward_batches: list[tuple[str, int]] = field(default_factory=list)  # TRL: (function, len(completions)) per call
    ignored: list[str] = field(default_factory=list)  # TRL: the recipe's keys its parser did not take
    kept_groups: list[int] = field(default_factory=list)  # rlvr: metrics.jsonl's rollout/kept_groups per step
    long_prompt: list[int] = field(default_factory=list)  # the prompt ids of LONG_PROBLEM's chat


def question(prompt: list[dict]) -> str:
    return prompt[-1]["content"]


def long_chat(path: Path) -> list[dict]:
    """LONG_PROBLEM as open-r1's make_conversation makes it."""
    return [{"role": "system", "content": yaml.safe_load(path.read_text())["system_prompt"]},
            {"role": "user", "content": LONG_PROBLEM}]


def recording_trainer(**kwargs):
    """TRL's own GRPOTrainer, recording the prompt ids of each generation batch in ``generations``."""
    from trl import GRPOTrainer

    class RecordingGRPOTrainer(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kw):
            self.generations.append([list(ids) for ids in prompt_ids])
            return super()._generate_single_turn(prompt_ids, *args, **kw)

    trainer = RecordingGRPOTrainer(**kwargs)
    trainer.generations = []
    return trainer


def open_r1_rewards(calls: list) -> list:
    """Stand-ins for open-r1's accuracy / format / tag_count rewards, recording each call's batch size."""
    def accuracy_reward(completions, **kwargs):
        calls.append(("accuracy_reward", len(completions)))
        return [float(i % 3) / 2 for i in range(len(completions))]

    def format_reward(completions, **kwargs):
        calls.append(("format_reward", len(completions)))
        return [float(i % 2) for i in range(len(completions))]

    def tag_count_reward(completions, **kwargs):
        calls.append(("tag_count_reward", len(completions)))
        return [0.25 * (i % 5) for i in range(len(completions))]

    return [accuracy_reward, format_reward, tag_count_reward]


def trl_parse(path: Path, output_dir: Path, script_arguments):
    """TrlParser on the recipe with the overrides: (script args, GRPOConfig, ModelConfig, the keys it ignored).

    TRL 1.16's GRPOConfig has no max_prompt_length and transformers 5's TrainingArguments no warmup_ratio:
    with fail_with_unknown_args=False the parser leaves such keys out, as it does open-r1's own
    (system_prompt, dataset_prompt_column, reward_funcs), which open-r1's subclasses would take.
    """
    from trl import GRPOConfig, ModelConfig, TrlParser

    cli = ["--config", str(path), "--output_dir", str(output_dir), "--use_cpu", "true"]
    cli += [item for key, value in OVERRIDES.items() for item in (f"--{key}", str(value))]
    parser = TrlParser((script_arguments, GRPOConfig, ModelConfig))
    script_args, args, model_args, ignored, _ = parser.parse_args_and_config(
        cli, return_remaining_strings=True, fail_with_unknown_args=False, separate_remaining_strings=True)
    return script_args, args, model_args, [name.removeprefix("--") for name in ignored[::2]]


def trl_open_r1(path: Path, folder: Path) -> Run:
    """open-r1's grpo.py with TRL's classes (the model by its path; open-r1 loads it with flash attention)."""
    import datasets
    from trl import ScriptArguments

    script_args, args, model_args, ignored = trl_parse(path, folder / "trl", ScriptArguments)
    recipe = yaml.safe_load(path.read_text())  # open-r1's own keys
    system_prompt, column = recipe.get("system_prompt"), recipe.get("dataset_prompt_column", "prompt")

    def make_conversation(example):  # open-r1's, as written
        prompt = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
        return {"prompt": [*prompt, {"role": "user", "content": example[column]}]}

    dataset = datasets.load_dataset("json", data_files=script_args.dataset_name).map(make_conversation)
    calls = []
    trainer = recording_trainer(model=model_args.model_name_or_path, reward_funcs=open_r1_rewards(calls), args=args,
                                train_dataset=dataset[script_args.dataset_train_split])
    return trl_train(trainer, list(dataset[script_args.dataset_train_split]["prompt"]), calls, ignored, long_chat(path))


def trl_example_run(path: Path, folder: Path) -> Run:
    """TRL's trl/scripts/grpo.py (a local JSONL is read by datasets' json builder)."""
    import datasets
    import trl.rewards
    from trl.scripts.grpo import GRPOScriptArguments

    script_args, args, model_args, ignored = trl_parse(path, folder / "trl", GRPOScriptArguments)
    args.model_init_kwargs = dict(revision=model_args.model_revision, trust_remote_code=args.trust_remote_code,
                                  attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    dataset = datasets.load_dataset("json", data_files=script_args.dataset_name)
    trainer = recording_trainer(model=model_args.model_name_or_path, args=args,
                                reward_funcs=[getattr(trl.rewards, name) for name in script_args.reward_funcs],
                                train_dataset=dataset[script_args.dataset_train_split])
    return trl_train(trainer, list(dataset[script_args.dataset_train_split]["prompt"]), [], ignored)


def trl_train(trainer, prompts: list, calls: list, ignored: list[str], long: list[dict] | None = None) -> Run:
    import transformers

    verbosity = transformers.logging.get_verbosity()  # the recipe's log_level: info sets it for the process
    try:
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
        long_prompt = trainer._tokenize_prompts([long])[0][0] if long else []
        trainer.train()
    finally:
        transformers.logging.set_verbosity(verbosity)
    rates = [line["learning_rate"] for line in trainer.state.log_history if "learning_rate" in line]
    assert trainer.state.global_step == STEPS
    return Run(prompt_ids={question(p): list(ids) for p, ids in zip(prompts, prompt_ids, strict=True)},
               steps=trainer.generations, learning_rates=rates, reward_batches=calls, ignored=ignored,
               long_prompt=list(long_prompt))


def rlvr_run(path: Path, folder: Path, *, long: list[dict] | None = None, extra: tuple[str, ...] = ()) -> Run:
    """``load_config`` + ``Trainer`` on the recipe with the same overrides (and ``extra``), recording each step's
    groups."""
    out = folder / "rlvr"
    cfg = load_config(str(path), [f"{key}={value}" for key, value in OVERRIDES.items()] + [f"output_dir={out}", *extra])
    trainer = Trainer(cfg)
    steps, reward_groups = [], trainer.rewarder.reward_groups

    def recording(groups, *, step=None):
        steps.append([list(g.prompt_ids) for g in groups for _ in g.completions])  # one per completion, as TRL's
        return reward_groups(groups, step=step)

    trainer.rewarder.reward_groups = recording
    trainer.train()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    long_prompt = trainer.prompt_builder.ids({"id": "long-problem", "prompt": long}) if long else []
    return Run(prompt_ids={question(row["prompt"]): trainer.prompt_builder.ids(row) for row in trainer.rows}, steps=steps,
               learning_rates=[line["learning_rate"] for line in lines],
               kept_groups=[line["rollout/kept_groups"] for line in lines], long_prompt=long_prompt)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("model") / "tiny4k", max_positions=4096)


@pytest.fixture(scope="module")
def open_r1(tiny_model, tmp_path_factory) -> tuple[Run, Run]:
    """(TRL's run, rlvr's run) of open-r1's recipe, STEPS steps each."""
    folder = tmp_path_factory.mktemp("open_r1")
    path = offline(OPEN_R1, folder, tiny_model, OPEN_R1_ROWS)
    return trl_open_r1(path, folder), rlvr_run(path, folder, long=long_chat(path))


@pytest.fixture(scope="module")
def trl_example(tiny_model, tmp_path_factory) -> tuple[Run, Run]:
    """(TRL's run, rlvr's run) of TRL's GRPO example, STEPS steps each."""
    folder = tmp_path_factory.mktemp("trl_example")
    path = offline(TRL_EXAMPLE, folder, tiny_model, TRL_ROWS)
    return trl_example_run(path, folder), rlvr_run(path, folder)


@pytest.fixture(params=[OPEN_R1, TRL_EXAMPLE])
def runs(request) -> tuple[str, Run, Run]:
    """(recipe, TRL's run, rlvr's run)."""
    return request.param, *request.getfixturevalue({OPEN_R1: "open_r1", TRL_EXAMPLE: "trl_example"}[request.param])


@pytest.mark.slow
def test_the_prompt_token_ids_are_the_same_row_by_row(runs):
    recipe, trl_run, rlvr = runs
    assert sorted(trl_run.prompt_ids) == sorted(rlvr.prompt_ids) and len(rlvr.prompt_ids) == len(SUMS)
    for text, ids in trl_run.prompt_ids.items():
        assert rlvr.prompt_ids[text] == ids, text
    if recipe == OPEN_R1:  # open-r1's chat: the system prompt and the question, in the model's chat template
        assert min(len(ids) for ids in rlvr.prompt_ids.values()) > 300


@pytest.mark.slow
def test_each_step_has_the_same_prompts_and_completions(runs):
    recipe, trl_run, rlvr = runs
    prompts, completions = SHAPE[recipe]
    for name, run in (("TRL", trl_run), ("rlvr", rlvr)):
        assert len(run.steps) == STEPS, name
        for step in run.steps:
            counts = Counter(map(tuple, step))  # completions per distinct prompt
            assert (len(counts), len(step)) == (prompts, completions), name
            assert set(counts.values()) == {completions // prompts}, name  # num_generations each
            assert all(ids in rlvr.prompt_ids.values() for ids in step), name  # the prompt ids compared above
    assert rlvr.kept_groups == [prompts] * STEPS  # metrics.jsonl: kept_groups x num_generations = completions
    if recipe == OPEN_R1:  # with W = 1 process TRL calls each reward function once per generation batch
        names = ["accuracy_reward", "format_reward", "tag_count_reward"]
        assert trl_run.reward_batches == [(name, completions) for _ in range(STEPS) for name in names]


@pytest.mark.slow
def test_what_trl_does_with_the_keys_it_does_not_have(open_r1, trl_example):
    trl_run, _ = open_r1
    # open-r1's own keys (read above, as open-r1's classes would), and three that TRL 1.16 / transformers 5 dropped
    assert sorted(trl_run.ignored) == sorted(["torch_dtype", "dataset_prompt_column", "system_prompt", "reward_funcs",
                                              "max_prompt_length", "warmup_ratio", "overwrite_output_dir"])
    assert trl_run.learning_rates == pytest.approx([2e-5, 1e-5])  # cosine from step 1: no warm-up
    assert len(trl_run.long_prompt) > 600  # tokenized whole, max_prompt_length or not
    assert trl_example[0].ignored == []


@pytest.mark.slow
def test_a_prompt_over_max_prompt_length_keeps_the_recipes_meaning(open_r1):
    """TRL 1.16 has no max_prompt_length (its parser drops the recipe's 512; _tokenize_prompts tokenizes the whole
    chat); rlvr keeps the recipe's meaning, the last 512 tokens, as the TRL it was written for cut from the left."""
    trl_run, rlvr = open_r1
    assert len(trl_run.long_prompt) > 600 and len(rlvr.long_prompt) == 512
    assert rlvr.long_prompt == trl_run.long_prompt[-512:]


@pytest.mark.slow
def test_the_learning_rate_logged_is_the_one_each_step_used(open_r1, tiny_model, tmp_path):
    """transformers logs the rate the step used (before lr_scheduler.step()); rlvr's TRL-named learning_rate too.
    The recipe's warmup_ratio 0.1, which TRL 1.16 drops, rlvr applies: its first step warms up from 0."""
    trl_run, rlvr = open_r1
    assert trl_run.learning_rates == pytest.approx([2e-5, 1e-5])  # cosine over 2 steps, no warm-up
    assert rlvr.learning_rates == pytest.approx([0.0, 2e-5])  # ceil(0.1 x 2) = 1 warm-up step, then cosine
    cold = rlvr_run(offline(OPEN_R1, tmp_path, tiny_model, OPEN_R1_ROWS), tmp_path, extra=("warmup_ratio=0",))
    assert cold.learning_rates == pytest.approx(trl_run.learning_rates)


# ---------------------------------------------------------------- epochs: max_steps=-1, num_train_epochs=E

def trl_length(folder: Path, model: Path, *, rows: int, per_device: int, accumulation: int,
               steps_per_generation: int | None, generations: int, iterations: int, epochs: float):
    """TRL's trainer for the combination, and the max_steps (optimiser steps) transformers computes for it."""
    from datasets import Dataset
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(folder), use_cpu=True, bf16=False, report_to=[], save_strategy="no",
                      max_steps=-1, num_train_epochs=epochs, per_device_train_batch_size=per_device,
                      gradient_accumulation_steps=accumulation, steps_per_generation=steps_per_generation,
                      num_generations=generations, num_iterations=iterations, max_completion_length=8)
    trainer = recording_trainer(model=str(model), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                                args=args, train_dataset=Dataset.from_list([{"prompt": f"q{i}"} for i in range(rows)]))
    *_, max_steps = trainer.set_initial_training_values(trainer.args, trainer.get_train_dataloader())
    return trainer, max_steps


def rlvr_length(*, rows: int, per_device: int, accumulation: int, steps_per_generation: int | None,
                generations: int, iterations: int, epochs: float):
    pairs = ["preset=trl", "max_steps=-1", f"num_train_epochs={epochs}", f"per_device_train_batch_size={per_device}",
             f"gradient_accumulation_steps={accumulation}", f"num_generations={generations}",
             f"num_iterations={iterations}"]
    pairs += [] if steps_per_generation is None else [f"steps_per_generation={steps_per_generation}"]
    cfg = load_config(None, pairs)
    return run_length(cfg, cfg.batch_shape(1), rows)


# (rows N, per_device_train_batch_size P, gradient_accumulation_steps A, steps_per_generation S (None: A),
#  num_generations G, num_iterations mu, num_train_epochs E, TRL's max_steps). TRL's arithmetic: B = P·S/G prompts
# a generation batch; RepeatSampler yields (N // B)·mu·S micro-batches an epoch, ceil(that / A) optimiser steps;
# max_steps = ceil(E × those).
EPOCHS = [
    pytest.param(8, 16, 4, None, 16, 1, 1, 2, id="open-r1-shape"),  # B 4: 2·1·4 = 8 micro-batches, 8/4 = 2
    pytest.param(8, 16, 4, None, 16, 2, 1.5, 6, id="open-r1-shape-mu2-1.5ep"),  # 2·2·4 = 16, /4 = 4, ×1.5 = 6
    pytest.param(9, 8, 1, None, 8, 1, 2, 18, id="trl-defaults-2ep"),  # B 1: 9, ×2 = 18
    pytest.param(9, 4, 2, None, 4, 1, 1.5, 6, id="N9-1.5ep"),  # B 2: 4·1·2 = 8, /2 = 4, ×1.5 = 6
    pytest.param(9, 4, 2, 4, 4, 2, 1.5, 12, id="N9-spg4-mu2-1.5ep"),  # B 4: 2·2·4 = 16, /2 = 8, ×1.5 = 12
    pytest.param(13, 6, 1, None, 3, 2, 2, 24, id="N13-mu2-2ep"),  # B 2: 6·2·1 = 12, ×2 = 24
    pytest.param(13, 8, 2, 4, 4, 2, 1, 4, id="N13-spg4-mu2-1ep"),  # B 8: 1·2·4 = 8, /2 = 4
    pytest.param(13, 8, 2, 4, 4, 2, 1.5, 6, id="N13-spg4-mu2-1.5ep"),  # 4 ×1.5 = 6
    pytest.param(13, 4, 1, 2, 2, 2, 1.5, 18, id="N13-spg2-mu2-1.5ep"),  # B 4: 3·2·2 = 12 → 18
    pytest.param(13, 4, 1, 2, 2, 1, 1.5, 9, id="N13-spg2-1.5ep"),  # B 4: 3·1·2 = 6 → 9
]
EPOCH_ARGS = ("rows", "per_device", "accumulation", "steps_per_generation", "generations", "iterations", "epochs",
              "trl_steps")


@pytest.mark.slow
@pytest.mark.parametrize(EPOCH_ARGS, [pytest.param(*p.values, id=p.id) for p in EPOCHS])  # TRL's side: no xfail
def test_trls_max_steps_for_num_train_epochs(tiny_model, tmp_path, rows, per_device, accumulation,
                                             steps_per_generation, generations, iterations, epochs, trl_steps):
    _, max_steps = trl_length(tmp_path, tiny_model, rows=rows, per_device=per_device, accumulation=accumulation,
                              steps_per_generation=steps_per_generation, generations=generations,
                              iterations=iterations, epochs=epochs)
    assert max_steps == trl_steps


@pytest.mark.parametrize(EPOCH_ARGS, EPOCHS)
def test_rlvr_runs_as_many_optimiser_steps_as_trl(rows, per_device, accumulation, steps_per_generation, generations,
                                                  iterations, epochs, trl_steps):
    length = rlvr_length(rows=rows, per_device=per_device, accumulation=accumulation,
                         steps_per_generation=steps_per_generation, generations=generations, iterations=iterations,
                         epochs=epochs)
    assert length.optimizer_steps == trl_steps  # the last step stops there, as TRL does inside its last batch
    assert length.steps == -(-trl_steps // length.optimizer_steps_per_step)  # the generations that cover them


@pytest.mark.slow
def test_trl_runs_its_max_steps_on_as_many_generation_batches_as_rlvr_has_steps(tiny_model, tmp_path):
    # N13-spg2-1.5ep above: 13 prompts, 4 a generation batch (2 micro-batches of 4 = 2 prompts x 2 each, one
    # optimiser step per micro-batch), 3 batches an epoch, 1.5 epochs
    combination = dict(rows=13, per_device=4, accumulation=1, steps_per_generation=2, generations=2, iterations=1,
                       epochs=1.5)
    trainer, max_steps = trl_length(tmp_path, tiny_model, **combination)
    trainer.train()
    length = rlvr_length(**combination)
    assert trainer.state.global_step == max_steps == 9  # ceil(1.5 x 3 x 2)
    assert len(trainer.generations) == length.steps == 5  # the 5th batch trains one optimiser step, in both
    assert {len(batch) for batch in trainer.generations} == {8}
