"""The configuration sections of a GRPO run: model, data, rollout, reward, algorithm, optim, run.

Defaults live only here (and in the other section files); names follow TRL's ``GRPOConfig`` where
one exists, with the verl alias in each help text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlvr.config import option_help
from rlvr.config.fields import _f, _fail
from rlvr.config.presets import PRESETS
from rlvr.core.names import (
    ADVANTAGE_ESTIMATOR_NAMES,
    FUNCTION_SPEC_FORMS,
    IMPORTANCE_LEVELS,
    MULTI_OBJECTIVE_AGGREGATIONS,
    POLICY_LOSS_NAMES,
    SCALE_REWARDS,
    is_function_spec,
    resolve_aggregation,
    resolve_policy_loss,
)
from rlvr.data.prompts import AUTO_INSTRUCTION
from rlvr.rewards.code_rewards import CODE_EXTRACTIONS
from rlvr.rewards.extract import EXTRACTION_MODES
from rlvr.rewards.sandbox import SANDBOX_MODES
from rlvr.rollout.names import ROLLOUT_ENGINES
from rlvr.rollout.sampling import Sampling

MAX_SEED = 2**63 - 1  # torch.manual_seed overflows past 2**64 - 1; 63 bits fit every int64 seed (vLLM, generators)
TOOLS = ("python",)
GENERATION_KWARGS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")  # (rlvr.rollout.sampling)
TOOL_SCHEDULING = ("rounds", "rows")  # (rlvr.rollout.tool_loop.SCHEDULING)
DEFAULT_DATA = "rg:chain_sum:size=1000:seed=0:min_terms=2:max_terms=2:min_digits=1:max_digits=1"


@dataclass(frozen=True)
class ModelConfig:
    model: str = _f("smollm2-135m", "policy: alias (smollm2-135m, tiny-random), local path or Hub id "
                                    "(TRL: model_name_or_path)")
    dtype: str = _f("float32", "parameter dtype: float32 | bfloat16 | auto (the checkpoint's own) (TRL: dtype, "
                               "torch_dtype)")
    attn_implementation: str | None = _f(None, "attention kernel passed to from_pretrained (sdpa, eager, "
                                               "flash_attention_2, ...); one this machine cannot run falls back to "
                                               "sdpa with a warning (same attention, another kernel); null: "
                                               "transformers' default (TRL name)")
    device: str = _f("auto", "auto (cuda if available, else cpu) | cpu | cuda | cuda:N")
    trust_remote_code: bool = _f(False, "allow model code from the Hub (off: safetensors + built-in code only)")
    allow_pickle_weights: bool = _f(False, "also load *.bin/*.pt pickle weights (unpickling can run arbitrary code: "
                                           "only for files you trust); off: safetensors only")
    lora_r: int = _f(0, "LoRA rank; 0 trains all parameters")
    lora_alpha: int = _f(16, "LoRA alpha")
    lora_dropout: float = _f(0.0, "LoRA dropout")
    lora_target_modules: str | None = _f("all-linear", "PEFT target_modules (comma list or all-linear; null: PEFT's "
                                                        "default for the architecture, TRL's default)")
    use_rslora: bool = _f(False, "LoRA: scale the update by lora_alpha/sqrt(r) (rank-stabilised LoRA) instead of "
                                 "lora_alpha/r (PEFT's use_rslora) (TRL name)")
    use_dora: bool = _f(False, "LoRA: DoRA, the update split into a trained magnitude per output row and a LoRA "
                               "direction (PEFT's use_dora) (TRL name)")
    lora_modules_to_save: str | None = _f(None, "LoRA: modules trained in full beside the adapters and saved with "
                                                "them, a comma list of name suffixes, e.g. lm_head (PEFT's "
                                                "modules_to_save) (TRL name)")
    save_merged_model: bool = _f(False, "LoRA: also save the merged full model (W + s*B*A, loadable without peft) in "
                                        "each checkpoint's and output_dir's merged/ (off: the adapter only)")
    bf16: bool = _f(False, "bf16 mixed precision: bf16 compute (autocast) with fp32 master weights, gradients and "
                           "AdamW states (dtype=bfloat16 stores the weights in bf16; with both, as TRL recipes often "
                           "set, autocast changes nothing)")
    gradient_checkpointing: bool = _f(False, "activation checkpointing: each decoder layer keeps only its input and is "
                                             "recomputed in the backward (less memory, ~1 more forward; exact)")
    disable_dropout: bool = _f(True, "rlvr always runs the policy without dropout (so the on-policy ratio is exactly "
                                     "1); false (TRL's default) only adds a start-up warning when the model or "
                                     "LoRA has a dropout probability > 0 that is therefore not applied (TRL name)")
    cast_lm_head_to_fp32: bool = _f(False, "the LM head's weight in float32 and its logits computed in float32 (autocast "
                                           "off), for the policy and the reference, in training and in rlvr's own "
                                           "engines' sampling (TRL name); refused with LoRA on the head")

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "bfloat16", "fp32", "bf16", "auto"):
            _fail("dtype", self.dtype, "use float32, bfloat16 or auto (the checkpoint's own dtype)")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            _fail("device", self.device, "use auto, cpu, cuda or cuda:N")
        if self.save_merged_model and self.lora_r == 0:
            _fail("save_merged_model", True, "only a LoRA run (lora_r > 0) has an adapter to merge; full fine-tuning "
                  "already saves the full model")
        if self.lora_r < 0:
            _fail("lora_r", self.lora_r, "use 0 (full fine-tuning) or a positive rank such as 16")
        if not 0.0 <= self.lora_dropout < 1.0:
            _fail("lora_dropout", self.lora_dropout, "use a value in [0, 1)")
        for name in ("use_rslora", "use_dora", "lora_modules_to_save"):
            if getattr(self, name) and self.lora_r == 0:
                _fail(name, getattr(self, name), "a LoRA option: set lora_r > 0 (TRL: use_peft: true), or drop it")


@dataclass(frozen=True)
class DataConfig:
    data: str = _f(DEFAULT_DATA, option_help.data)  # the sources' registry (rlvr.data.source_registry) lists them
    dataset_prompt_column: str | None = _f(None, "the column holding the question (open-r1's name; null: prompt, else "
                                                 "question, else problem). With preset=trl a string question then "
                                                 "becomes a chat [system_prompt?, user], as open-r1's grpo.py builds it")
    system_prompt: str | None = _f(None, "system message prepended to every chat prompt that has none (none by default)")
    instruction: str | None = _f(AUTO_INSTRUCTION, "text appended to each question. auto: rlvr's step-by-step \\boxed{} "
                                                   "instruction, added only to plain-string questions that carry no "
                                                   "instruction of their own (chat-format prompts and questions that "
                                                   "already mention \\boxed, #### or a final answer are never "
                                                   "rewritten); null: none; other text: appended to every question")
    chat_template: str | None = _f(None, "a Jinja chat template that replaces the tokenizer's (open-r1's name); null: the "
                                         "tokenizer's own")
    chat_template_kwargs: dict | None = _f(None, "extra variables for the chat template, passed to "
                                                 "apply_chat_template wherever a prompt is rendered (training, "
                                                 "evaluation), e.g. {enable_thinking: false} for Qwen3; null: none")
    shuffle: bool = _f(True, "shuffle prompts each epoch (seeded) (TRL: shuffle_dataset)")

    def __post_init__(self) -> None:
        for name in ("system_prompt", "instruction", "chat_template", "dataset_prompt_column"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                _fail(name, value, "give non-empty text, or null for none")


TRUNCATION_MODES = ("error", "drop", "left")


@dataclass(frozen=True)
class RolloutConfig:
    prompts_per_step: int | None = _f(4, "B: prompts per training step (verl: data.train_batch_size; TRL: "
                                         "generation_batch_size / num_generations). null (preset=trl's default): "
                                         "per_device_train_batch_size x processes x steps_per_generation / "
                                         "num_generations, as TRL computes it")
    num_generations: int = _f(8, "G: responses per prompt (verl: rollout.n)")
    max_completion_length: int = _f(40, "max new tokens per response (verl: data.max_response_length)")
    max_prompt_length: int | None = _f(None, "most prompt tokens, chat template included (verl: data.max_prompt_length); "
                                             "longer prompts are handled by `truncation`; null: only prompt + "
                                             "max_completion_length <= the model's positions is checked")
    truncation: str = _f("error", "prompts over the budget (max_prompt_length, or the model's positions less "
                                  "max_completion_length): error (refused at start-up, naming the rows) | drop (left "
                                  "out of the data, counted in data/prompts_dropped) | left (their last tokens kept, "
                                  "as TRL does; counted in rollout/prompt_truncated_frac) (verl: data.truncation)")
    temperature: float = _f(1.0, "sampling temperature; log-probs are computed at the same temperature")
    top_p: float = _f(1.0, "nucleus sampling p")
    top_k: int = _f(0, "sample among the k most likely tokens only; 0: off (verl: rollout.top_k, -1 = off)")
    min_p: float | None = _f(None, "drop tokens less likely than min_p x the most likely one; null: off")
    repetition_penalty: float = _f(1.0, "divide a positive logit of a token already in the prompt or response by it "
                                        "(multiply a negative one); 1: off. The sampling log-probs stay the "
                                        "policy's log softmax(logits / T) whatever top_p/top_k/min_p/this warp")
    generation_kwargs: dict | None = _f(None, "sampling settings for the engine only, over the ones above: temperature, "
                                              "top_p, top_k, min_p, repetition_penalty (TRL name; as in TRL the "
                                              "trainer's log-probs keep `temperature`); other keys are refused")
    rollout_engine: str = _f("rlvr", option_help.rollout_engine)
    max_rollout_batch_size: int = _f(64, "rlvr/hf engines: at most this many sequences are decoded at once (bounds the "
                                         "KV cache; more are run in chunks). vLLM schedules its own batches")
    fused_decoding: bool = _f(True, "rollout_engine=rlvr: decode Llama/Qwen2/Mistral models with the static step (fixed "
                                    "KV cache, weights cast once per rollout, q/k/v as one product, oneDNN-prepacked "
                                    "on CPU, CUDA graphs on CUDA; a copy of the weights while decoding; the model's "
                                    "logits to float rounding); false: the model's own forward at every position")
    async_generation: bool = _f(False, "one-step-off-policy rollouts (rollout_engine=vllm): step t+1's responses are "
                                       "generated while step t updates, from the weights step t started from; the "
                                       "importance-sampling correction accounts for the lag (docs/training.md)")
    tools: list[str] | None = _f(None, "python: the model may run Python while it answers (a ```python block runs in "
                                       "the code sandbox, its output shown in an ```output block, then generation "
                                       "resumes; variables persist within a response); or functions as tools, TRL's "
                                       "way (file.py:fn, module:fn, package.module.fn; from Python the callables): the "
                                       "prompt lists them through the chat template, the model's calls run in this "
                                       "process; the tool results' tokens are context, never trained on "
                                       "(docs/training.md, 'Tools'); null: no tools")
    environment_factory: list[str] | None = _f(None, "environments as tools, TRL's environment_factory: a class (or "
                                                     "a function returning an instance) made once per rollout, "
                                                     "file.py:Class or module:Class; or name=file.py:Class,... and "
                                                     "each row's 'environment' column picks one. reset(**row) starts "
                                                     "a rollout (its observation is appended to the prompt), its "
                                                     "public methods are the rollout's tools, get_reward() a reward "
                                                     "named after the class (docs/training.md, 'Environments'); "
                                                     "null: none")
    tool_timeout: float = _f(60.0, "with function tools: seconds a call may take; past it the call fails (its result "
                                   "says so)")
    max_tool_calling_iterations: int | None = _f(None, "with tools: rounds of tool calls per response at most (TRL's "
                                                       "name); null: until the model stops calling or the completion "
                                                       "budget is spent")
    tool_output_chars: int = _f(1024, "with tools: a tool result is cut to this many characters (head and tail kept)")
    tool_scheduling: str = _f("rounds", "with tools: rounds (TRL's loop: every row's turn, then every call, then every "
                                        "next turn) or rows (a row's calls start as soon as its turn ends and run in "
                                        "the background; the rows whose results are back are generated while other "
                                        "calls run, so a slow call holds back only its row; rollout_engine=rlvr or "
                                        "vllm, which seed each row: its tokens do not depend on the timing unless the "
                                        "engine's numerics depend on the batch)")

    def __post_init__(self) -> None:
        if self.prompts_per_step is not None and self.prompts_per_step < 1:
            _fail("prompts_per_step", self.prompts_per_step, "need at least 1 prompt per step")
        if self.num_generations < 2:
            _fail("num_generations", self.num_generations, "group-relative advantages need G >= 2")
        if self.generation_kwargs is not None:
            self._check_generation_kwargs()
        if self.max_completion_length < 1:
            _fail("max_completion_length", self.max_completion_length, "use a positive token count")
        if self.truncation not in TRUNCATION_MODES:
            _fail("truncation", self.truncation, f"choose one of {TRUNCATION_MODES}")
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            _fail("max_prompt_length", self.max_prompt_length, "use a positive token count, or null for no limit")
        if self.temperature <= 0:
            _fail("temperature", self.temperature, "training samples need temperature > 0")
        if not 0 < self.top_p <= 1:
            _fail("top_p", self.top_p, "use a value in (0, 1]")
        if isinstance(self.top_k, bool) or self.top_k < 0:
            _fail("top_k", self.top_k, "use 0 (off) or a positive number of tokens such as 50")
        if self.min_p is not None and not 0 <= self.min_p <= 1:
            _fail("min_p", self.min_p, "use a value in [0, 1] such as 0.05, or null (off)")
        if not self.repetition_penalty > 0:
            _fail("repetition_penalty", self.repetition_penalty, "use a value > 0: 1 is off, above 1 penalises repeats")
        if self.rollout_engine not in ROLLOUT_ENGINES:
            _fail("rollout_engine", self.rollout_engine, f"choose one of {sorted(ROLLOUT_ENGINES)}")
        if self.max_rollout_batch_size < 1:
            _fail("max_rollout_batch_size", self.max_rollout_batch_size, "use a positive number of sequences such as 64")
        if self.tools is not None:
            if not self.tools:
                _fail("tools", self.tools, "name at least one tool (python, or file.py:function), or null")
            if any(name in TOOLS for name in self.tools) and len(self.tools) > 1:
                _fail("tools", self.tools, f"the built-in {TOOLS[0]} tool is a tool of its own (its calls are "
                                           "```python blocks); give it alone, or give functions only")
        if self.environment_factory is not None:
            if not self.environment_factory:
                _fail("environment_factory", self.environment_factory, "name a class (file.py:Class), or null")
            if self.tools is not None and any(name in TOOLS for name in self.tools):
                _fail("environment_factory", self.environment_factory, f"an environment's methods are function "
                                                                       f"tools, which the built-in {TOOLS[0]} tool "
                                                                       "cannot be mixed with; drop tools=python")
        if not self.tool_timeout > 0:
            _fail("tool_timeout", self.tool_timeout, "use a positive number of seconds such as 60")
        if self.max_tool_calling_iterations is not None and (isinstance(self.max_tool_calling_iterations, bool)
                                                             or self.max_tool_calling_iterations < 1):
            _fail("max_tool_calling_iterations", self.max_tool_calling_iterations,
                  "use a positive number of rounds such as 4, or null (no limit)")
        if self.tool_scheduling not in TOOL_SCHEDULING:
            _fail("tool_scheduling", self.tool_scheduling, f"choose one of {TOOL_SCHEDULING}")
        if self.tool_output_chars < 16:
            _fail("tool_output_chars", self.tool_output_chars, "use at least 16 characters, such as 1024")


    def _check_generation_kwargs(self) -> None:
        kwargs = self.generation_kwargs
        if not isinstance(kwargs, dict):
            _fail("generation_kwargs", kwargs, "give a mapping, e.g. {top_p: 0.95, top_k: 50}")
        unknown = sorted(set(kwargs) - set(GENERATION_KWARGS))
        if unknown:
            _fail("generation_kwargs", kwargs, f"rlvr's engines take {', '.join(GENERATION_KWARGS)} here, not "
                  f"{', '.join(unknown)} (the response length is max_completion_length, stop tokens come from the "
                  "tokenizer)")
        try:
            Sampling(**{"temperature": self.temperature, **kwargs})
        except (TypeError, ValueError) as error:
            _fail("generation_kwargs", kwargs, str(error))

    @property
    def sampling_settings(self) -> dict:
        """The engine's sampling settings: the options above, generation_kwargs over them (as TRL's update)."""
        own = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "min_p": self.min_p,
               "repetition_penalty": self.repetition_penalty}
        return {**own, **(self.generation_kwargs or {})}


@dataclass(frozen=True)
class RewardConfig:
    reward_funcs: list[str] = _f(["accuracy"], option_help.reward_funcs)
    reward_weights: list[float] | None = _f(None, "one weight per reward function (default all 1)")
    verifier_workers: int = _f(2, "math-verify worker processes")
    verifier_timeout: float = _f(5.0, "seconds per verification; a timeout scores 0 and is counted")
    answer_extraction: str = _f("flexible", "boxed: last \\boxed{}, '#### N' or 'the answer is'; flexible: also the last number")
    reward_timeout: float = _f(600.0, "seconds one call of a reward function may take; past it the call counts "
                                      "as failed (see max_reward_error_frac) and its values are None")
    code_sandbox: str = _f("namespaces", "how code rewards run programs: namespaces (isolated: no network, a "
                                         "read-only file system, own PIDs; refused at start where the kernel "
                                         "cannot) or limits_only (resource limits only, knowingly); "
                                         "docs/code_rewards.md")
    code_extraction: str = _f("auto", "the program in a completion: open-r1 (last ```python block), verl (text "
                                      "after the last ```python) or auto (each code reward its project's)")
    max_reward_error_frac: float = _f(0.5, "stop the run when more than this fraction of a reward function's calls "
                                           "failed over the last 10 steps (a function failing at every call of "
                                           "the first step stops it at once); 1 never stops")

    def __post_init__(self) -> None:
        if self.reward_weights is not None and any(abs(w) > 1e6 for w in self.reward_weights):
            _fail("reward_weights", self.reward_weights, "use weights of at most 1e6 in size (e.g. 1 and 0.1)")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            _fail("reward_weights", self.reward_weights,
                  f"give one weight per reward function ({len(self.reward_funcs)}: {self.reward_funcs})")
        if self.answer_extraction not in EXTRACTION_MODES:
            _fail("answer_extraction", self.answer_extraction, f"choose one of {EXTRACTION_MODES}")
        if self.code_sandbox not in SANDBOX_MODES:
            _fail("code_sandbox", self.code_sandbox, f"choose one of {SANDBOX_MODES}")
        if self.code_extraction not in CODE_EXTRACTIONS:
            _fail("code_extraction", self.code_extraction, f"choose one of {CODE_EXTRACTIONS}")
        if self.verifier_workers < 1:
            _fail("verifier_workers", self.verifier_workers, "use at least 1 worker process")
        if self.verifier_timeout <= 0:
            _fail("verifier_timeout", self.verifier_timeout, "use a positive number of seconds")
        if self.reward_timeout <= 0:
            _fail("reward_timeout", self.reward_timeout, "use a positive number of seconds (600: ten minutes)")
        if not 0 <= self.max_reward_error_frac <= 1:
            _fail("max_reward_error_frac", self.max_reward_error_frac,
                  "use a fraction in [0, 1] (0.5: stop when most calls fail; 1: never stop)")


@dataclass(frozen=True)
class AlgorithmConfig:
    algo: str = _f("grpo", option_help.algo)
    advantage_estimator: str = _f("grpo", option_help.advantage_estimator)
    scale_rewards: str = _f("group", "group | batch | none (verl: norm_adv_by_std_in_grpo)")
    multi_objective_aggregation: str = _f("sum_then_normalize", "several reward functions: sum_then_normalize (the "
                                          "weighted sum's advantage) | normalize_then_sum (GDPO: each function's "
                                          "rewards normalised in its group, summed with the weights, then "
                                          "normalised over the batch) (TRL name)")
    advantage_eps: float = _f(1e-6, "epsilon added to the std (verl 1e-6; TRL 1e-4); >= 0 (a negative one is refused)")
    loss_type: str = _f("token_mean", option_help.loss_type)
    policy_loss: str = _f("clip", option_help.policy_loss)
    epsilon: float = _f(0.2, "lower clip range (verl: clip_ratio_low)")
    epsilon_high: float | None = _f(None, "upper clip range, default = epsilon (verl: clip_ratio_high; DAPO 0.28)")
    dual_clip: float | None = _f(None, "dual-clip constant c for A<0 (verl: clip_ratio_c = 3.0); null disables")
    importance_sampling_level: str = _f("token", "token | sequence (GSPO)")
    beta: float = _f(0.0, "KL coefficient (k3 estimator); 0 loads no reference model (verl: kl_loss_coef)")
    use_bias_correction_kl: bool = _f(False, "multiply the per-token KL by the (differentiable) importance ratio, "
                                             "TRL's unbiased reverse-KL gradient (DeepSeek-V3.2); it changes the "
                                             "gradient even on-policy. TRL name; TRL's default true (preset=trl), "
                                             "rlvr's false (verl's k3 KL loss)")
    entropy_coef: float = _f(0.0, "entropy bonus, TRL's: the loss gets - entropy_coef x the policy's entropy averaged "
                                  "over each micro-batch's sampled response tokens, divided by the micro-batches of "
                                  "the optimiser step (whatever loss_type; anchors excluded); 0: off. verl's "
                                  "actor.entropy_coeff aggregates with loss_agg_mode instead")
    num_iterations: int = _f(1, "mu: passes over each rollout batch (verl: ppo_epochs)")
    steps_per_generation: int | None = _f(None, "micro-batches (of per_device_train_batch_size completions) each process "
                                                "makes of one step's completions, TRL's meaning: optimiser steps per "
                                                "pass = steps_per_generation / gradient_accumulation_steps; groups "
                                                "are never split. null: gradient_accumulation_steps, or (rlvr, with "
                                                "per_device_train_batch_size) what covers the step")
    mask_truncated_completions: bool = _f(False, "exclude responses that hit max_completion_length from the loss")
    dynamic_sampling: bool = _f(False, "DAPO: drop uniform-reward groups and refill from new prompts")
    max_num_gen_batches: int = _f(4, "dynamic sampling: at most this many generation rounds per step (verl name)")

    def __post_init__(self) -> None:
        if self.algo not in PRESETS:
            _fail("algo", self.algo, f"choose one of {sorted(PRESETS)}")
        for name, value, valid in (("advantage_estimator", self.advantage_estimator, ADVANTAGE_ESTIMATOR_NAMES),
                                   ("policy_loss", self.policy_loss, POLICY_LOSS_NAMES)):
            if value not in valid and not is_function_spec(value):
                _fail(name, value, f"choose one of {sorted(valid)}, or your own function: {FUNCTION_SPEC_FORMS} "
                      "(docs/extending.md)")
        if self.scale_rewards not in SCALE_REWARDS:
            _fail("scale_rewards", self.scale_rewards, f"choose one of {SCALE_REWARDS}")
        resolve_aggregation(self.loss_type)
        try:
            resolve_policy_loss(self.policy_loss, self.loss_type)
        except ValueError as error:
            _fail("loss_type", self.loss_type, str(error))
        if self.multi_objective_aggregation not in MULTI_OBJECTIVE_AGGREGATIONS:
            _fail("multi_objective_aggregation", self.multi_objective_aggregation,
                  f"choose one of {MULTI_OBJECTIVE_AGGREGATIONS}")
        if self.importance_sampling_level not in IMPORTANCE_LEVELS:
            _fail("importance_sampling_level", self.importance_sampling_level, f"choose one of {IMPORTANCE_LEVELS}")
        if not 0 <= self.epsilon < 1:
            _fail("epsilon", self.epsilon, "clip ranges must be >= 0 (epsilon < 1)")
        if self.epsilon_high is not None and self.epsilon_high < 0:
            _fail("epsilon_high", self.epsilon_high, "clip ranges must be >= 0 (null: epsilon_high = epsilon)")
        if self.dual_clip is not None and self.dual_clip <= 1:
            _fail("dual_clip", self.dual_clip, "use a constant > 1 (verl default 3.0) or null")
        if self.beta < 0:
            _fail("beta", self.beta, "use beta >= 0")
        if self.entropy_coef < 0:
            _fail("entropy_coef", self.entropy_coef, "use entropy_coef >= 0 (0: off; a bonus such as 0.001)")
        if self.advantage_eps < 0:
            _fail("advantage_eps", self.advantage_eps,
                  "use eps >= 0 (e.g. 1e-6): a negative eps can flip the sign of advantages of groups with std < |eps|")
        if self.num_iterations < 1 or (self.steps_per_generation or 1) < 1 or self.max_num_gen_batches < 1:
            _fail("num_iterations/steps_per_generation/max_num_gen_batches",
                  (self.num_iterations, self.steps_per_generation, self.max_num_gen_batches), "each must be >= 1")

    @property
    def aggregation(self) -> str:
        return resolve_aggregation(self.loss_type)

    @property
    def policy(self) -> str:
        """The policy loss run: ``policy_loss``, or the one TRL's loss_type cispo / sapo / vespo names."""
        return resolve_policy_loss(self.policy_loss, self.loss_type)


