"""What the trainer builds from the config at set-up, each option read here once: the policy, the optimiser
and its schedule, the rollout engine's options, the rows' questions and prompt format, TA-GRPO's
rephrasings, the reward phase, DaGRPO's scorer, the training-time eval, and the checks made before
the model loads (reward functions and their columns, the schedule's arguments; also ``--dry-run``'s)
and after (the length check). The step's decisions are the plan's (``plan.py``).

Optimiser: ``optim=adamw_torch_fused`` (TRL's default) runs AdamW as one fused kernel per parameter
tensor, on CPU and CUDA alike; ``adamw_torch`` is torch's multi-tensor (foreach) AdamW, whose
intermediate lists are the size of all the parameters at once — at 7B in fp32 that is a temporary
28 GB (3.5 GB per GPU under 8-way FSDP) on top of the optimiser states. Both are element-wise, so the
ranks of a sharded update compute exactly what one process computes.

Rollout engine: ``rollout_engine`` picks the kind (rlvr, hf, vllm); for vLLM ``vllm_mode`` picks the
colocated engine (rlvr.rollout.vllm_engine) or the client of a separate ``rlvr vllm-serve``
(rlvr.rollout.vllm_client).

TA-GRPO's rephrasings, first found wins per row: the row's own ``rephrasings`` column;
``rephrasings_file`` (the JSONL written by ``rlvr rephrase``, joined by id); else
(``rephrase_missing=rules``) offline rule rephrasings made at load time and cached under
``$RLVR_CACHE_DIR/rephrasings/`` — the run logs that it did so. Empty or invalid rephrasings were
already dropped by the filters, so pools may differ in size [code: the authors drop rather than pad].

Length check: called once the policy and the rollout engine exist (the engine may have a limit of its
own: vLLM's ``max_model_len``) and before anything is generated, so ``max_completion_length=100000000``
or a 3,000-token prompt on a 1,024-position model stops the run at start-up, naming the row.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import get_scheduler

from rlvr.config import ExperimentConfig
from rlvr.config.sections import OptimConfig
from rlvr.config.tagrpo import TAGRPOConfig
from rlvr.core.lm_head import cast_lm_head_to_fp32
from rlvr.data import PromptFormat, load_python_rows, load_rows
from rlvr.data.input_limits import LengthCheck, check_lengths
from rlvr.data.prompts import has_chat_template
from rlvr.data.rephrase import RuleRephraser, rephrase_rows
from rlvr.data.rows import as_chat, select_prompt_column
from rlvr.dependencies import require
from rlvr.models import apply_lora, copy_for_reference, eos_token_ids, load_policy
from rlvr.models.activation_checkpointing import enable_activation_checkpointing
from rlvr.models.cache import rlvr_cache_dir
from rlvr.models.embedding import require_embedding_packages
from rlvr.models.loading import given_policy, position_limit, train_in_float32_on_cpu, warn_unapplied_dropout
from rlvr.models.reference import AdapterOffReference
from rlvr.parallel.runtime import DistContext
from rlvr.parallel.setup import wrap_policy
from rlvr.rewards import CodeSettings, bind_code_settings, is_code_reward, resolve_reward
from rlvr.rewards.combine import logged_names
from rlvr.rewards.sandbox import shared_pool
from rlvr.rewards.sandbox.notebook import PythonNotebook
from rlvr.rollout import build_engine, engine_class
from rlvr.rollout.tool_loop import MarkdownPython, ToolLoop, notebook_runner
from rlvr.run.trackers import require_trackers
from rlvr.train.eval_schedule import EvalSchedule, eval_every
from rlvr.train.evaluation import TrainingEval, training_overlap
from rlvr.train.memory_bound import check_update_memory
from rlvr.train.plan import (
    EnginePlan,
    RunLength,
    StepPlan,
    ToolSettings,
    environment_names,
    extra_reward_arguments,
    step_kind,
)
from rlvr.train.rewarding import RewarderRecipe, reward_columns
from rlvr.train.sft import sft_rows
from rlvr.train.trl_evaluation import EvalOptions, EvalRows, TrainingEvaluation

logger = logging.getLogger(__name__)


def build_optimizer(params, o: OptimConfig) -> torch.optim.AdamW:
    """AdamW over ``params`` with the run's learning rate, betas, epsilon, weight decay and implementation."""
    fused = o.optim == "adamw_torch_fused"
    return torch.optim.AdamW(params, lr=o.learning_rate, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_epsilon,
                             weight_decay=o.weight_decay, fused=fused, foreach=False if fused else None)


