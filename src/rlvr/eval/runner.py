"""Benchmark evaluation: n samples per problem → verify → unbiased pass@k per dataset.

    for each dataset, for each chunk of ⌊batch_size / n⌋ problems not yet in <out>.problems.jsonl:
        sample n responses per problem (DecodeEngine; row seeds from (seed, dataset, id, j))
        [greedy: one temperature-0 response per problem]
        extract the final answer, verify against the gold in a VerifierPool → c correct of n
        [diversity: mean pairwise embedding distance of the n responses]
        append one line per problem (flushed: an interrupted run resumes where it stopped)
    summary over every problem → <out> (JSON, atomic), printed as a table

Prompts are built exactly as in training (rlvr.data.PromptFormat: the tokenizer's chat
template, same default instruction), so a trained policy is evaluated on the format it learned.
A verifier timeout scores the sample wrong and is counted (``timeouts``).

Called as ``evaluate(model, tokenizer, specs, EvalSettings(n=16, ks=[1, 4, 16], temperature=1.0, top_p=1.0,
max_completion_length=1024), out_path="eval.json")``: the settings are one validated object.

Output (the report tool reads exactly these keys):
    {"model": str,
     "settings": {"n", "k": [...], "temperature", "top_p", "max_completion_length", "seed",
                  "instruction", "system_prompt", "greedy", "answer_extraction"[, "chat_template_kwargs"]},
     "datasets": {SPEC: {"num_problems", "pass@k": {"1": float, ...}, "greedy_accuracy": float|null,
                         "frac_uniform", "frac_all_wrong", "diversity": float|null, "timeouts": int}}}
``frac_uniform``: problems whose n samples are all right or all wrong (no GRPO signal);
``frac_all_wrong``: problems with c = 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm.auto import tqdm

from rlvr.data import AUTO_INSTRUCTION, PromptFormat, load_rows
from rlvr.data.benchmarks import BENCHMARKS, benchmark_spec, load_benchmark
from rlvr.data.input_limits import check_lengths
from rlvr.data.prompts import has_chat_template
from rlvr.eval.code_scoring import code_reward_name, score_code
from rlvr.eval.passk import mean_pass_at_k
from rlvr.eval.problems_file import ProblemsFile, problems_path
from rlvr.eval.seeding import row_seed
from rlvr.models import eos_token_ids
from rlvr.models.embedding import require_embedding_packages
from rlvr.models.loading import position_limit
from rlvr.rewards import DEFAULT_EXTRACTION, EXTRACTION_MODES, SANDBOX_MODES, VerifierPool, extract_answer
from rlvr.rewards.sandbox.notebook import OUTPUT_CHARS, PythonNotebook
from rlvr.rollout.decode_engine import DecodeEngine
from rlvr.rollout.sampling import GREEDY, Sampling
from rlvr.rollout.tool_loop import MarkdownPython, ToolLoop, notebook_runner

VERIFIER_WORKERS = 2
VERIFIER_TIMEOUT_S = 5.0


# ----------------------------------------------------------------------------------- datasets
def load_eval_rows(spec: str) -> list[dict]:
    """Rows of one spec: a registered benchmark ('math-500', 'aime24:path=FILE') or any load_rows spec."""
    found = benchmark_spec(spec)
    if found is not None:
        name, path = found
        return load_benchmark(name, path=path)
    try:
        return load_rows(spec)
    except ValueError as error:
        if "not a known source" in str(error):
            raise ValueError(f"{error}; or a benchmark name: {', '.join(BENCHMARKS)}") from error
        raise


def load_eval_datasets(specs: Sequence[str], *, limit: int | None = None) -> dict[str, list[dict]]:
    """{spec: its first `limit` rows} for every spec, in the order given."""
    if isinstance(specs, str) or not specs:
        raise ValueError(f"specs must be a non-empty list of dataset specs, got {specs!r}")
    datasets: dict[str, list[dict]] = {}
    for spec in specs:
        spec = spec.strip() if isinstance(spec, str) else spec
        if spec in datasets:
            raise ValueError(f"dataset {spec!r} is given twice; list each dataset once")
        datasets[spec] = load_eval_rows(spec)[:limit]
    return datasets


# ----------------------------------------------------------------------------------- settings
def _positive_int(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class EvalSettings:
    """How an evaluation samples, scores and runs: validated once, on construction (ValueError naming the
    setting and the fix); ``ks`` becomes a sorted tuple without repeats.

    Attributes:
        n: samples per problem; ks: the k of each pass@k (each ≤ n).
        temperature, top_p, max_completion_length: sampling settings (temperature 0 = greedy).
        instruction, system_prompt: prompt format, as in training (None = none; ``auto``: rlvr's instruction
            for plain-string questions that carry none, rlvr.data.prompts).
        greedy: also score one temperature-0 response per problem (``greedy_accuracy``).
        answer_extraction: 'boxed' or 'flexible' (also the last number), see rlvr.rewards.extract_answer.
        seed: sampling seed; problem p's sample j uses row_seed(seed, dataset, p's id, j).
        batch_size: sequences per generate call (memory bound; results do not depend on it).
        diversity: per-problem mean pairwise embedding distance (needs sentence-transformers).
        limit: evaluate only the first `limit` problems of each dataset.
        model_name: recorded as "model" (None: the model's name_or_path).
        chat_template_kwargs: extra chat-template variables (e.g. {"enable_thinking": False}), as in
            training (``chat_template_kwargs``).
        raw_strings: feed plain-string questions as raw text (as training does with preset=trl); a
            tokenizer without a chat template always does.
        log_samples: also append every sampled response (completion, extracted answer, correct,
            verifier error) to ``<out_path>.samples.jsonl``, as lm-eval's ``--log_samples``: to
            read what a score is made of. A resumed evaluation logs the problems it runs.
        code_sandbox: how code datasets' programs run (``namespaces`` | ``limits_only``, docs/code_rewards.md);
            a code dataset (HumanEval's ``test``/``entry_point`` or open-r1's ``verification_info`` columns) is
            scored by running each response on its tests (``rlvr.eval.code_scoring``).
    """

    n: int
    ks: tuple[int, ...]
    temperature: float
    top_p: float
    max_completion_length: int
    instruction: str | None = AUTO_INSTRUCTION
    system_prompt: str | None = None
    greedy: bool = False
    answer_extraction: str = DEFAULT_EXTRACTION
    seed: int = 0
    batch_size: int = 64
    diversity: bool = False
    limit: int | None = None
    model_name: str | None = None
    chat_template_kwargs: dict | None = None
    raw_strings: bool = False
    log_samples: bool = False
    code_sandbox: str = "namespaces"
    tools: str | None = None  # "python": the sandboxed Python tool during generation, as in training
    max_tool_calling_iterations: int | None = None
    tool_output_chars: int = OUTPUT_CHARS

    def __post_init__(self) -> None:
        _positive_int(self.n, "n")
        _positive_int(self.max_completion_length, "max_completion_length")
        _positive_int(self.batch_size, "batch_size")
        if self.limit is not None:
            _positive_int(self.limit, "limit")
        if not self.ks:
            raise ValueError("ks is empty; give at least one k, e.g. [1]")
        for k in self.ks:
            _positive_int(k, "every k")
            if k > self.n:
                raise ValueError(f"k={k} is larger than n={self.n}: pass@k needs at least k samples per problem; "
                                 f"raise n to {k} or drop k={k}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy samples), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.answer_extraction not in EXTRACTION_MODES:
            raise ValueError(f"answer_extraction must be one of {EXTRACTION_MODES}, got {self.answer_extraction!r}")
        if self.code_sandbox not in SANDBOX_MODES:
            raise ValueError(f"code_sandbox must be one of {SANDBOX_MODES}, got {self.code_sandbox!r}")
        if self.tools not in (None, "python"):
            raise ValueError(f"tools must be 'python' (the sandboxed Python tool) or None, got {self.tools!r}")
        if self.max_tool_calling_iterations is not None:
            _positive_int(self.max_tool_calling_iterations, "max_tool_calling_iterations")
        object.__setattr__(self, "ks", tuple(sorted(set(self.ks))))
        if self.chat_template_kwargs is not None:
            object.__setattr__(self, "chat_template_kwargs", dict(self.chat_template_kwargs))

    def prompt_format(self) -> PromptFormat:
        """The prompt format these settings ask for (as training builds it: with tools and no system prompt of
        the user's, a system prompt saying how to call them, where the chat template can hold it)."""
        system = self.system_prompt
        if self.tools is not None and system is None and not self.raw_strings:
            system = MarkdownPython.instruction
        return PromptFormat(system_prompt=system, instruction=self.instruction,
                            chat_template_kwargs=self.chat_template_kwargs, raw_strings=self.raw_strings)


def _model_name(model) -> str:
    name = getattr(model, "name_or_path", "") or getattr(getattr(model, "config", None), "_name_or_path", "")
    return str(name) or type(model).__name__


def resolve_settings(settings: EvalSettings, model, tokenizer) -> EvalSettings:
    """``settings`` as run on ``model``: ``model_name`` defaults to the model's name, and a tokenizer without
    a chat template always feeds raw strings."""
    return replace(settings, model_name=settings.model_name or _model_name(model),
                   raw_strings=settings.raw_strings or not has_chat_template(tokenizer))


def dtype_name(dtype) -> str:
    """'float32', 'bfloat16', ... for a torch.dtype (the form recorded in the problems file)."""
    return str(dtype).removeprefix("torch.")


def result_settings(settings: EvalSettings, *, dtype: str) -> dict:
    """Everything that changes a problem's result: the problems file's header, compared on resume.

    ``settings.model_name`` is recorded as given (evaluate resolves it first, resolve_settings); ``dtype``:
    the model's parameters' (dtype_name).
    Not in it: k (pass@k is recomputed from the counts), batch_size (row seeds make samples independent
    of it), limit (it selects problems, it does not change one), log_samples, the device (last-bit float
    differences only, as batch size), and the data (each record carries its row's fingerprint).
    ``chat_template_kwargs`` and ``raw_strings`` are in it only when given, so files written before they
    existed resume.
    """
    s = settings
    header = {"model": s.model_name, "dtype": dtype, "n": s.n, "temperature": s.temperature, "top_p": s.top_p,
              "max_completion_length": s.max_completion_length, "seed": s.seed, "instruction": s.instruction,
              "system_prompt": s.system_prompt, "greedy": s.greedy, "answer_extraction": s.answer_extraction,
              "diversity": s.diversity}
    header |= {"chat_template_kwargs": dict(s.chat_template_kwargs)} if s.chat_template_kwargs else {}
    return header | ({"raw_strings": True} if s.raw_strings else {}) | _tool_settings(s)


def _tool_settings(s: EvalSettings) -> dict:
    """The tool settings, only when tools are on (files written before them resume)."""
    return ({"tools": s.tools, "max_tool_calling_iterations": s.max_tool_calling_iterations,
             "tool_output_chars": s.tool_output_chars} if s.tools is not None else {})


def output_settings(settings: EvalSettings) -> dict:
    """The ``settings`` block of the output JSON (module docstring)."""
    s = settings
    block = {"n": s.n, "k": list(s.ks), "temperature": s.temperature, "top_p": s.top_p,
             "max_completion_length": s.max_completion_length, "seed": s.seed, "instruction": s.instruction,
             "system_prompt": s.system_prompt, "greedy": s.greedy, "answer_extraction": s.answer_extraction}
    return (block | ({"chat_template_kwargs": dict(s.chat_template_kwargs)} if s.chat_template_kwargs else {})
            | _tool_settings(s))


def problem_fingerprint(row: dict) -> str:
    """16 hex digits of SHA-256 over the row's prompt and gold answer (a changed dataset is noticed on resume)."""
    key = json.dumps([row["prompt"], row["answer"]], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def check_out_path(out_path: str | os.PathLike) -> None:
    """ValueError naming the fix unless the summary and its side files can be written at ``out_path``.

    Run before any work: a bad output otherwise fails only when the summary is written at the end.
    """
    out = Path(out_path)
    for path in (out, problems_path(out), samples_path(out)):
        if path.is_dir():
            raise ValueError(f"the output {out}: {path} is a directory, but the summary and its .problems.jsonl "
                             f"are files; give a file name, e.g. --out {out / 'eval.json'}")
    folder = out.absolute().parent
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"the output {out}: {existing} is a file, not a folder; choose an --out inside a folder "
                         "(or move that file away)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"the output {out}: cannot write in {existing} (permission denied); choose an --out in a "
                         "folder you can write to, or fix its permissions")
    problems = problems_path(out)
    if problems.exists() and not os.access(problems, os.W_OK):
        raise ValueError(f"the output {out}: {problems} (the resume file) is not writable; fix its permissions "
                         "or choose another --out")


# ----------------------------------------------------------------------------------- one chunk
class _ChunkEvaluator:
    """Generates, verifies and scores a chunk of problems of one dataset."""

    def __init__(self, model, tokenizer, pool: VerifierPool, settings: EvalSettings, prompt_format: PromptFormat):
        self.tokenizer = tokenizer
        self.pool = pool
        self.settings = settings
        self.format = prompt_format
        self.engine = DecodeEngine(model, pad_token_id=tokenizer.pad_token_id,
                                   eos_token_ids=eos_token_ids(model, tokenizer), max_batch_size=settings.batch_size)
        if settings.tools is not None:  # multi-turn responses, the cells run in the sandbox (as in training)
            notebook = PythonNotebook(settings.code_sandbox, output_chars=settings.tool_output_chars)
            self.engine = ToolLoop(self.engine, tokenizer, {"python": notebook_runner(notebook.run_cells)},
                                   tool_format=MarkdownPython(tokenizer),
                                   max_tool_calling_iterations=settings.max_tool_calling_iterations)
        self.device = str(next(model.parameters()).device)

    def prompt_ids(self, row: dict) -> list[int]:
        return self.format.token_ids(self.tokenizer, row["prompt"])

    def _texts(self, prompts: list[list[int]], seeds: list[int] | None, sampling: Sampling) -> list[str]:
        completions = self.engine.generate(prompts, sampling=sampling, row_seeds=seeds,
                                           max_new_tokens=self.settings.max_completion_length)
        return [self.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]

    def run(self, dataset: str, rows: list[dict], keep_samples: bool = False) -> list[dict]:
        """One record per problem; with ``keep_samples`` also ``self.samples``, one row per response."""
        n = self.settings.n
        prompts = [self.prompt_ids(row) for row in rows]
        seeds = [row_seed(self.settings.seed, dataset, row["id"], j) for row in rows for j in range(n)]
        sampling = Sampling(temperature=self.settings.temperature, top_p=self.settings.top_p)
        samples = self._texts([p for p in prompts for _ in range(n)], seeds, sampling)  # [P·n]
        greedy = self._texts(prompts, None, GREEDY) if self.settings.greedy else []  # [P]
        golds = [row["answer"] for row in rows for _ in range(n)] + ([row["answer"] for row in rows] if greedy else [])
        preds = [extract_answer(text, self.settings.answer_extraction) for text in samples + greedy]
        results = (score_code(rows, samples + greedy, n, sandbox=self.settings.code_sandbox) if code_reward_name(rows)
                   else self.pool.verify_batch(golds, preds))
        self.samples = [{"dataset": dataset, "id": row["id"], "sample": j, "answer": row["answer"],
                         "completion": samples[i * n + j], "extracted": preds[i * n + j],
                         "correct": results[i * n + j].correct, "error": results[i * n + j].error}
                        for i, row in enumerate(rows) for j in range(n)] if keep_samples else []
        records = []
        for i, row in enumerate(rows):
            mine = results[i * n:(i + 1) * n]
            records.append({
                "dataset": dataset,
                "id": row["id"],
                "problem": problem_fingerprint(row),
                "n": n,
                "correct": sum(r.correct for r in mine),
                "greedy_correct": results[len(rows) * n + i].correct if greedy else None,
                "diversity": self._diversity(samples[i * n:(i + 1) * n]),
                "timeouts": sum(r.timed_out for r in mine) + (results[len(rows) * n + i].timed_out if greedy else 0),
            })
        return records

    def _diversity(self, texts: list[str]) -> float | None:
        if not self.settings.diversity:
            return None
        from rlvr.eval.diversity import group_diversity

        return group_diversity([texts], device=self.device)


# ----------------------------------------------------------------------------------- summary
def _mean(values: list) -> float | None:
    return statistics.fmean(values) if values else None


def summarize_dataset(records: list[dict], ks: list[int], *, greedy: bool) -> dict:
    """The per-dataset block of the output JSON from its per-problem records."""
    counts = [(r["n"], r["correct"]) for r in records]
    return {
        "num_problems": len(records),
        "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks},
        "greedy_accuracy": _mean([float(r["greedy_correct"]) for r in records]) if greedy else None,
        "frac_uniform": _mean([float(c in (0, n)) for n, c in counts]),
        "frac_all_wrong": _mean([float(c == 0) for _, c in counts]),
        "diversity": _mean([r["diversity"] for r in records if r["diversity"] is not None]),
        "timeouts": sum(r["timeouts"] for r in records),
    }


def format_table(result: dict) -> str:
    """A plain-text table: one row per dataset, one column per pass@k (plus greedy)."""
    ks = [str(k) for k in result["settings"]["k"]]
    width = max(len("dataset"), *(len(name) for name in result["datasets"]))
    header = f"{'dataset':<{width}}  {'problems':>8}" + "".join(f"  {'pass@' + k:>8}" for k in ks) + f"  {'greedy':>8}"
    lines = [header, "-" * len(header)]
    for name, block in result["datasets"].items():
        greedy = block["greedy_accuracy"]
        lines.append(f"{name:<{width}}  {block['num_problems']:>8}"
                     + "".join(f"  {block['pass@k'][k]:>8.4f}" for k in ks)
                     + f"  {'-' if greedy is None else format(greedy, '.4f'):>8}")
    return "\n".join(lines)


def samples_path(out_path: str | os.PathLike) -> Path:
    """Where ``log_samples`` writes: ``<out_path>.samples.jsonl``."""
    return Path(f"{out_path}.samples.jsonl")


def _append_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write("".join(json.dumps(row) + "\n" for row in rows))
        file.flush()
        os.fsync(file.fileno())


def _write_json_atomic(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as file:
        json.dump(obj, file, indent=2, ensure_ascii=False)
        file.write("\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------- entry point
def evaluate(
    model,
    tokenizer,
    specs: Sequence[str] | Mapping[str, list[dict]],
    settings: EvalSettings,
    *,
    out_path: str | os.PathLike,
    progress: bool = True,
) -> dict:
    """Evaluate ``model`` on each dataset; write ``out_path`` (JSON) and return the same dict.

    Args:
        model, tokenizer: a causal LM on its device and its tokenizer (e.g. from rlvr.models.load_policy).
        specs: dataset specs (anything rlvr.data.load_rows takes, or a benchmark name of
            rlvr.data.benchmarks), or {spec: rows} already loaded with load_eval_datasets.
        settings: what to sample and score, and how (EvalSettings, validated when built).
        out_path: summary JSON; per-problem results go to ``<out_path>.problems.jsonl``
            (and, with ``settings.log_samples``, every response to ``<out_path>.samples.jsonl``).
        progress: progress bar per dataset and the final table on stdout.

    Raises:
        ValueError: an output that cannot be written, an unknown or unloadable dataset, a prompt too
            long for the model, or a problems file written with other settings (result_settings, dtype
            from the model's parameters) or for other data.
    """
    check_out_path(out_path)
    if settings.diversity:
        require_embedding_packages("diversity=True")
    if isinstance(specs, Mapping):
        datasets = {spec: list(rows)[:settings.limit] for spec, rows in specs.items()}
    else:
        datasets = load_eval_datasets(specs, limit=settings.limit)
    settings = resolve_settings(settings, model, tokenizer)
    prompt_format = settings.prompt_format()
    _check_input_lengths(model, tokenizer, datasets, max_completion_length=settings.max_completion_length,
                         prompt_format=prompt_format)
    header = result_settings(settings, dtype=dtype_name(next(model.parameters()).dtype))
    with VerifierPool(num_workers=VERIFIER_WORKERS, timeout_s=VERIFIER_TIMEOUT_S) as pool, \
            ProblemsFile(problems_path(out_path), header) as record:
        chunk_evaluator = _ChunkEvaluator(model, tokenizer, pool, settings, prompt_format)
        for spec, rows in datasets.items():
            _run_dataset(chunk_evaluator, record, spec, rows, out_path=out_path, progress=progress)
        blocks = {spec: summarize_dataset([record.records[(spec, row["id"])] for row in rows], list(settings.ks),
                                          greedy=settings.greedy)
                  for spec, rows in datasets.items()}
    result = {"model": settings.model_name, "settings": output_settings(settings), "datasets": blocks}
    _write_json_atomic(Path(out_path), result)
    if progress:
        print(format_table(result))
    return result


def _run_dataset(chunk_evaluator: _ChunkEvaluator, record: ProblemsFile, spec: str, rows: list[dict], *,
                 out_path: str | os.PathLike, progress: bool) -> None:
    """Evaluate the problems of one dataset that ``record`` does not hold yet, ⌊batch_size / n⌋ per chunk."""
    settings = chunk_evaluator.settings
    per_call = max(1, settings.batch_size // settings.n)
    todo = [row for row in rows if not record.done(spec, row["id"], problem_fingerprint(row))]
    with tqdm(total=len(rows), initial=len(rows) - len(todo), desc=spec, disable=not progress) as bar:
        for start in range(0, len(todo), per_call):
            problems = chunk_evaluator.run(spec, todo[start:start + per_call], keep_samples=settings.log_samples)
            if settings.log_samples:  # before the problems are recorded: a resume re-logs, never skips
                _append_jsonl(samples_path(out_path), chunk_evaluator.samples)
            for problem in problems:
                record.add(problem)
                bar.update(1)


def _check_input_lengths(model, tokenizer, datasets: dict[str, list[dict]], *, max_completion_length: int,
                         prompt_format: PromptFormat) -> None:
    """Refuse, before any generation, rows whose prompt plus ``max_completion_length`` exceed the
    model's positions (rlvr.data.input_limits: the row's index, id and the fix)."""
    max_positions = position_limit(model, tokenizer)
    per_row = prompt_format.template_bytes(tokenizer)

    def tokenize(row: dict) -> list[int]:
        return prompt_format.token_ids(tokenizer, row["prompt"])

    for spec, rows in datasets.items():
        check_lengths(rows, tokenize, max_positions=max_positions, max_completion_length=max_completion_length,
                      template_bytes=per_row, source=spec)


def prompt_ids(tokenizer, row: dict, *, system_prompt: str | None, instruction: str | None,
               chat_template_kwargs: dict | None = None, raw_strings: bool = False) -> list[int]:
    """The prompt tokens of ``row``, exactly as the evaluation generates from them."""
    prompt_format = PromptFormat(system_prompt=system_prompt, instruction=instruction,
                                 chat_template_kwargs=chat_template_kwargs,
                                 raw_strings=raw_strings or not has_chat_template(tokenizer))
    return prompt_format.token_ids(tokenizer, row["prompt"])
