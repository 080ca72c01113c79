"""Multi-turn rollouts with tools: any rollout engine wrapped so that a response is model turns and tool results.

    response = turn_1 · result_1 · turn_2 · result_2 · … · turn_k          tool_mask: 1 · 0 · 1 · 0 · … · 1

:class:`ToolLoop` keeps the engine contract (``rlvr.rollout.engine``), so every engine gets tools the same way
(rlvr's decoder, transformers' ``generate``, vLLM colocated or served): it generates every row's first turn; in
each row whose turn holds a tool call, the turn is cut right after the call (what the model wrote after it is
dropped: a causal model's earlier tokens and their log-probs do not depend on it), the call runs, its result is
tokenized and appended, and the row is generated again from prompt + response so far (token ids concatenated,
never re-tokenized), until no row calls a tool, ``max_tool_calling_iterations`` rounds of calls ran, or the
completion budget is spent. TRL 1.16's loop (``GRPOTrainer._tool_call_loop``) is the model: a result that would
push the response past ``max_completion_length`` is dropped and the row ends with its turn as the model wrote it
(one that fills it exactly is kept, and the response ends with it, truncated); the next turn is generated with the whole remaining budget and cut to each row's own; a tool result's tokens carry log-prob 0.0
and ``tool_mask`` 0 (the loss, the ratio, the KL, the entropy and the length counts see only the model's tokens:
``rlvr.train.update``). A row that still calls a tool at the limit keeps its last turn as written (counted).

The format says what a call is and how a result is shown: :class:`MarkdownPython` (a ```` ```python ```` block,
answered by an ```` ```output ```` block, as in ToRL and ReTool for base and instruct models alike; the built-in
``python`` tool), or ``rlvr.rollout.chat_tools.ChatTemplateTools`` (the chat template's tool calls and tool role, as
TRL's ``tools=[fn, ...]``: a turn ends at its end-of-turn token and every call in it runs). The tools are run by the
caller's runners (``rlvr.rewards.sandbox.notebook`` for ``python``, ``rlvr.rollout.function_tools`` for functions):
one batch per runner and round, so the sandbox runs the calls of a round in parallel; the rows without a call are not
generated again. That is TRL's loop (``scheduling=rounds``): a row whose call is slow holds back every other row's next
turn. With ``scheduling=rows`` (engines that seed each row: rlvr's, vLLM's) a row's calls start as soon as its turn
is read and run in the background, and whenever some finish, the rows whose results are back are generated while the
other calls still run: tool time overlaps generation, and a slow call holds back only its own row. The engines take
whole batches, so a row whose turn is still being generated waits for its batch.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

from rlvr.rollout.completion import Completion, ToolUse
from rlvr.rollout.sampling import Sampling


@dataclass(frozen=True)
class ToolCall:
    """One call of a tool: its name and arguments, with the row's earlier calls (a notebook's state)."""

    name: str
    arguments: dict
    history: tuple[dict, ...] = ()  # the arguments of this row's earlier calls to the same tool, in order


@dataclass(frozen=True)
class ToolResult:
    text: str  # what the model is shown (already cut to the tool's output budget)
    failed: bool = False  # an error, a timeout, a crash, an unknown tool (TRL's tools/failure_frequency)
    deferred: bool = False  # an async tool's: shown after the turn's other results (TRL's order)


SCHEDULING = ("rounds", "rows")  # tool_scheduling: TRL's rounds, or each row on its own (ToolLoop)
# a tool's runner: the results of a round's calls to it, in order (the sandbox runs them in parallel)
ToolRunner = Callable[[list[ToolCall]], list[ToolResult]]


def notebook_runner(run_cells: Callable[[list[tuple[list[str], str]]], list[tuple[str, bool]]]) -> ToolRunner:
    """The runner of a tool taking ``code`` whose calls see the row's earlier cells (the built-in ``python`` tool:
    ``rlvr.rewards.sandbox.notebook.PythonNotebook.run_cells``)."""
    def run(calls: list[ToolCall]) -> list[ToolResult]:
        requests = [([str(earlier.get("code", "")) for earlier in call.history], str(call.arguments.get("code", "")))
                    for call in calls]
        return [ToolResult(text, failed) for text, failed in run_cells(requests)]
    return run


class MarkdownPython:
    """A call is the first complete ```` ```python ```` block of a turn; its result follows as an ```` ```output ````
    block (ToRL's format): ``…```python\\nprint(2**100)\\n```\\n```output\\n1267650600228229401496703205376\\n```\\n…``.

    A format's contract (``ChatTemplateTools`` is the other): ``parse_turn`` says which of a turn's tokens are kept
    and which calls it makes; ``result_ids`` gives the tokens a round's results are shown as; ``missing_tool`` the
    result of a call to no tool."""

    tool_names = ("python",)
    instruction = ("You may run Python code: write it in a ```python block, and its output will be shown in an "
                   "```output block right after it; then continue your reasoning.")
    _BLOCK = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def find_call(self, text: str) -> tuple[int, ToolCall] | None:
        """(the end of the call in ``text``, the call) for the first complete python block, or None."""
        match = self._BLOCK.search(text)
        if match is None:
            return None
        return match.end(), ToolCall("python", {"code": match.group(1)})

    def parse_turn(self, context: list[int], turn: list[int]) -> Turn:
        """The turn cut right after its first call (what the model wrote after it is dropped), or kept whole."""
        text = self.tokenizer.decode(turn, skip_special_tokens=False)
        found = self.find_call(text)
        if found is None:
            return Turn(len(turn), ())
        end, call = found
        return Turn(_tokens_covering(self.tokenizer, turn, end), (call,))

    def render(self, text_before: str, result: ToolResult) -> str:
        """The result as the model is shown it, after the call (a newline first where the fence left none)."""
        body = result.text if result.text.endswith("\n") or not result.text else result.text + "\n"
        return ("" if text_before.endswith("\n") else "\n") + f"```output\n{body}```\n"

    def result_ids(self, turn: list[int], calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[int]:
        before = self.tokenizer.decode(turn, skip_special_tokens=False)
        return self.tokenizer.encode(self.render(before, results[0]), add_special_tokens=False)

    def missing_tool(self, name: str, known: Sequence[str]) -> ToolResult:
        return ToolResult(f"Error: no tool named {name!r} (tools: {', '.join(known)})", failed=True)


@dataclass(frozen=True)
class Turn:
    """What a format read in a model turn: the tokens kept, the calls it makes, the message it is (chat formats:
    the parsed assistant message, as TRL hands it to reward functions; None: text formats)."""

    keep: int
    calls: tuple[ToolCall, ...]
    message: dict | None = None




@dataclass
class _Row:
    prompt: list[int]
    tokens: list[int]
    logprobs: list[float]
    mask: list[int]
    truncated: bool
    calls: list[ToolCall] = field(default_factory=list)  # every call run (or dropped with its result)
    waiting: tuple[ToolCall, ...] = ()  # the latest turn's calls, not run yet
    turn_start: int = 0  # where the latest model turn starts in ``tokens``
    pending: tuple | None = None  # what a cut set aside: (tokens, log-probs, truncated), put back if not run
    messages: list[dict] = field(default_factory=list)  # chat formats: the turns as messages
    failures: int = 0
    seconds: float = 0.0
    cut_by_call_limit: bool = False
    result_dropped: bool = False


def check_scheduling(scheduling: str, engine) -> None:
    """``scheduling`` is one of :data:`SCHEDULING` that ``engine`` (an engine or its class) can run: ``rows`` needs
    per-row seeds. ValueError naming the fix."""
    if scheduling not in SCHEDULING:
        raise ValueError(f"tool_scheduling={scheduling!r}: choose one of {SCHEDULING}")
    if scheduling == "rows" and not engine.supports_row_seeds:
        name = engine.__name__ if isinstance(engine, type) else type(engine).__name__
        raise ValueError(f"tool_scheduling=rows needs an engine that seeds each row ({name} seeds whole batches, so "
                         "a row's tokens would depend on which rows were ready with it); use rollout_engine=rlvr or "
                         "vllm, or tool_scheduling=rounds")


class ToolLoop:
    """``engine`` with tools (module docstring). Its abilities and ``sync_weights`` are the engine's.

    Args:
        engine: any rollout engine.
        tokenizer: decodes turns (samples.jsonl's turns).
        tools: each tool's runner by name (:data:`ToolRunner`); a call of another name fails with the format's line.
        tool_format: what a call is and how results are shown (:class:`MarkdownPython`,
            ``rlvr.rollout.chat_tools.ChatTemplateTools``).
        max_tool_calling_iterations: rounds of calls at most (None: until no row calls; TRL's option).
        scheduling: ``rounds`` (every row's turn, then every call, then the next turns: TRL's loop) or ``rows``
            (a row's calls start as soon as its turn is read and run in the background; the rows whose results are
            back are generated while the others' calls still run; with per-row seeds only, see ``generate``).
        tool_workers: with ``rows``, rows whose calls run at once (1: one after another, as TRL calls functions).
    """

    def __init__(self, engine, tokenizer, tools: dict[str, ToolRunner], *, tool_format,
                 max_tool_calling_iterations: int | None = None, scheduling: str = "rounds", tool_workers: int = 1):
        check_scheduling(scheduling, engine)
        self.engine, self.tokenizer, self.tools = engine, tokenizer, dict(tools)
        self.format = tool_format
        self.max_iterations = max_tool_calling_iterations
        self.scheduling, self.tool_workers = scheduling, tool_workers

    def __getattr__(self, name: str):  # the engine's abilities, eos_token_ids, sleep/wake, ...
        return getattr(self.engine, name)

    def sync_weights(self) -> None:
        self.engine.sync_weights()

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, sampling: Sampling,
                 generator_seed: int | None = None, row_seeds: list[int] | None = None,
                 tools: list[dict[str, ToolRunner]] | None = None) -> list[Completion]:
        """The engine's contract; ``tools``: per prompt, the tools its calls run (an environment's methods bound to
        that rollout's instance; None: the loop's own for every prompt)."""
        first = self.engine.generate(prompts, max_new_tokens=max_new_tokens, sampling=sampling,
                                     generator_seed=generator_seed, row_seeds=row_seeds)
        rows = [_Row(list(p), list(c.token_ids), list(c.logprobs), [1] * len(c.token_ids), c.truncated)
                for p, c in zip(prompts, first)]
        waiting = [i for i, row in enumerate(rows) if self._read_turn(row)]
        if self.scheduling == "rows" and row_seeds is not None:
            self._by_rows(rows, waiting, max_new_tokens, sampling, row_seeds, tools)
        else:
            self._by_rounds(rows, waiting, max_new_tokens, sampling, generator_seed, row_seeds, tools)
        return [self._completion(row) for row in rows]

    def _by_rounds(self, rows: list[_Row], waiting: list[int], max_new_tokens: int, sampling: Sampling,
                   generator_seed: int | None, row_seeds: list[int] | None, tools) -> None:
        """TRL's loop: round k runs every waiting row's calls, then generates every continuing row's next turn."""
        iteration = 0
        while waiting:
            if self.max_iterations is not None and iteration >= self.max_iterations:
                for i in waiting:  # the calls are not run: the turn stays as the model wrote it
                    self._uncut(rows[i])
                    rows[i].waiting = ()
                    rows[i].cut_by_call_limit = True
                break
            iteration += 1
            waiting = self._run_round(rows, waiting, max_new_tokens, tools)
            if not waiting:
                break
            going = [i for i in waiting if len(rows[i].tokens) < max_new_tokens]
            for i in waiting:  # no room left after the result: the response ends with it (TRL's cut to 0 tokens)
                if len(rows[i].tokens) >= max_new_tokens:
                    rows[i].truncated = True
            if going:
                budget = max(max_new_tokens - len(rows[i].tokens) for i in going)
                seeds = ({"row_seeds": [turn_seed(row_seeds[i], iteration) for i in going]} if row_seeds is not None
                         else {"generator_seed": None if generator_seed is None
                               else turn_seed(generator_seed, iteration)})
                turns_ = self.engine.generate([rows[i].prompt + rows[i].tokens for i in going], max_new_tokens=budget,
                                              sampling=sampling, **seeds)
                for i, turn in zip(going, turns_):
                    self._append_turn(rows[i], turn, max_new_tokens)
            waiting = [i for i in going if self._read_turn(rows[i])]

    def _by_rows(self, rows: list[_Row], waiting: list[int], max_new_tokens: int, sampling: Sampling,
                 row_seeds: list[int], tools) -> None:
        """``scheduling=rows``: each row's calls run in the background as soon as its turn is read; whenever some
        finish, the rows whose results are back are generated together (in row order) while the others' calls go on.
        A row's k-th continuation is drawn with the seed of round k, as in :meth:`_by_rounds`, so an engine whose
        rows do not depend on their batch gives the same tokens; the call limit and the budget are per row, as the
        rounds apply them."""
        rounds = [0] * len(rows)  # rounds of calls each row started
        pending: dict[Future, int] = {}
        with ThreadPoolExecutor(max_workers=self.tool_workers, thread_name_prefix="rlvr-tool-row") as pool:
            def start(i: int) -> None:
                if self.max_iterations is not None and rounds[i] >= self.max_iterations:
                    self._uncut(rows[i])  # the calls are not run: the turn stays as the model wrote it
                    rows[i].waiting, rows[i].cut_by_call_limit = (), True
                    return
                rounds[i] += 1
                pending[pool.submit(self._timed_tools, [(i, call) for call in rows[i].waiting], tools)] = i

            for i in waiting:
                start(i)
            while pending:
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                going = []
                for i, future in sorted((pending.pop(future), future) for future in done):
                    results, seconds = future.result()
                    if self._show(rows[i], results, seconds, max_new_tokens):
                        if len(rows[i].tokens) < max_new_tokens:
                            going.append(i)
                        else:  # no room left after the result: the response ends with it
                            rows[i].truncated = True
                if going:
                    budget = max(max_new_tokens - len(rows[i].tokens) for i in going)
                    turns_ = self.engine.generate([rows[i].prompt + rows[i].tokens for i in going],
                                                  max_new_tokens=budget, sampling=sampling,
                                                  row_seeds=[turn_seed(row_seeds[i], rounds[i]) for i in going])
                    for i, turn in zip(going, turns_):
                        self._append_turn(rows[i], turn, max_new_tokens)
                        if self._read_turn(rows[i]):
                            start(i)

    def _timed_tools(self, calls: list[tuple[int, ToolCall]], bound) -> tuple[list[ToolResult], float]:
        started = time.monotonic()
        results = self._run_tools(calls, bound)
        return results, time.monotonic() - started

    def _completion(self, row: _Row) -> Completion:
        mask = tuple(row.mask) if row.calls else None
        done = Completion(row.tokens, row.logprobs, row.truncated, tool_mask=mask)
        use = ToolUse(len(row.calls), row.failures, row.seconds, row.cut_by_call_limit, row.result_dropped,
                      turns=tuple((t["role"], t["text"]) for t in turns(self.tokenizer, done)),
                      messages=tuple(row.messages))
        return replace(done, tool_use=use)

    # ---- one row ----------------------------------------------------------------------------------------------

    def _read_turn(self, row: _Row) -> bool:
        """Whether the row's latest turn calls a tool; if so its tokens after the calls are set aside (kept on the
        row, to be put back if the calls are never run) and the calls recorded as waiting."""
        turn = row.tokens[row.turn_start:]
        read = self.format.parse_turn(row.prompt + row.tokens[:row.turn_start], turn) if turn else Turn(0, ())
        if read.message is not None:
            row.messages.append(read.message)
        if not read.calls:
            return False
        keep = row.turn_start + read.keep
        row.pending = (row.tokens[keep:], row.logprobs[keep:], row.truncated)
        del row.tokens[keep:], row.logprobs[keep:], row.mask[keep:]
        row.truncated = False
        earlier = list(row.calls)
        waiting = []
        for call in read.calls:  # each call sees the row's earlier calls of its tool (a notebook's cells)
            waiting.append(replace(call, history=tuple(c.arguments for c in earlier if c.name == call.name)))
            earlier.append(call)
        row.waiting = tuple(waiting)
        return True

    def _uncut(self, row: _Row) -> None:
        tokens, logprobs, truncated = row.pending
        row.tokens += tokens
        row.logprobs += logprobs
        row.mask += [1] * len(tokens)
        row.truncated = truncated

    def _run_round(self, rows: list[_Row], waiting: list[int], max_new_tokens: int,
                   bound: list[dict[str, ToolRunner]] | None) -> list[int]:
        """Run the waiting rows' calls; append their results (or drop them past the budget); the rows to continue."""
        started = time.monotonic()
        calls = [(i, call) for i in waiting for call in rows[i].waiting]
        results = self._run_tools(calls, bound)
        seconds = time.monotonic() - started
        going, at = [], 0
        for i in waiting:
            mine = results[at:at + len(rows[i].waiting)]
            at += len(rows[i].waiting)
            if self._show(rows[i], mine, seconds, max_new_tokens):
                going.append(i)
        return going

    def _show(self, row: _Row, mine: list[ToolResult], seconds: float, max_new_tokens: int) -> bool:
        """Append the row's results as its tool turn (False: past the budget, dropped: TRL's rollback, the response
        ends with its turn as the model wrote it)."""
        row.calls += row.waiting
        row.seconds += seconds
        row.failures += sum(result.failed for result in mine)
        # TRL's order: the results of async tools after the others, each part in call order
        shown_pairs = sorted(zip(row.waiting, mine), key=lambda pair: pair[1].deferred)
        shown = self.format.result_ids(row.tokens[row.turn_start:], *map(list, zip(*shown_pairs)))
        row.waiting = ()
        if len(row.tokens) + len(shown) > max_new_tokens:
            row.result_dropped = True
            self._uncut(row)
            return False
        row.messages += [{"role": "tool", "name": call.name, "content": result.text}
                         for call, result in shown_pairs] if row.messages else []
        row.tokens += shown
        row.logprobs += [0.0] * len(shown)
        row.mask += [0] * len(shown)
        row.turn_start = len(row.tokens)
        return True

    def _run_tools(self, calls: list[tuple[int, ToolCall]], bound) -> list[ToolResult]:
        """Each call's result, in order: the calls to each runner in one batch."""
        results: list[ToolResult | None] = [None] * len(calls)
        batches: dict[int, tuple[ToolRunner, list[int]]] = {}
        for k, (row, call) in enumerate(calls):
            tools = self.tools if bound is None else bound[row]
            runner = tools.get(call.name)
            if runner is None:
                results[k] = self.format.missing_tool(call.name, list(tools))
                continue
            batches.setdefault(id(runner), (runner, []))[1].append(k)
        for runner, mine in batches.values():
            for k, result in zip(mine, runner([calls[k][1] for k in mine])):
                results[k] = result
        return results

    def _append_turn(self, row: _Row, turn: Completion, max_new_tokens: int) -> None:
        room = max_new_tokens - len(row.tokens)
        tokens, logprobs = list(turn.token_ids[:room]), list(turn.logprobs[:room])
        row.tokens += tokens
        row.logprobs += logprobs
        row.mask += [1] * len(tokens)
        row.truncated = turn.truncated or len(turn.token_ids) > room


def turns(tokenizer, completion: Completion) -> list[dict]:
    """A response's turns, for samples.jsonl: ``{"role": "assistant" | "tool", "text": ...}`` from its tool mask."""
    mask = completion.tool_mask or (1,) * len(completion.token_ids)
    out, start = [], 0
    for end in range(1, len(mask) + 1):
        if end == len(mask) or mask[end] != mask[start]:
            out.append({"role": "assistant" if mask[start] else "tool",
                        "text": tokenizer.decode(list(completion.token_ids[start:end]), skip_special_tokens=True)})
            start = end
    return out


def _tokens_covering(tokenizer, tokens: Sequence[int], end: int) -> int:
    """The fewest leading ``tokens`` whose text reaches character ``end`` of their decoded text (binary search;
    a token whose bytes are split by the boundary is kept whole)."""
    low, high = 0, len(tokens)
    while low < high:
        middle = (low + high) // 2
        if len(tokenizer.decode(tokens[:middle], skip_special_tokens=False).rstrip("\ufffd")) >= end:
            high = middle
        else:
            low = middle + 1
    return low


def turn_seed(seed: int, turn: int) -> int:
    """A row's seed for its ``turn``-th continuation (63 bits; turn 0 is the row's own seed)."""
    return (seed * 0x9E3779B97F4A7C15 + turn * 0xBF58476D1CE4E5B9) % (1 << 63)