def warmup_steps(o: OptimConfig, total_steps: int) -> int:
    """Optimiser steps of warmup, as transformers 5 counts them: ``warmup_steps`` (a fraction of the run
    below 1, else a count), or ``warmup_ratio`` of the run; a fraction rounds up (``math.ceil``)."""
    fraction = o.warmup_steps if 0 < o.warmup_steps < 1 else o.warmup_ratio
    return int(o.warmup_steps) if o.warmup_steps >= 1 else math.ceil(fraction * total_steps)


def build_scheduler(optimizer: torch.optim.Optimizer, o: OptimConfig, total_steps: int):
    """The learning-rate schedule over ``total_steps`` optimiser steps (a transformers scheduler, with its
    ``lr_scheduler_kwargs``, e.g. ``min_lr_rate`` for cosine_with_min_lr)."""
    try:
        return get_scheduler(o.lr_scheduler_type, optimizer, num_warmup_steps=warmup_steps(o, total_steps),
                             num_training_steps=total_steps, scheduler_specific_kwargs=dict(o.lr_scheduler_kwargs or {}))
    except (TypeError, ValueError) as error:
        raise ValueError(f"lr_scheduler_type={o.lr_scheduler_type} with lr_scheduler_kwargs={o.lr_scheduler_kwargs}: "
                         f"{' '.join(str(error).split())}; see transformers' get_scheduler for the arguments each "
                         "schedule takes (cosine_with_min_lr needs min_lr or min_lr_rate)") from None


def engine_spec(cfg: ExperimentConfig, plan: EnginePlan, *, is_main: bool) -> tuple[str, dict]:
    """(engine name for ``rlvr.rollout.build_engine``, its keywords): each engine's own options, from
    :data:`ENGINE_OPTIONS` (an engine registered without an entry there is built with none), and what the plan
    decided from its abilities (``plan``). ``is_main``: this process is rank 0, the one that pushes weights to a
    vLLM server (every rank holds the same weights)."""
    options = ENGINE_OPTIONS.get(cfg.rollout.rollout_engine)
    return options(cfg, plan, is_main) if options is not None else (cfg.rollout.rollout_engine, {})


def _rlvr_engine_options(cfg: ExperimentConfig, plan: EnginePlan, is_main: bool) -> tuple[str, dict]:
    return "rlvr", {"max_batch_size": cfg.rollout.max_rollout_batch_size, "fused": cfg.rollout.fused_decoding}


def _hf_engine_options(cfg: ExperimentConfig, plan: EnginePlan, is_main: bool) -> tuple[str, dict]:
    return "hf", {"max_batch_size": cfg.rollout.max_rollout_batch_size}


def _vllm_engine_options(cfg: ExperimentConfig, plan: EnginePlan, is_main: bool) -> tuple[str, dict]:
    """The colocated vLLM engine's options, or (vllm_mode=server) the client of ``rlvr vllm-serve``'s."""
    v = cfg.vllm
    if v.vllm_mode == "server":
        url = v.vllm_server_base_url or f"http://{v.vllm_server_host}:{v.vllm_server_port}"
        return "vllm-server", {"base_url": url.rstrip("/"), "timeout": v.vllm_server_timeout,
                               "group_port": v.vllm_group_port, "tensor_parallel_size": v.vllm_tensor_parallel_size,
                               "push_weights": is_main}
    return "vllm", {"max_model_len": v.vllm_max_model_length, "kv_cache_tokens": v.vllm_kv_cache_tokens,
                    "gpu_memory_utilization": v.vllm_gpu_memory_utilization,
                    "enable_sleep_mode": plan.sleep, "dtype": plan.compute_dtype}


# rollout_engine -> its options from the config (the sections each engine reads)
ENGINE_OPTIONS = {"rlvr": _rlvr_engine_options, "hf": _hf_engine_options, "vllm": _vllm_engine_options}


def open_r1_chat(cfg: ExperimentConfig) -> bool:
    """preset=trl with system_prompt or dataset_prompt_column: open-r1's grpo.py, which makes every question
    the chat [system?, user] (``make_conversation``); TRL's own script feeds a string question as raw text."""
    return cfg.run.preset == "trl" and (cfg.data.system_prompt is not None or cfg.data.dataset_prompt_column is not None)


