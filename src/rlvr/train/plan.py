"""What the config means for the training loop, decided once at start-up.

The loop never reads the config: :func:`compile_plan` turns it into the few decisions a step needs,
so a reader auditing a combination (TA-GRPO × DaGRPO × DAPO, say) reads this module:

- **rollout**: how many prompts and responses a round draws, whether rephrasings are sampled and
  pooled, and whether rounds repeat until B groups have mixed rewards (DAPO's dynamic sampling);
- **scoring prompts**: on which prompt each log-prob pass scores a response — the question q_0 or
  the variant q_j it was sampled from (TA-GRPO's ``ratio_anchor``, ``train/tagrpo.py``), and whether
  old and reference log-probs are computed at all;
- **algorithm parts**: a researcher's own estimator, loss or aggregation named by the config
  (``path/file.py:fn``) is loaded, its signature checked and registered (``train/algorithm_parts.py``);
- **advantages**: the estimator's settings (``rlvr.core.advantages``: DaGRPO's masked pairwise form
  with pair masking), and DaGRPO's step options (:class:`DaGRPOSettings`);
- **update**: the loss settings handed to ``rlvr.core.losses.policy_loss``, the batch layout, and
  whether the sampler/trainer importance-sampling correction is on (:class:`ISCorrection`);
- **precision**: the autocast dtype, decided once for generation and the update;
- **mode**: reinforcement learning, or supervised fine-tuning on the anchors (``algo=sft``);
- **batch and length**: the step's prompts, micro-batches and optimiser steps as TRL computes them
  (``rlvr.config.batch``), and how many steps the run takes (:func:`run_length`: ``max_steps``, or
  ``num_train_epochs`` over the data as TRL counts them).

Which reward decides "correct" is the reward functions' business (``Rewarder.correctness``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from rlvr.config import ExperimentConfig
from rlvr.config.batch import BatchShape
from rlvr.core.advantages import AdvantageSettings
from rlvr.core.entropy_control import EntropyControl
from rlvr.core.losses import LossSettings
from rlvr.rollout import engine_class
from rlvr.rollout.environments import Environments
from rlvr.rollout.sampling import Sampling
from rlvr.rollout.tool_loop import check_scheduling
from rlvr.train.algorithm_part_checks import probe_algorithm_parts
from rlvr.train.algorithm_parts import load_algorithm_parts
from rlvr.train.tagrpo import LogprobPrompts


@dataclass(frozen=True)
class RolloutSettings:
    prompts_per_step: int  # B
    responses_per_prompt: int  # G, or (N+1)·G for TA-GRPO's equal_sampling control (q_0 only)
    rephrased: bool  # TA-GRPO: G responses to each rephrasing q_j as well
    pooled: bool  # TA-GRPO: q_0 and its rephrasings form one group (else one group per variant, one pool)
    max_completion_length: int
    sampling: Sampling  # temperature, top_p, top_k, min_p, repetition_penalty (rlvr.rollout.sampling)
    dynamic_sampling: bool  # DAPO: keep only groups with mixed rewards, draw more prompts until B are kept
    max_rounds: int  # generation rounds per step at most (1 without dynamic sampling)
    seed: int
    autocast: str | None  # StepPlan.autocast: generate as the update computes
    tools: ToolSettings | None = None  # tools=...: multi-turn responses with tool results (rlvr.rollout.tool_loop)


@dataclass(frozen=True)
class ToolSettings:
    """The tools a response may call and their limits (``tools``, TRL's ``max_tool_calling_iterations``)."""

    names: tuple[str, ...]  # the names the model calls: ``python`` (built-in) or the functions' names
    max_iterations: int | None  # rounds of calls at most (None: no limit)
    output_chars: int  # a result is cut to this many characters (the python tool)
    functions: tuple = ()  # function tools (TRL's ``tools=[fn, ...]``: rlvr.rollout.chat_tools); () for python
    timeout: float = 60.0  # seconds a function tool's call may take
    # environment_factory: the environments, probed (rlvr.rollout.environments); None: none
    environments: Environments | None = None
    scheduling: str = "rounds"  # tool_scheduling: TRL's rounds, or each row on its own (rlvr.rollout.tool_loop)

    @property
    def builtin(self) -> bool:
        """The built-in sandboxed python tool (```python blocks), not functions through the chat template."""
        return not self.functions and self.environments is None

    @property
    def listed(self) -> tuple:
        """Every function a rollout may call, as the chat template lists them (an environment's methods included)."""
        return tuple(self.environments.all_tools()) if self.environments is not None else self.functions


@dataclass(frozen=True)
class EnginePlan:
    """What the run asks of its rollout engine, decided from the engine class's abilities (rlvr.rollout.engine)."""

    name: str  # rollout_engine
    ahead: bool  # async_generation: the next step's round is sampled during this update
    sleep: bool = False  # vllm_enable_sleep_mode on an engine that supports_sleep: memory released between rollouts
    compute_dtype: str | None = None  # StepPlan.autocast: an engine with weights of its own generates in this dtype
    ignored: tuple[str, ...] = ()  # options the config sets that this engine cannot honour (start-up warnings)


@dataclass(frozen=True)
class AdvantagePlan:
    settings: AdvantageSettings  # the estimator and its settings (rlvr.core.advantages)
    anchor_in_stats: bool  # DaGRPO: an anchor's reward enters its group's σ
    report_pairs: bool  # DaGRPO is on: log the dagrpo/ pair metrics on every step
    normalize_then_sum: bool = False  # multi_objective_aggregation=normalize_then_sum (GDPO), else sum_then_normalize


@dataclass(frozen=True)
class DaGRPOSettings:
    """DaGRPO's step options (the scorer and the anchors' source are built at set-up)."""

    score_alpha: float  # s = α·r + (1−α)·q
    anchors: str  # off | failed | always
    anchor_max_correct: int  # κ: "failed" means at most κ correct on-policy responses
    anchor_placement: str  # replace_worst | append
    anchor_overlong: str  # truncate | skip
    score_anchors: bool = True  # reward each anchor with the run's reward functions (False in SFT: unused)


@dataclass(frozen=True)
class ISCorrection:
    """The sampler/trainer importance-sampling correction (TRL's ``vllm_importance_sampling_*``): each
    sampled token's policy loss × the detached weight of ``rlvr.core.importance.importance_weights``."""

    mode: str  # token_truncate | token_mask | sequence_truncate | sequence_mask
    clip_min: float | None  # C_min (None: no lower bound)
    clip_max: float | None  # C_max (None: no upper bound)


@dataclass(frozen=True)
class UpdateSettings:
    loss: LossSettings  # everything the loss computes with (rlvr.core.losses), aggregation included
    num_iterations: int  # μ
    num_minibatches: int  # optimiser steps per pass (steps_per_generation / gradient_accumulation_steps)
    per_device_train_batch_size: int  # completions per micro-batch on each process
    max_tokens_per_micro_batch: int | None  # padded response tokens per micro-batch (None: rows only)
    mask_truncated: bool
    max_grad_norm: float  # 0: no clipping
    temperature: float
    needs_old_logprobs: bool  # else old = logp.detach(): the ratio is exactly 1
    needs_reference: bool  # β > 0: reference log-probs (and a reference model)
    head_chunk: int  # > 0: the LM head on this many tokens at a time (rlvr.core.lm_head); 0: plain logits
    autocast: str | None  # StepPlan.autocast
    is_correction: ISCorrection | None = None  # the sampler/trainer IS correction (None: off)
    entropy_control: EntropyControl | None = None  # TRL's adaptive entropy bonus (None: the fixed entropy_coef)
    # the off-policy mask's behaviour log-probs: the sampler's (vLLM's, as TRL's with use_vllm) or old (False)
    off_policy_from_sampler: bool = False
    ref_sync: tuple[float, int] | None = None  # sync_ref_model's (alpha, every optimiser steps); None: off


@dataclass(frozen=True)
class StepPlan:
    mode: str  # rl | sft
    batch: BatchShape  # B, micro-batches, optimiser steps per pass (rlvr.config.batch)
    autocast: str | None  # "bfloat16": forwards under bf16 autocast, fp32 master weights (bf16=true); None: off
    rollout: RolloutSettings
    engine: EnginePlan
    scoring_prompts: LogprobPrompts | None  # TA-GRPO: each log-prob pass's prompt (None: no rephrasings, q_0)
    advantages: AdvantagePlan
    dagrpo: DaGRPOSettings | None  # None: DaGRPO's phase is off
    update: UpdateSettings
    tagrpo_metrics: bool  # log the tagrpo/ pool metrics
    diversity_every: int  # log rollout/diversity every K steps (0: never)
    diversity_groups: int
    num_completions_to_log: int | None  # None: all
    # (warn above, stop above): the sampler/trainer log-prob gap's alarm (rlvr.train.metrics.MismatchAlarm; 0 / None: off)
    logprob_mismatch: tuple[float, float | None] = (0.0, None)


def step_kind(cfg: ExperimentConfig) -> str:
    """``rl``, or ``sft`` (``algo=sft``: supervised fine-tuning on the anchors)."""
    return "sft" if cfg.algorithm.algo == "sft" else "rl"


def compile_plan(cfg: ExperimentConfig, *, world_size: int = 1) -> StepPlan:
    """The decisions of :class:`StepPlan` for a validated config, on ``world_size`` processes."""
    a, d, t, r = cfg.algorithm, cfg.dagrpo, cfg.tagrpo, cfg.rollout
    # a researcher's own estimator, loss or aggregation (path/file.py:fn): loaded, checked, registered
    user_parts = load_algorithm_parts(advantage_estimator=a.advantage_estimator, policy_loss=a.policy,
                                      aggregation=a.aggregation, objects=dict(cfg.python.algorithm_parts))
    batch = cfg.batch_shape(world_size)
    autocast = autocast_dtype(cfg)
    plan = StepPlan(
        mode=step_kind(cfg),
        batch=batch,
        autocast=autocast,
        rollout=RolloutSettings(
            prompts_per_step=batch.prompts_per_step,
            responses_per_prompt=r.num_generations * (t.responses_per_prompt_factor if t.equal_sampling else 1),
            rephrased=t.enabled, pooled=t.pooled, max_completion_length=r.max_completion_length,
            sampling=Sampling(**r.sampling_settings),
            dynamic_sampling=a.dynamic_sampling,
            max_rounds=a.max_num_gen_batches if a.dynamic_sampling else 1, seed=cfg.run.seed,
            autocast=autocast, tools=tool_settings(cfg),
        ),
        engine=engine_plan(cfg),
        scoring_prompts=LogprobPrompts.for_ratio_anchor(t.ratio_anchor) if t.enabled else None,
        advantages=AdvantagePlan(
            settings=AdvantageSettings(
                estimator="dagrpo" if d.pair_masking else a.advantage_estimator, scale_rewards=a.scale_rewards,
                eps=a.advantage_eps,
                # without pair masking the pairwise form (batches holding anchors) keeps every pair: τ = 0
                tau=d.pair_tau if d.pair_masking else 0.0, tau_kappa=d.pair_tau_kappa if d.pair_masking else None,
                contrast=d.contrast if d.pair_masking else "reward",
            ),
            anchor_in_stats=d.anchor_in_stats, report_pairs=d.enabled,
            normalize_then_sum=a.multi_objective_aggregation == "normalize_then_sum",
        ),
        dagrpo=DaGRPOSettings(score_alpha=d.score_alpha, anchors=d.anchors, anchor_max_correct=d.anchor_max_correct,
                              anchor_placement=d.anchor_placement, anchor_overlong=d.anchor_overlong,
                              score_anchors=step_kind(cfg) == "rl")
        if d.enabled else None,
        update=update_settings(cfg, batch, autocast),
        tagrpo_metrics=t.enabled,
        diversity_every=t.diversity_steps, diversity_groups=t.diversity_groups,
        num_completions_to_log=cfg.run.num_completions_to_log,
        logprob_mismatch=(cfg.run.logprob_mismatch_warn, cfg.run.max_logprob_mismatch),
    )
    # each of them called once on a synthetic batch: one that cannot run stops here, before the model loads
    probe_algorithm_parts(replace(plan.advantages.settings, estimator=a.advantage_estimator), plan.update.loss,
                          group_size=r.num_generations, user_parts=user_parts)
    return plan


def tool_settings(cfg: ExperimentConfig) -> ToolSettings | None:
    """The run's tools (None: single-turn responses): the built-in python tool, or functions loaded here."""
    from rlvr.config.sections import TOOLS

    r = cfg.rollout
    if r.tools is None and r.environment_factory is None:
        return None
    if r.tools is not None and list(r.tools) == list(TOOLS):
        return ToolSettings(names=tuple(TOOLS), max_iterations=r.max_tool_calling_iterations,
                            output_chars=r.tool_output_chars, scheduling=r.tool_scheduling)
    functions = [_loaded(cfg.python.tool(spec), "tools") for spec in r.tools or ()]
    names = [getattr(fn, "__name__", "") for fn in functions]
    clash = sorted({name for name in names if names.count(name) > 1})
    if clash:
        raise ValueError(f"tools: two tools are called {clash[0]!r}; the model calls a tool by its function's name, "
                         "so give each tool its own")
    environments = None
    if r.environment_factory is not None:  # TRL's probe: one instance of each, made now (reset, its methods)
        environments = Environments(environment_factories(cfg), tuple(functions), timeout=r.tool_timeout)
        names = [fn.__name__ for fn in environments.all_tools()]
    return ToolSettings(names=tuple(names), max_iterations=r.max_tool_calling_iterations,
                        output_chars=r.tool_output_chars, functions=tuple(functions), timeout=r.tool_timeout,
                        environments=environments, scheduling=r.tool_scheduling)


def extra_reward_arguments(cfg: ExperimentConfig) -> tuple[str, ...]:
    """Keyword arguments reward functions get beyond TRL's usual ones: ``environments`` with environment_factory."""
    return ("environments",) if cfg.rollout.environment_factory is not None else ()


def environment_factories(cfg: ExperimentConfig) -> dict:
    """``environment_factory``'s factories: ``{None: factory}``, or ``{name: factory}`` from ``name=spec`` entries."""
    entries = list(cfg.rollout.environment_factory)
    named = _named_entries(entries)
    if len(named) == 1 and not named[0][1]:
        return {None: _loaded(cfg.python.environment(named[0][2]), "environment_factory")}
    if not all(sep and name for name, sep, _ in named):
        raise ValueError(f"environment_factory={','.join(entries)}: give one class (file.py:Class), or name each "
                         "environment (name=file.py:Class,name2=file.py:Other; rows pick one by their 'environment' "
                         "column)")
    factories = {}
    for name, _, spec in named:
        if name in factories:
            raise ValueError(f"environment_factory: two environments are called {name!r}; give each its own name")
        factories[name] = _loaded(cfg.python.environment(spec), "environment_factory")
    return factories


def _named_entries(entries: list[str]) -> list[tuple[str, str, str]]:
    """``environment_factory`` entries as (name, "=", spec); ("", "", spec) for an unnamed one."""
    return [entry.partition("=") if "=" in entry.split(":", 1)[0] else ("", "", entry) for entry in entries]


def environment_names(cfg: ExperimentConfig) -> tuple[str, ...] | None:
    """The environments a row's ``environment`` column may name (None: one environment for every row, or none)."""
    if cfg.rollout.environment_factory is None:
        return None
    names = tuple(name for name, _, _ in _named_entries(list(cfg.rollout.environment_factory)) if name)
    return names or None


def _loaded(spec, what: str):
    """The callable ``spec`` stands for: itself, or loaded from file.py:name / module:name."""
    from rlvr.core.user_code import load_user_function

    if not isinstance(spec, str):
        return spec
    if spec.startswith("python:"):
        raise ValueError(f"{what}={spec} names an object of another process (a lambda or a class or function of "
                         "__main__): pass the object itself again, or name it as path/to/file.py:name")
    return load_user_function(spec, what=what, prefix="rlvr_user_tool")


def autocast_dtype(cfg: ExperimentConfig) -> str | None:
    """``bfloat16`` under ``bf16=true`` (forwards under bf16 autocast, fp32 master weights), else None: decided
    here only."""
    return "bfloat16" if cfg.model.bf16 else None


def update_settings(cfg: ExperimentConfig, batch: BatchShape, autocast: str | None) -> UpdateSettings:
    a, t, o, ob = cfg.algorithm, cfg.tagrpo, cfg.optim, cfg.objective
    truncated_is = t.enabled and t.ratio_anchor == "truncated_is"
    correction = is_correction(cfg)
    loss = LossSettings(
        policy_loss=a.policy, epsilon=a.epsilon, epsilon_high=a.epsilon_high, dual_clip=a.dual_clip,
        importance_level=a.importance_sampling_level, ratio_cap=t.truncated_is_cap if truncated_is else None,
        beta=a.beta, kl_ratio_weighted=a.use_bias_correction_kl and a.beta > 0,
        anchor_psi=cfg.dagrpo.anchor_psi, anchor_gamma=cfg.dagrpo.anchor_gamma,
        aggregation=a.aggregation, max_completion_length=cfg.rollout.max_completion_length,
        entropy_coef=a.entropy_coef,
        is_level=None if correction is None else correction.mode.split("_")[0],
        sapo_temperature_pos=ob.sapo_temperature_pos, sapo_temperature_neg=ob.sapo_temperature_neg,
        vespo_k_pos=ob.vespo_k_pos, vespo_lambda_pos=ob.vespo_lambda_pos, vespo_k_neg=ob.vespo_k_neg,
        vespo_lambda_neg=ob.vespo_lambda_neg, clip_cov_ratio=ob.clip_cov_ratio, clip_cov_lb=ob.clip_cov_lb,
        clip_cov_ub=ob.clip_cov_ub, kl_cov_ratio=ob.kl_cov_ratio, ppo_kl_coef=ob.ppo_kl_coef,
        top_entropy_quantile=ob.top_entropy_quantile, off_policy_mask_threshold=ob.off_policy_mask_threshold,
    )
    entropy = None
    if ob.use_adaptive_entropy:
        entropy = EntropyControl(start=a.entropy_coef, minimum=ob.entropy_coef_min, maximum=ob.entropy_coef_max,
                                 delta=ob.entropy_coef_delta, target=ob.entropy_target)
    return UpdateSettings(
        loss=loss, num_iterations=a.num_iterations, num_minibatches=batch.optimizer_steps_per_pass,
        per_device_train_batch_size=batch.micro_batch,
        max_tokens_per_micro_batch=o.max_tokens_per_micro_batch,
        mask_truncated=a.mask_truncated_completions, max_grad_norm=o.max_grad_norm,
        temperature=cfg.rollout.temperature,
        # the ratio can differ from 1 only after an update (μ > 1 or several mini-batches), or when the
        # behaviour policy sees another prompt than the policy (truncated IS: q_j vs q_0)
        needs_old_logprobs=a.num_iterations > 1 or batch.optimizer_steps_per_pass > 1 or truncated_is,
        needs_reference=a.beta > 0,
        head_chunk=o.lm_head_chunk_tokens,
        autocast=autocast,
        is_correction=correction,
        entropy_control=entropy,
        # TRL's use_vllm: the sampler's own log-probs (an engine whose kernels are not the trainer's), else old
        off_policy_from_sampler=engine_class(cfg.rollout.rollout_engine).is_correction_by_default,
        ref_sync=(ob.ref_model_mixup_alpha, ob.ref_model_sync_steps) if ob.sync_ref_model else None,
    )


def engine_plan(cfg: ExperimentConfig) -> EnginePlan:
    """The engine's part of the plan, from its class's abilities: async generation needs an engine that
    ``supports_async_generation``; an engine that ``keeps_own_weights`` cannot follow an FSDP-sharded policy
    (it would need the gathered weights after every update). Refused at any process count. Sleep mode on an
    engine without ``supports_sleep`` changes nothing (TRL, too, ignores its vLLM options without vLLM): named
    in a start-up warning."""
    r = cfg.rollout
    engine = engine_class(r.rollout_engine)
    if r.async_generation and not engine.supports_async_generation:
        raise ValueError(f"async_generation=True: the next step's rollout is generated while this step updates, which "
                         f"needs an engine holding its own copy of the weights; rollout_engine={r.rollout_engine} "
                         "samples from the training model itself: set rollout_engine=vllm (colocate or server)")
    if cfg.run.parallelism == "fsdp" and engine.keeps_own_weights:
        raise ValueError(f"rollout_engine={r.rollout_engine} with parallelism=fsdp is not supported (the engine keeps "
                         "its own copy of the weights and would need the gathered weights after every update); use "
                         "parallelism=ddp or rollout_engine=rlvr")
    if r.tools is not None or r.environment_factory is not None:  # (before the model loads; --dry-run too)
        check_scheduling(r.tool_scheduling, engine)
    ignored, sleep = (), cfg.vllm.vllm_enable_sleep_mode
    if sleep and not engine.supports_sleep:
        why = ("cannot release its memory between rollouts" if engine.keeps_own_weights else
               "has no memory of its own to release between rollouts (it samples from the training model)")
        line = (f"vllm_enable_sleep_mode=true has no effect: rollout_engine={r.rollout_engine} {why}; drop the "
                "option, or use rollout_engine=vllm")
        ignored, sleep = (line,), False
    return EnginePlan(name=r.rollout_engine, ahead=r.async_generation, sleep=sleep, ignored=ignored,
                      compute_dtype=autocast_dtype(cfg))


def is_correction(cfg: ExperimentConfig) -> ISCorrection | None:
    """The sampler/trainer correction, or None when off. ``vllm_importance_sampling_correction`` null
    (the default) means the engine class's ``is_correction_by_default``: on for vLLM (its own kernels and
    weights), off for the rlvr/hf engines (they sample with the trainer's own forward, so π_sampler = π_old
    up to float noise); true/false force it."""
    v = cfg.vllm
    on = v.vllm_importance_sampling_correction
    if on is None:
        on = engine_class(cfg.rollout.rollout_engine).is_correction_by_default
    if not on:
        return None
    return ISCorrection(mode=v.vllm_importance_sampling_mode, clip_min=v.vllm_importance_sampling_clip_min,
                        clip_max=v.vllm_importance_sampling_clip_max)


@dataclass(frozen=True)
class RunLength:
    """How long the run is, in rlvr's steps (one rollout batch each) and in optimiser steps, as TRL counts it."""

    steps: int  # training steps of the run
    steps_per_epoch: int  # steps per pass over the prompts (TRL: dataset rows // prompts per step)
    optimizer_steps_per_step: int  # μ × optimiser steps per pass (TRL counts max_steps and global_step in these)
    optimizer_steps: int  # of the whole run: the last step stops there (TRL trains part of its last generation)
    epochs: float = 0.0  # num_train_epochs when the run is counted in epochs (0: by max_steps), as TrainerState logs it
    counts_optimizer_steps: bool = False  # preset=trl: save_steps, checkpoint-N, the trackers' step count them

    def optimizer_steps_done(self, step: int) -> int:
        """Optimiser steps taken at the end of ``step`` (the last step stops at the run's count)."""
        return min(step * self.optimizer_steps_per_step, self.optimizer_steps)

    def counter(self, step: int) -> int:
        """The run's count at the end of ``step``: optimiser steps (TRL's global_step) for a TRL-shaped config
        (preset=trl), else rlvr's steps (docs/training.md, "Steps and optimiser steps")."""
        return self.optimizer_steps_done(step) if self.counts_optimizer_steps else step

    def epoch(self, step: int) -> float:
        """Epochs done at the end of ``step``, as TRL logs them: optimiser steps / optimiser steps per epoch."""
        return self.optimizer_steps_done(step) / (self.steps_per_epoch * self.optimizer_steps_per_step)


def run_length(cfg: ExperimentConfig, batch: BatchShape, num_rows: int) -> RunLength:
    """The run's length: ``max_steps`` (preset=trl: TRL's optimiser steps), or ``num_train_epochs``
    (``max_steps=-1``) epochs of ``num_rows // B`` steps, as TRL's sampler and transformers' Trainer count
    them: optimiser steps = ceil(epochs × steps per epoch × k), k optimiser steps per rlvr step. rlvr runs
    the steps that cover them, and its last step stops at that many optimiser steps, as TRL does inside
    its last generation batch.

    Convention: TRL drops an epoch's last prompts that do not fill a step; rlvr's sampler carries them
    into the next step (a stream of epochs), so with num_rows % B != 0 the prompts differ at epoch ends.
    """
    k = cfg.algorithm.num_iterations * batch.optimizer_steps_per_pass
    per_epoch = num_rows // batch.prompts_per_step
    if cfg.run.max_steps == -1:
        if per_epoch == 0:
            raise ValueError(f"num_train_epochs={cfg.run.num_train_epochs}: the data has {num_rows} prompts, fewer "
                             f"than one step's {batch.prompts_per_step}, so an epoch has no step (TRL would train "
                             "nothing); use more data, fewer prompts per step, or set max_steps")
        total = math.ceil(cfg.run.num_train_epochs * per_epoch * k)
    elif cfg.run.preset == "trl":  # TRL's max_steps counts optimiser steps
        total = cfg.run.max_steps
    else:
        total = cfg.run.max_steps * k
    return RunLength(steps=math.ceil(total / k), steps_per_epoch=max(1, per_epoch), optimizer_steps_per_step=k,
                     optimizer_steps=total, epochs=cfg.run.num_train_epochs or 0,
                     counts_optimizer_steps=cfg.run.preset == "trl")


def stream_rows(cfg: ExperimentConfig, batch: BatchShape) -> int:
    """How many rows a run reads from a stream (a ``datasets.IterableDataset`` given as the train set, as TRL
    takes one): the prompts of its steps. A stream has no length, so ``max_steps`` must be set, as TRL requires."""
    if cfg.run.max_steps <= 0:
        raise ValueError("train_dataset is an IterableDataset (a stream): set max_steps in args, as TRL requires, "
                         "since its length cannot be known (or pass a datasets.Dataset)")
    return run_length(cfg, batch, 1).steps * batch.prompts_per_step