OPTIMIZERS = ("adamw_torch_fused", "adamw_torch")


@dataclass(frozen=True)
class OptimConfig:
    optim: str = _f("adamw_torch_fused", "AdamW's implementation (TRL/transformers names): adamw_torch_fused (TRL's "
                                         "default: one kernel per tensor, no parameter-sized temporaries) | "
                                         "adamw_torch (torch's multi-tensor foreach)")
    learning_rate: float = _f(3e-5, "AdamW learning rate, > 0 (verl: actor.optim.lr)")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    adam_beta1: float = _f(0.9, "AdamW beta1")
    adam_beta2: float = _f(0.99, "AdamW beta2")
    adam_epsilon: float = _f(1e-8, "AdamW epsilon")
    max_grad_norm: float = _f(1.0, "clip the global gradient norm (logged pre-clip); 0 disables (< 0 is refused)")
    lr_scheduler_type: str = _f("constant_with_warmup", "transformers scheduler name: constant_with_warmup, linear, cosine, "
                                                        "cosine_with_min_lr, ...")
    lr_scheduler_kwargs: dict | None = _f(None, "the scheduler's own arguments, as transformers takes them, e.g. "
                                                "{min_lr_rate: 0.1} for cosine_with_min_lr (TRL name)")
    warmup_ratio: float = _f(0.0, "fraction of optimiser steps spent warming up")
    warmup_steps: float = _f(0, "optimiser steps spent warming up; below 1, a fraction of the run (transformers 5's "
                                "meaning, which replaces warmup_ratio)")
    per_device_train_batch_size: int | None = _f(None, "completions per forward/backward micro-batch on each process, "
                                                       "TRL's meaning (with gradient_accumulation_steps it sets the "
                                                       "optimiser batch; preset=trl: 8, and it sets the step's size). "
                                                       "null: what steps_per_generation leaves (the whole step)")
    max_tokens_per_micro_batch: int | None = _f(None, "pack micro-batches up to this many padded response tokens "
                                                      "instead of a fixed row count (verl: ppo_max_token_len_per_gpu "
                                                      "with use_dynamic_bsz); with per_device_train_batch_size both apply")
    lm_head_chunk_tokens: int = _f(0, "log-probs from the last hidden states this many tokens at a time, so no "
                                      "[n, T, V] logits exist (exact; 1024 bounds a Qwen block to 0.6 GB; 0: plain logits)")
    gradient_accumulation_steps: int | None = _f(None, "micro-batches per optimiser step (TRL's meaning; preset=trl: 1). "
                                                       "null: every micro-batch of the step (one optimiser step per "
                                                       "pass), or 1 when steps_per_generation is given")

    def __post_init__(self) -> None:
        if self.optim not in OPTIMIZERS:
            _fail("optim", self.optim, f"use one of {', '.join(OPTIMIZERS)}")
        if self.learning_rate <= 0:
            _fail("learning_rate", self.learning_rate, "use a positive learning rate such as 1e-6")
        if self.max_grad_norm < 0:
            _fail("max_grad_norm", self.max_grad_norm, "use a positive norm such as 1.0, or 0 to disable clipping")
        if not 0 <= self.warmup_ratio < 1:
            _fail("warmup_ratio", self.warmup_ratio, "use a fraction in [0, 1)")
        if self.warmup_steps < 0 or (self.warmup_steps >= 1 and not float(self.warmup_steps).is_integer()):
            _fail("warmup_steps", self.warmup_steps, "use a whole number of optimiser steps, or a fraction below 1")
        if self.warmup_steps and self.warmup_ratio:
            _fail("warmup_steps", self.warmup_steps, "warmup_ratio is set too: give one of the two")
        if self.lm_head_chunk_tokens < 0:
            _fail("lm_head_chunk_tokens", self.lm_head_chunk_tokens, "use 0 (plain logits) or a chunk such as 1024")
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "max_tokens_per_micro_batch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                _fail(name, value, "use a positive integer or null")