BUILT_IN_REWARD_PREFIXES = ("rlvr:", "open-r1:", "verl:")
ROW_TOOL_WORKERS = 64  # tool_scheduling=rows, python tool: rows whose cells wait in the sandbox pool's queue at once


def rows_need_gold(cfg: ExperimentConfig) -> bool:
    """Whether every training row must carry a gold answer: yes unless every reward function is the user's own
    (a Python callable, ``file.py:fn``, ``module:fn`` or ``module.fn``: they read the columns they name) and the
    algorithm uses no gold itself (DaGRPO's anchors and scorers, TA-GRPO's rephrasings do). TRL takes rows
    without one for such rewards; rlvr's built-in rewards verify against it."""
    if cfg.algorithm.algo in ("dagrpo", "tagrpo"):
        return True

    def users(spec: str) -> bool:
        if callable(cfg.python.reward(spec)) or is_code_reward(spec):  # code rewards read tests, not a gold
            return True
        return not spec.startswith(BUILT_IN_REWARD_PREFIXES) and (":" in spec or "." in spec)

    return not all(users(spec) for spec in cfg.reward.reward_funcs)


def row_rules(cfg: ExperimentConfig) -> dict:
    """How the training rows are read (``rlvr.data.rows.normalize_row``): whether each needs a gold, whether they
    feed environments (a missing or empty prompt allowed, the row kept as given for reset), and whether the row as
    given is kept (a TRL config: its reward functions get the dataset's columns, TRL's ``_calculate_rewards``)."""
    return {"gold": rows_need_gold(cfg), "environment": bool(extra_reward_arguments(cfg)),
            "keep_row": cfg.run.preset == "trl"}


def load_training_rows(cfg: ExperimentConfig, dist: DistContext) -> list[dict]:
    """The training rows (with rephrasings; algo=sft: checked to hold solutions): rank 0 first, so it alone fills
    any on-disk cache."""
    rows, rules = None, row_rules(cfg)  # user reward functions only: rows without a gold are kept, as TRL keeps them
    source = ((lambda: load_rows(cfg.data.data, **rules)) if cfg.python.data is None
              else (lambda: load_python_rows(cfg.python.data, **rules)))
    load = lambda: chat_rows(attach_rephrasings(question_rows(source(), cfg), cfg.tagrpo, data=cfg.data.data,
                                                seed=cfg.run.seed), cfg)
    if dist.is_main:
        rows = load()
    dist.barrier()
    rows = rows if rows is not None else load()
    return sft_rows(rows, cfg.data.data, log=dist.is_main) if step_kind(cfg) == "sft" else rows


def question_rows(rows: list[dict], cfg: ExperimentConfig) -> list[dict]:
    """The rows with their question taken from ``dataset_prompt_column`` (open-r1's), when it is set."""
    if cfg.data.dataset_prompt_column is None:
        return rows
    return select_prompt_column(rows, cfg.data.dataset_prompt_column, cfg.data.data)


def chat_rows(rows: list[dict], cfg: ExperimentConfig) -> list[dict]:
    """The rows as open-r1's grpo.py makes them, [system?, user] chats, when :func:`open_r1_chat`."""
    return as_chat(rows, cfg.data.system_prompt) if open_r1_chat(cfg) else rows


def prompt_format(cfg: ExperimentConfig, tokenizer, rows: list[dict], *, tools: ToolSettings | None,
                  log: bool = False) -> PromptFormat:
    """How the run's prompts become tokens, decided once: the chat template, or raw text for plain-string
    questions (preset=trl, as TRL feeds them; or a tokenizer without a chat template, a base model). ``tools``: the
    plan's (its functions listed by the chat template; the python tool: a system prompt saying how to call it unless
    the run has one)."""
    templated = has_chat_template(tokenizer)
    raw = cfg.run.preset == "trl" or not templated
    if not templated:
        chats = sum(isinstance(row["prompt"], list) for row in rows)
        if chats:
            raise ValueError(f"the tokenizer of {cfg.model.model} has no chat template, but {chats} prompts of "
                             f"{cfg.data.data} are chats (lists of messages); set chat_template to a Jinja template, "
                             "or use a chat/instruct model")
        if cfg.data.system_prompt is not None:
            raise ValueError(f"system_prompt needs a chat template, and the tokenizer of {cfg.model.model} has none; "
                             "drop system_prompt (the questions then go to the model as raw text), or set chat_template")
        if log and cfg.run.preset != "trl":
            logger.info("the tokenizer of %s has no chat template: plain-string questions go to the model as raw "
                        "text, as TRL feeds them", cfg.model.model)
    system = None if open_r1_chat(cfg) else cfg.data.system_prompt  # open-r1's chat already holds it
    functions = () if tools is None or tools.builtin else tools.listed  # (an environment's methods included)
    if functions and raw and any(isinstance(row["prompt"], str) for row in rows):
        raise ValueError(f"tools={','.join(tools.names)}: function tools are listed and called through the chat "
                         "template, but the prompts are plain strings fed as raw text" + (
                             " (preset=trl, as TRL feeds a non-conversational dataset, where TRL's tools fail too)"
                             if templated else f" (the tokenizer of {cfg.model.model} has no chat template)")
                         + "; give the prompts as lists of messages ([{role: user, content: ...}])")
    if tools is not None and tools.builtin and system is None and not open_r1_chat(cfg):
        if raw:  # (no system message to hold it: the user's prompts must say how to call the tool)
            if log:
                logger.warning("tools=%s with prompts fed as raw text: no tool instruction is added; say in your "
                               "prompts or `instruction` how to call it (%s)", ",".join(tools.names),
                               MarkdownPython.instruction)
        else:
            system = MarkdownPython.instruction  # how to call the tool (docs/training.md, "Tools")
    return PromptFormat(system_prompt=system, instruction=cfg.data.instruction,
                        chat_template_kwargs=cfg.data.chat_template_kwargs, raw_strings=raw, tools=functions)


def rollout_engine(cfg: ExperimentConfig, plan: StepPlan, policy, tokenizer, *, is_main: bool):
    """The run's rollout engine (``engine_spec``'s kind and options), in the tool loop when the run has tools."""
    engine, options = engine_spec(cfg, plan.engine, is_main=is_main)
    built = build_engine(engine, policy, pad_token_id=tokenizer.pad_token_id,
                         eos_token_ids=eos_token_ids(policy, tokenizer), **options)
    return with_tools(built, plan.rollout.tools, tokenizer, cfg)


def with_tools(engine, tools: ToolSettings | None, tokenizer, cfg: ExperimentConfig):
    """``engine`` wrapped in the tool loop when the run has tools (rlvr.rollout.tool_loop), else itself. The python
    tool's cells run as code rewards' programs do (``code_sandbox``), whose pool starts now (a machine that cannot
    isolate is refused at start-up); function tools run in this process (rlvr.rollout.function_tools), their calls
    and results written as the chat template writes them (rlvr.rollout.chat_tools)."""
    if tools is None:
        return engine
    if not tools.builtin:
        from rlvr.rollout.chat_tools import ChatTemplateTools
        from rlvr.rollout.function_tools import function_runner

        # (with environments, each rollout's calls run its own instance's methods: GroupGenerator hands them over)
        runners = {fn.__name__: function_runner(fn, timeout=tools.timeout) for fn in tools.functions}
        # (rows: one call at a time, as TRL calls functions; they still run while other rows generate)
        return ToolLoop(engine, tokenizer, runners, max_tool_calling_iterations=tools.max_iterations,
                        scheduling=tools.scheduling, tool_workers=1,
                        tool_format=ChatTemplateTools(tokenizer, tools.listed,
                                                      chat_template_kwargs=cfg.data.chat_template_kwargs))
    sandbox = code_settings(cfg).sandbox
    notebook = PythonNotebook(sandbox, output_chars=tools.output_chars)
    shared_pool(sandbox)
    return ToolLoop(engine, tokenizer, {"python": notebook_runner(notebook.run_cells)},
                    tool_format=MarkdownPython(tokenizer), max_tool_calling_iterations=tools.max_iterations,
                    scheduling=tools.scheduling, tool_workers=ROW_TOOL_WORKERS)  # (the sandbox's pool runs them)