# experiment trackers (TRL's report_to names); src/rlvr/run/trackers.py has a class for each but none
TRACKER_NAMES = ("none", "tensorboard", "wandb", "trackio", "mlflow")


PRESET_NAMES = ("rlvr", "trl")
SAVE_STRATEGIES = ("steps", "epoch", "best", "no")
LOG_LEVELS = ("passive", "debug", "info", "warning", "error", "critical")
LOGGING_STRATEGIES = ("steps", "epoch", "no")
TOKENS_SEEN = ("no", "all", "non_padding")  # transformers' include_num_input_tokens_seen (true: all, false: no)
HUB_STRATEGIES = ("end", "every_save", "checkpoint", "all_checkpoints")


@dataclass(frozen=True)
class RunConfig:
    preset: str = _f("rlvr", "whose defaults and semantics: rlvr | trl (TRL 1.16's: its defaults, its batch and "
                             "step arithmetic, string prompts as raw text). Set by itself to trl when the config "
                             "uses a name only TRL has (model_name_or_path, num_train_epochs, ...) unless given; "
                             "docs/training.md 'From TRL'")
    output_dir: str | None = _f(None, "run directory (default runs/<algo>-<time>)")
    max_steps: int = _f(16, "training steps (one rollout batch each; preset=trl: TRL's optimiser steps); -1: "
                            "num_train_epochs decides")
    num_train_epochs: float | None = _f(None, "with max_steps=-1: passes over the training prompts, as TRL counts "
                                              "them (TRL name; preset=trl's default 3)")
    seed: int = _f(0, "seed for data order, sampling and initialisation, in [0, 2**63 - 1]")
    save_strategy: str = _f("steps", "steps (every save_steps and at the end) | epoch (at the end of every epoch and "
                                     "of training) | best (when an evaluation improves metric_for_best_model) | no "
                                     "(no checkpoint; a signal still saves one) (TRL name)")
    save_steps: float = _f(50, "checkpoint every K steps and at the end (0: only at the end; a fraction below 1: of "
                               "max_steps, as transformers); bounds what a crash loses to K steps (Ctrl-C and SIGTERM "
                               "save at once)")
    save_total_limit: int | None = _f(2, "keep the newest K checkpoints (null: all)")
    metric_for_best_model: str | None = _f(None, "save_strategy=best: the evaluation metric whose improvement saves a "
                                                 "checkpoint, NAME for the step's eval/NAME (transformers' eval_NAME), "
                                                 "e.g. reward or gsm8k-100/pass@1 (TRL name)")
    greater_is_better: bool | None = _f(None, "save_strategy=best: whether a higher metric_for_best_model is better "
                                              "(null: true unless the name ends in loss, as transformers) (TRL name)")
    resume: bool = _f(False, "continue from the newest checkpoint in output_dir")
    resume_from_checkpoint: str | None = _f(None, "continue from this checkpoint folder, OUTPUT_DIR/checkpoint-N "
                                                  "(TRL/transformers name); output_dir defaults to its run folder")
    force_resume: bool = _f(False, "resume even if options that change the trajectory differ, or metrics.jsonl "
                                   "lacks steps (logged)")
    overwrite_output_dir: bool = _f(False, "start over in an output_dir that holds a run: its checkpoints and "
                                           "metrics are replaced (TRL/transformers name)")
    log_completions: bool = _f(True, "write samples.jsonl")
    num_completions_to_log: int | None = _f(8, "responses written to samples.jsonl per step (null: all, TRL's "
                                                "num_completions_to_print: null)")
    progress_bar: bool = _f(True, "show a progress bar")
    grad_spike_factor: float = _f(5.0, "count a grad-norm spike when it exceeds this many times the running median")
    logprob_mismatch_warn: float = _f(0.1, "warn, naming the engine and the usual causes, and set "
                                           "rollout/logprob_mismatch_alarm, at a step whose mean |sampler - trainer| "
                                           "log-prob (rollout/logprob_mismatch) exceeds this, or whose IS correction "
                                           "truncated or masked over half its tokens; 0: off")
    max_logprob_mismatch: float | None = _f(None, "stop the run at a step whose rollout/logprob_mismatch exceeds "
                                                  "this (null: never)")
    max_skipped_steps: int = _f(3, "stop when this many optimiser steps in a row had a non-finite loss or gradient")
    nproc: int = _f(1, "processes on this machine (rlvr train nproc=N launches torchrun); under torchrun leave 1")
    parallelism: str = _f("ddp", "how ranks share the policy: ddp (a full copy each) | fsdp (FSDP2 fully_shard)")
    ddp_timeout: int = _f(1800, "seconds a collective may wait (rank 0 alone evaluates and saves meanwhile) (TRL name)")
    report_to: list[str] = _f(["none"], "experiment trackers that also get the metrics, config and samples "
                                        "(rank 0): none | tensorboard | wandb | trackio | mlflow, several as a "
                                        "comma list ([]: none, as transformers writes it); each needs its package (pip install "
                                        "'rlvr[wandb]') (TRL name)")
    run_name: str | None = _f(None, "the run's name in the trackers (default: the output_dir folder's name) (TRL name)")
    logging_dir: str | None = _f(None, "TensorBoard event folder (default output_dir/runs) (TRL name)")
    logging_strategy: str = _f("steps", "when TRL's log (trainer_state.json's log_history, the trackers' TRL "
                                        "series, a TrainerCallback's on_log) gets an entry: steps (every "
                                        "logging_steps) | epoch (at each epoch's end) | no; metrics.jsonl keeps "
                                        "every step (TRL name)")
    logging_steps: float = _f(1, "TRL's log: an entry every N steps (preset=trl: optimiser steps, TRL's default "
                                 "10), its values averaged over them as TRL averages; a fraction below 1: of "
                                 "max_steps, rounded up (TRL name)")
    logging_first_step: bool = _f(False, "TRL's log: also an entry after the first step (TRL name)")
    include_num_input_tokens_seen: str = _f("no", "no | all | non_padding (true: all): TRL's log entries also get "
                                                  "num_input_tokens_seen (prompt + completion tokens so far, TRL's "
                                                  "count; both modes count the same) and train_tokens_per_second "
                                                  "(TRL name)")
    skip_memory_metrics: bool = _f(True, "false: the end-of-training entry of TRL's log gets transformers' memory "
                                         "metrics (init_mem_cpu_alloc_delta, train_mem_cpu_peaked_delta, ...; "
                                         "measured as transformers does, needs psutil) (TRL name)")
    log_level: str = _f("passive", "rlvr's log level: debug | info | warning | error | critical; passive: info "
                                   "(TRL name)")
    push_to_hub: bool = _f(False, "upload the final model (and, with hub_strategy, checkpoints) to the Hugging Face Hub "
                                  "at hub_model_id; refused at start-up when offline or without a token (TRL name)")
    hub_model_id: str | None = _f(None, "owner/name of the Hub repository (default: the output_dir folder's name) "
                                        "(TRL name)")
    hub_strategy: str = _f("every_save", "push_to_hub: end (the final model) | every_save | checkpoint | "
                                         "all_checkpoints (also each checkpoint as it is saved) (TRL name)")
    hub_private_repo: bool | None = _f(None, "push_to_hub: create the repository private (null: the Hub's default) "
                                             "(TRL name)")

    def __post_init__(self) -> None:
        if self.preset not in PRESET_NAMES:
            _fail("preset", self.preset, f"choose one of {PRESET_NAMES}")
        if self.max_steps == -1:
            if self.num_train_epochs is None or not self.num_train_epochs > 0:
                _fail("num_train_epochs", self.num_train_epochs, "max_steps=-1 trains for num_train_epochs epochs: "
                      "set num_train_epochs > 0 (e.g. 1), or set max_steps")
        elif self.max_steps < 1:
            _fail("max_steps", self.max_steps, "train for at least 1 step (or -1 with num_train_epochs)")
        if self.save_strategy not in SAVE_STRATEGIES:
            _fail("save_strategy", self.save_strategy, f"choose one of {SAVE_STRATEGIES}")
        if self.log_level not in LOG_LEVELS:
            _fail("log_level", self.log_level, f"choose one of {LOG_LEVELS}")
        self._check_logging()
        if self.hub_strategy not in HUB_STRATEGIES:
            _fail("hub_strategy", self.hub_strategy, f"choose one of {HUB_STRATEGIES}")
        if not 0 <= self.seed <= MAX_SEED:
            _fail("seed", self.seed, f"use an integer in [0, 2**63 - 1 = {MAX_SEED}] (torch.manual_seed "
                                     "overflows past 64 bits), e.g. seed=0")
        if self.save_steps < 0 or (self.save_steps > 1 and not float(self.save_steps).is_integer()):
            _fail("save_steps", self.save_steps, "use 0 (save at the end), a whole number of steps, or a fraction "
                  "below 1 of max_steps")
        self._check_best()
        if self.grad_spike_factor <= 1:
            _fail("grad_spike_factor", self.grad_spike_factor, "use a factor > 1 (e.g. 5)")
        if self.logprob_mismatch_warn < 0 or (self.max_logprob_mismatch is not None and self.max_logprob_mismatch <= 0):
            _fail("logprob_mismatch_warn/max_logprob_mismatch", (self.logprob_mismatch_warn, self.max_logprob_mismatch),
                  "use thresholds > 0 in nats (0 turns the warning off, null the stop)")
        if self.max_skipped_steps < 1:
            _fail("max_skipped_steps", self.max_skipped_steps, "use a positive count, e.g. 3")
        if self.resume_from_checkpoint is not None and (self.overwrite_output_dir or not self.resume_from_checkpoint):
            _fail("resume_from_checkpoint", self.resume_from_checkpoint, "pass a checkpoint folder to continue from, "
                  "without overwrite_output_dir=true (which starts the run over)")
        if self.resume and self.overwrite_output_dir:
            _fail("overwrite_output_dir", True, "resume=true continues the run and overwrite_output_dir=true starts it "
                  "over: pass one of them")
        if self.nproc < 1:
            _fail("nproc", self.nproc, "use 1 (or launch with torchrun) or the number of processes, e.g. 2")
        if self.ddp_timeout < 1:
            _fail("ddp_timeout", self.ddp_timeout, "use a positive number of seconds, e.g. 1800")
        unknown = [name for name in self.report_to if name not in TRACKER_NAMES]
        if unknown:  # [] is none: transformers turns report_to=none into []
            _fail("report_to", self.report_to, f"name trackers among {', '.join(TRACKER_NAMES)} (a comma list, "
                  "e.g. report_to=tensorboard,wandb), or none")
        if "none" in self.report_to and len(set(self.report_to)) > 1:
            _fail("report_to", self.report_to, "none means no tracker: drop none, or give report_to=none alone")
        if self.parallelism not in ("ddp", "fsdp"):
            _fail("parallelism", self.parallelism, "choose ddp or fsdp")
        if self.save_total_limit is not None and self.save_total_limit < 1:
            _fail("save_total_limit", self.save_total_limit, "keep at least 1 checkpoint, or null for all")

    def _check_best(self) -> None:
        """save_strategy=best needs metric_for_best_model, as transformers requires; rlvr reads the metric for that
        alone (transformers also tracks it for load_best_model_at_end, which rlvr does not do)."""
        if self.save_strategy == "best" and not self.metric_for_best_model:
            _fail("metric_for_best_model", self.metric_for_best_model, "save_strategy=best saves when an evaluation "
                  "improves this metric: name one (e.g. metric_for_best_model=reward), as transformers requires")
        for name in ("metric_for_best_model", "greater_is_better"):
            if self.save_strategy != "best" and getattr(self, name) is not None:
                _fail(name, getattr(self, name), f"rlvr reads it only with save_strategy=best (the checkpoint saved "
                      f"when an evaluation improves the metric), not with save_strategy={self.save_strategy}; "
                      "load_best_model_at_end is not in rlvr: drop it, or set save_strategy=best")

    def _check_logging(self) -> None:
        """TRL's log options: transformers' values (logging_steps: a whole number of steps or a fraction below 1)."""
        if self.logging_strategy not in LOGGING_STRATEGIES:
            _fail("logging_strategy", self.logging_strategy, f"choose one of {LOGGING_STRATEGIES}")
        if not self.logging_steps > 0 or (self.logging_steps > 1 and not float(self.logging_steps).is_integer()):
            _fail("logging_steps", self.logging_steps, "use a whole number of steps (e.g. 10), or a fraction below 1 "
                  "of max_steps")
        if self.include_num_input_tokens_seen not in TOKENS_SEEN:
            _fail("include_num_input_tokens_seen", self.include_num_input_tokens_seen,
                  f"choose one of {TOKENS_SEEN} (true: all, false: no)")