def read_rephrasings_file(path: str | Path) -> dict[str, list[str]]:
    """{id: rephrasings} from a ``rlvr rephrase`` output file (a half-written last line is ignored)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"rephrasings_file {str(path)!r} does not exist; make it with "
                         "`rlvr rephrase --data SPEC --n N --via rules --out FILE.jsonl`")
    found: dict[str, list[str]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record.get("rephrasings"), list) or "id" not in record:
            raise ValueError(f"{path}:{number}: expected an object with 'id' and a list 'rephrasings'")
        found[str(record["id"])] = [r for r in record["rephrasings"] if isinstance(r, str) and r.strip()]
    return found


def attach_rephrasings(rows: list[dict], t: TAGRPOConfig, *, data: str, seed: int) -> list[dict]:
    """Rows with up to N rephrasings each (new dicts; rows without any keep an empty list).

    ``data`` (the data spec) and ``seed`` key the cache of rule rephrasings.
    """
    if not t.enabled:
        return rows
    joined = read_rephrasings_file(t.rephrasings_file) if t.rephrasings_file else {}
    out = [dict(row, rephrasings=list(row.get("rephrasings") or joined.get(row["id"], []))) for row in rows]
    missing = [row for row in out if not row["rephrasings"]]
    if missing and t.rephrase_missing == "error":
        raise ValueError(f"{len(missing)} rows have no rephrasings (first: {missing[0]['id']!r}); add a "
                         "'rephrasings' column, pass rephrasings_file=..., or set rephrase_missing=rules")
    if missing:
        made = _rule_rephrasings(missing, n=t.num_rephrasings, data=data, seed=seed)
        for row in missing:
            row["rephrasings"] = made.get(row["id"], [])
    for row in out:
        row["rephrasings"] = row["rephrasings"][: t.num_rephrasings]
    return out


def _rule_rephrasings(rows: list[dict], *, n: int, data: str, seed: int) -> dict[str, list[str]]:
    """Offline rule rephrasings for ``rows``, made once and cached by (data, N, seed)."""
    key = hashlib.sha256(json.dumps([data, n, seed, sorted(r["id"] for r in rows)]).encode()).hexdigest()
    path = rlvr_cache_dir() / "rephrasings" / f"rules-{key[:16]}.jsonl"
    text_rows = [r for r in rows if isinstance(r["prompt"], str)]
    if len(text_rows) < len(rows):
        logger.warning("%d rows have chat-message prompts; rule rephrasing needs plain text, they get none",
                       len(rows) - len(text_rows))
    tally = rephrase_rows(text_rows, RuleRephraser(), n=n, seed=seed, out_path=path, progress=False)
    logger.warning("TA-GRPO: %d questions had no rephrasings; made offline rule rephrasings (n=%d), "
                   "cached at %s\n%s", len(rows), n, path, tally.summary())
    return read_rephrasings_file(path)


def build_scorer(cfg: ExperimentConfig, *, device):
    """DaGRPO's fine-grained scorer (None for ``scorer=none``: s = r); a local judge loads in the model's dtype."""
    d, model_dtype, seed = cfg.dagrpo, cfg.model.dtype, cfg.run.seed
    if d.scorer == "none":
        return None
    from rlvr.rewards.scorers import build_scorer

    if d.scorer != "judge":
        return build_scorer(d.scorer)
    if d.judge_base_url is not None:
        from rlvr.rewards.scorers import OpenAIChatBackend

        backend = OpenAIChatBackend(d.judge_base_url, d.judge_model_name, api_key_env=d.judge_api_key_env,
                                    timeout_s=d.judge_timeout, max_retries=d.judge_max_retries,
                                    allow_plain_http=d.judge_allow_plain_http,
                                    on_failure="their scores fall back to s = r (dagrpo/scorer_fail_frac)")
    else:
        from rlvr.models import load_policy
        from rlvr.rewards.scorers import LocalModelBackend

        model, tokenizer = load_policy(d.judge_model, dtype=model_dtype, seed=seed)
        backend = LocalModelBackend(model.to(device).eval(), tokenizer)
    return build_scorer("judge", backend=backend)


def check_training_lengths(
    rows: Sequence[dict],
    *,
    source: str,
    max_completion_length: int,
    max_prompt_length: int | None,
    prompt_format: PromptFormat,
    policy,
    tokenizer,
    engine,
    tokenize: Callable[[dict], Sequence[Sequence[int]]],
    refuse: bool = True,
) -> LengthCheck:
    """``check_lengths`` with the run's limits; ``tokenize``: row → the prompt ids of every variant."""
    return check_lengths(
        rows, tokenize, source=source, refuse=refuse,
        max_positions=position_limit(policy, tokenizer, engine=engine),
        max_completion_length=max_completion_length, max_prompt_length=max_prompt_length,
        template_bytes=prompt_format.template_bytes(tokenizer),
    )


def resolve_device(name: str, *, local_rank: int | None = None) -> torch.device:
    """``auto`` picks CUDA when present; an explicit CUDA device that is absent is an error.

    Under torchrun (``local_rank`` given) ``auto``/``cuda`` mean this process's GPU, cuda:LOCAL_RANK.
    """
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={name} but torch sees no CUDA device; use device=cpu or a CUDA build of torch")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if local_rank is not None and name.startswith("cuda:"):
        raise ValueError(f"device={name} with several processes would put every rank on one GPU; use "
                         "device=auto or cuda (rank r then uses cuda:LOCAL_RANK), and CUDA_VISIBLE_DEVICES")
    if name == "cuda" and local_rank is not None:
        return torch.device("cuda", local_rank)
    return torch.device(name)


@dataclass
class Models:
    """The models of a run: the policy, its tokenizer and device, the reference (None: β = 0), and the module
    the update runs through (the policy, or its DDP/FSDP2 wrapping)."""

    policy: torch.nn.Module
    tokenizer: object
    device: torch.device
    reference: object | None
    train_model: torch.nn.Module


def build_models(cfg: ExperimentConfig, plan: StepPlan, dist: DistContext) -> Models:
    """The policy loaded as ``model`` says (LoRA when ``lora_r`` > 0) on this process's device, in eval mode (no
    dropout: the on-policy ratio is exactly 1), its reference, activation checkpointing, and the wrapping."""
    m = cfg.model
    if cfg.python.model is not None:  # a model loaded by the caller (GRPOTrainer(model=...)): used as it is
        policy, tokenizer = given_policy(cfg.python.model, cfg.python.tokenizer, chat_template=cfg.data.chat_template)
    else:
        policy, tokenizer = load_policy(m.model, dtype=m.dtype, trust_remote_code=m.trust_remote_code,
                                        seed=cfg.run.seed, allow_pickle_weights=m.allow_pickle_weights,
                                        attn_implementation=m.attn_implementation, chat_template=cfg.data.chat_template)
    if m.lora_r > 0:
        targets = m.lora_target_modules
        policy = apply_lora(policy, r=m.lora_r, alpha=m.lora_alpha, dropout=m.lora_dropout,
                            target_modules=targets if targets in (None, "all-linear")
                            else [t.strip() for t in targets.split(",")], use_rslora=m.use_rslora,
                            use_dora=m.use_dora, modules_to_save=[t.strip() for t in m.lora_modules_to_save.split(",")]
                            if m.lora_modules_to_save else None)
    if not m.disable_dropout and dist.is_main:
        warn_unapplied_dropout(policy)
    device = resolve_device(m.device, local_rank=dist.local_rank if dist.enabled else None)
    train_in_float32_on_cpu(policy, device)
    policy.to(device).eval()
    if m.cast_lm_head_to_fp32:  # (before the reference is copied: it gets the float32 head too, as TRL's)
        cast_lm_head_to_fp32(policy)
    reference = None
    if plan.update.needs_reference:  # (a copy made before checkpointing wraps the policy's layers)
        reference = AdapterOffReference(policy) if m.lora_r > 0 else copy_for_reference(policy)  # LoRA: no copy
        if m.lora_r == 0 and plan.autocast and dist.enabled and cfg.run.parallelism == "fsdp":
            # FSDP2 with bf16=true computes with bf16 weights (MixedPrecisionPolicy): a bf16 copy computes
            # exactly what the initial policy computes, in half the memory
            reference.to(getattr(torch, plan.autocast))
    check_update_memory(policy, reference, device=device,  # before the first step allocates
                        shards=dist.world_size if cfg.run.parallelism == "fsdp" else 1)
    if m.gradient_checkpointing:
        enable_activation_checkpointing(policy)
    train_model = wrap_policy(policy, dist, cfg.run.parallelism, device, compute_dtype=plan.autocast)  # DDP/FSDP2
    return Models(policy, tokenizer, device, reference, train_model)


def check_eval_overlap(cfg: ExperimentConfig, rows: list[dict]) -> None:
    """Warn when problems of ``eval_data`` are also training rows (rank 0, before the model loads)."""
    if cfg.eval.enabled:
        training_overlap(rows, list(cfg.eval.eval_data), limit=cfg.eval.eval_limit)


def build_training_eval(cfg: ExperimentConfig, plan: StepPlan, length: RunLength, prompt_format: PromptFormat, *,
                        trainer=None, evaluate=None) -> TrainingEval | TrainingEvaluation | None:
    """The evaluation during training (``eval_data``), or None: rlvr's pass@k, or (``eval_mode=trl``) TRL's
    evaluation of the eval data's prompts, an entry of its own (rlvr.train.trl_evaluation): ``evaluate`` (the
    trainer's rlvr.train.evaluation_trl.trl_evaluation) on ``trainer``."""
    e = cfg.eval
    if not e.enabled:
        return None
    if e.eval_mode == "trl":
        options = EvalOptions(e.eval_strategy, float(e.eval_steps), float(e.eval_delay), e.eval_on_start,
                              num_generations=e.eval_n, batch_size=e.per_device_eval_batch_size, seed=cfg.run.seed)
        data = e.eval_data[0] if len(e.eval_data) == 1 else {spec: spec for spec in e.eval_data}
        return TrainingEvaluation(trainer, options, data, evaluate)
    every = eval_every(e.eval_steps, length.counter(length.steps)) if e.eval_strategy == "steps" else 0
    schedule = EvalSchedule(e.eval_strategy, every=every, delay=e.eval_delay, on_start=e.eval_on_start)
    if plan.rollout.tools is not None and not plan.rollout.tools.builtin:
        raise ValueError(f"eval_data with function tools (tools={','.join(plan.rollout.tools.names)}): rlvr's pass@k "
                         "evaluation runs the built-in python tool only; drop eval_data, or evaluate the saved model "
                         "with your own script")
    return TrainingEval(
        datasets=tuple(e.eval_data), schedule=schedule, length=length, n=e.eval_n,
        ks=tuple(e.eval_k), temperature=e.eval_temperature, top_p=e.eval_top_p,
        max_completion_length=e.eval_max_completion_length or plan.rollout.max_completion_length,
        limit=e.eval_limit, prompt_format=prompt_format,
        answer_extraction=cfg.reward.answer_extraction, seed=cfg.run.seed, model_name=cfg.model.model,
        **({} if plan.rollout.tools is None else {  # the run's tools: its evaluations answer with them too
            "tools": plan.rollout.tools.names[0], "max_tool_calling_iterations": plan.rollout.tools.max_iterations,
            "tool_output_chars": plan.rollout.tools.output_chars}),
    )


def rewarder_recipe(cfg: ExperimentConfig, *, tools: ToolSettings | None = None) -> RewarderRecipe:
    """How the reward phase is built: the verifier pool, the reward functions (by name, in the preset's dialect) and
    their weights, and the failure policy. ``tools``: the plan's; an environment class's ``get_reward`` is one more
    reward, weight 1, named after the class (TRL's)."""
    r = cfg.reward
    specs, weights = _reward_specs(cfg), r.reward_weights
    owned = tools.environments.reward_functions() if tools is not None and tools.environments is not None else []
    if owned:
        specs, weights = specs + owned, None if weights is None else [*weights, *[1.0] * len(owned)]
    if not specs:  # (reward_funcs may be empty only with environments)
        raise ValueError("no reward source: reward_funcs is empty and no environment of environment_factory defines "
                         "get_reward(); give reward_funcs, or a get_reward(self) -> float method")
    return RewarderRecipe(tuple(specs), None if weights is None else tuple(weights), dict(
        verifier_workers=r.verifier_workers, verifier_timeout=r.verifier_timeout, answer_extraction=r.answer_extraction,
        max_reward_error_frac=r.max_reward_error_frac, reward_timeout=r.reward_timeout, names=cfg.run.preset))


def eval_rows(cfg: ExperimentConfig) -> EvalRows:
    """How an evaluation's data becomes rows, as the training rows do (:func:`row_rules`, :func:`question_rows`,
    :func:`chat_rows`), decided once."""
    return EvalRows(rules=row_rules(cfg), prompt_column=cfg.data.dataset_prompt_column, source=cfg.data.data,
                    system_prompt=cfg.data.system_prompt, chat=open_r1_chat(cfg))


def _reward_specs(cfg: ExperimentConfig) -> list:
    """The reward specs, code rewards built with the run's sandbox and extraction (starting the sandbox: a machine
    that cannot isolate programs stops here, before the model loads)."""
    return [bind_code_settings(cfg.python.reward(spec), code_settings(cfg)) for spec in cfg.reward.reward_funcs]


def code_settings(cfg: ExperimentConfig) -> CodeSettings:
    """How model-written code runs: code rewards' programs and the python tool's cells alike."""
    return CodeSettings(sandbox=cfg.reward.code_sandbox, extraction=cfg.reward.code_extraction)


# keyword arguments every reward function gets besides the dataset's columns (TRL 1.16's)
_CALL_ARGUMENTS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}


class _NoPool:
    """A stand-in verifier pool: resolving ``accuracy`` needs one, checking it does not."""

    def verify_batch(self, golds, preds):  # pragma: no cover - never called
        raise AssertionError("a dry run verifies nothing")


def check_reward_functions(cfg: ExperimentConfig, rows: list[dict]) -> list[str]:
    """Resolve every reward function by name and check the rows have the columns each needs, without a
    model (the trainer calls it before loading one); their logged names. ValueError naming the problem."""
    funcs = [resolve_reward(spec, _NoPool(), answer_extraction=cfg.reward.answer_extraction, names=cfg.run.preset)
             for spec in _reward_specs(cfg)]
    columns = set().union(*(reward_columns(row) for row in rows))
    columns |= set(extra_reward_arguments(cfg))  # (environments: the rollouts' instances)
    environments = environment_names(cfg)  # a dict environment_factory: each row names one of them
    for row in rows if environments else ():
        if row.get("environment") not in environments:
            raise ValueError(f"row {row['id']!r} has environment={row.get('environment')!r}, which is not among the "
                             f"environments of environment_factory ({sorted(environments)}); give every row one of "
                             "them in its 'environment' column")
    names = logged_names(funcs)
    for name, fn in zip(names, funcs):
        missing = sorted(set(needed_columns(fn)) - columns - _CALL_ARGUMENTS)
        if missing:
            raise ValueError(f"reward function {name} needs the dataset column(s) {missing}, which {cfg.data.data} "
                             f"lacks (it has {sorted(columns)}); use data with them, or another reward function")
        if hasattr(fn, "check_rows"):  # a built-in's check of the values it reads (a code reward's tests)
            try:
                fn.check_rows([reward_columns(row) for row in rows])
            except ValueError as error:
                raise ValueError(f"reward function {name} cannot score {cfg.data.data}: {error}") from None
    return names


def check_before_loading(cfg: ExperimentConfig, rows: list[dict], optimizer_steps: int) -> None:
    """What would fail once the model is loaded, checked before: an unknown reward or a missing column, an
    optional package (vllm, peft, the embed scorer's, the trackers'), the schedule's arguments."""
    check_reward_functions(cfg, rows)
    check_optional_packages(cfg)
    check_scheduler(cfg, optimizer_steps)


def check_optional_packages(cfg: ExperimentConfig) -> None:
    """The optional packages the options need (vllm, peft, the embed scorer's, the trackers'), before the model
    loads (the trainer and the dry run call it): MissingDependency naming the option and the install line."""
    package = engine_class(cfg.rollout.rollout_engine).optional_package  # vllm's (an ability of the class)
    if package is not None:
        require(*package)
    if cfg.model.lora_r > 0:
        require("peft", f"lora_r={cfg.model.lora_r} (LoRA) needs the peft package, which is not installed; install "
                        "it with: pip install peft, or train the full model (lora_r=0)")
    if cfg.dagrpo.scorer == "embed":
        require_embedding_packages("scorer=embed")
    require_trackers(cfg.run.report_to)  # these are imported: a tracker's import can fail in other ways too


def check_scheduler(cfg: ExperimentConfig, total_steps: int) -> None:
    """Build the learning-rate schedule on a stand-in parameter: lr_scheduler_kwargs a schedule does not take
    fail here, not after the model loads."""
    build_scheduler(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=cfg.optim.learning_rate), cfg.optim,
                    max(1, total_steps))


def needed_columns(fn) -> tuple[str, ...]:
    """The columns a reward function needs: its ``required_columns``, and its parameters without a default."""
    declared = tuple(getattr(fn, "required_columns", ()))
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return declared
    required = tuple(p.name for p in parameters if p.default is inspect.Parameter.empty
                     and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return declared + required
