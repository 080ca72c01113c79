"""The rollout-engine contract (``rlvr.rollout.engine.RolloutEngine``), checked on every registered engine.

Generated from ``ROLLOUT_ENGINES`` (``rlvr.rollout.names``): an engine registered there gets every test below
without an edit here. An engine whose class names an optional package (``optional_package = ("vllm", hint)``)
carries that package's marker: the ``vllm`` cases run under ``make test-vllm`` (in .venv-vllm) and ``make test``
deselects them; selected by the marker without the package, a case fails with the engine's install hint (run
without ``-m``, it is skipped with it).

What each engine must do, on one small fp32 policy (tiny-random's architecture and byte tokenizer with head size
32, 2 heads and 1 KV head, since vLLM's CPU attention has no kernel for tiny-random's head size 16):

- **sampling log-probs = the trainer's**: for prompts of different lengths in one batch (left padding) with one
  prompt repeated (a group), the log-prob returned for each sampled token equals the trainer's log-prob of the
  same token (``rlvr.train.batching.response_logprobs_no_grad``, which divides the logits by the sampling
  temperature: log softmax(logits / T)[x]), at T = 1, at T = 0.7 and greedy (T = 0, scored at T = 1);
- **lengths**: 1 <= len(tokens) <= max_new_tokens, one finite log-prob <= 0 per token;
- **stops**: a response ends at the first EOS id, which it keeps; ``truncated`` is True exactly when it ran to
  ``max_new_tokens`` without one; with every token id an EOS, every response is that one first token;
- **seeds**: the same seeds give the same tokens, other seeds other tokens; with ``supports_row_seeds`` a row's
  response does not depend on the rest of the batch.

Tolerance: torch's float32 defaults (rtol 1.3e-6, atol 1e-5; the engines measure within 1e-6 here) for an engine
that samples with the trainer's numerics; 1e-4 for one that declares other numerics (``is_correction_by_default``:
vLLM's own kernels, measured <= 1e-5). A one-position shift of the log-probs moves them by ~0.5 and a wrong
temperature by ~0.1 on this policy, far outside either.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout import ROLLOUT_ENGINES, RolloutEngine, Sampling, build_engine, engine_class
from rlvr.train.batching import response_logprobs_no_grad

MAX_NEW_TOKENS = 16
# different lengths (left padding), the first repeated (a group sharing its prefill)
PROMPTS = [[72, 105, 33], [72, 105, 33], [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], [40], [99, 98, 97, 96, 95]]
SEEDS, OTHER_SEEDS = [11, 12, 13, 14, 15], [21, 22, 23, 24, 25]
OWN_NUMERICS = {}  # torch.testing's float32 defaults
OTHER_NUMERICS = {"rtol": 1e-4, "atol": 1e-4}
TEMPERATURES = [1.0, 0.7, 0.0]


def _marks(name: str) -> list:
    """The marker of the engine's optional package (``vllm``), which the Makefile selects on."""
    package = engine_class(name).optional_package
    return [getattr(pytest.mark, package[0])] if package else []


ENGINES = [pytest.param(name, marks=_marks(name), id=name) for name in sorted(ROLLOUT_ENGINES)]


def contract_policy():
    """(model, tokenizer): tiny-random's config and tokenizer with head size 32; fp32, eval mode, seed 0."""
    tiny, tokenizer = tiny_random_model_and_tokenizer()
    config = LlamaConfig(**{**tiny.config.to_dict(), "num_attention_heads": 2, "num_key_value_heads": 1,
                            "head_dim": 32})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def policy():
    return contract_policy()


def require_package(name: str, markexpr: str) -> None:
    """An engine's optional package must be importable: selected by its marker (``-m vllm``, as ``make test-vllm``
    runs) the case fails without it; run without ``-m`` it is skipped, with the install hint."""
    package = engine_class(name).optional_package
    if package and importlib.util.find_spec(package[0]) is None:
        missing = f"engine {name!r} needs {package[0]!r}, not installed here: {package[1]}"
        if re.search(rf"(?<!not )\b{re.escape(package[0])}\b", markexpr):
            pytest.fail(missing)
        pytest.skip(missing)


@pytest.fixture(scope="module")
def engines(policy, request):
    """``make(name, eos_token_ids)``: the engine, built once per module for each EOS set (vLLM's take a while)."""
    model, tokenizer = policy
    built = {}

    def make(name: str, eos_token_ids: list[int] | None = None):
        require_package(name, request.config.getoption("markexpr") or "")
        eos = tuple(eos_token_ids or [tokenizer.eos_token_id])
        if (name, eos) not in built:
            built[name, eos] = build_engine(name, model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=list(eos))
        return built[name, eos]

    return make


def stop_ids(tokenizer) -> list[int]:
    """Every 16th token id and the EOS: about one draw in 15 ends a response, so some end and some run out."""
    return sorted({*range(0, len(tokenizer), 16), tokenizer.eos_token_id})


def seeded(engine, seeds: list[int]) -> dict:
    """One seed per row where the engine takes them, else one for the call."""
    return {"row_seeds": seeds} if engine.supports_row_seeds else {"generator_seed": seeds[0]}


def generate(engine, prompts=PROMPTS, *, temperature: float = 1.0, seeds=SEEDS):
    return engine.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, sampling=Sampling(temperature=temperature),
                           **seeded(engine, seeds))


@pytest.mark.parametrize("name", ENGINES)
def test_declares_the_contract(name, engines):
    engine = engines(name)
    assert isinstance(engine, RolloutEngine), f"{name}: lacks a member of rlvr.rollout.engine.RolloutEngine"
    for ability in ("supports_row_seeds", "keeps_own_weights", "supports_async_generation",
                    "is_correction_by_default", "supports_sleep"):
        assert isinstance(getattr(type(engine), ability), bool), f"{name}: class attribute {ability} must be a bool"
    package = type(engine).optional_package
    assert package is None or (len(package) == 2 and all(isinstance(p, str) for p in package)), \
        f"{name}: optional_package must be None or (package, install hint)"


@pytest.mark.parametrize("temperature", TEMPERATURES, ids=lambda t: f"T={t:g}")
@pytest.mark.parametrize("name", ENGINES)
def test_sampling_logprobs_are_the_trainers(name, temperature, engines, policy):
    model, tokenizer = policy
    engine = engines(name, stop_ids(tokenizer))
    completions = generate(engine, temperature=temperature)
    trainer = response_logprobs_no_grad(model, PROMPTS, [c.token_ids for c in completions],
                                        pad_token_id=tokenizer.pad_token_id, temperature=temperature or 1.0,
                                        micro_batch_size=len(PROMPTS))
    tolerance = OTHER_NUMERICS if engine.is_correction_by_default else OWN_NUMERICS
    for row, (completion, expected) in enumerate(zip(completions, trainer)):
        torch.testing.assert_close(
            torch.tensor(completion.logprobs, dtype=torch.float32), expected, **tolerance,
            msg=lambda text, row=row: f"engine {name!r}, row {row}, T={temperature:g}: its sampling log-probs are "
                                      f"not the trainer's log softmax(logits / T) of the same tokens "
                                      f"(rlvr.train.batching): {text}")


@pytest.mark.parametrize("name", ENGINES)
def test_lengths_and_one_logprob_per_token(name, engines, policy):
    engine = engines(name, stop_ids(policy[1]))
    for row, completion in enumerate(generate(engine)):
        tokens, logprobs = completion.token_ids, completion.logprobs
        assert 1 <= len(tokens) <= MAX_NEW_TOKENS, f"{name}, row {row}: {len(tokens)} tokens, budget {MAX_NEW_TOKENS}"
        assert len(logprobs) == len(tokens), f"{name}, row {row}: {len(logprobs)} log-probs for {len(tokens)} tokens"
        assert all(isinstance(x, float) and -1e4 < x <= 0 for x in logprobs), f"{name}, row {row}: {logprobs}"


@pytest.mark.parametrize("name", ENGINES)
def test_a_response_ends_at_its_first_eos_and_keeps_it(name, engines, policy):
    eos = set(stop_ids(policy[1]))
    prompts = PROMPTS * 2  # ten rows: P(all stop) ~ 0.01, P(none stops) ~ 3e-5 whatever the engine's draws
    completions = generate(engines(name, sorted(eos)), prompts, seeds=list(range(100, 100 + len(prompts))))
    for row, c in enumerate(completions):
        assert not eos & set(c.token_ids[:-1]), f"{name}, row {row}: generated past an EOS: {c.token_ids}"
        ended = c.token_ids[-1] in eos
        assert c.truncated == (not ended), f"{name}, row {row}: truncated={c.truncated} for {c.token_ids}"
        assert ended or len(c.token_ids) == MAX_NEW_TOKENS, f"{name}, row {row}: stopped early without an EOS"
    endings = {c.truncated for c in completions}
    assert endings == {True, False}, f"{name}: the batch should both stop and run out ({endings}); change SEEDS"


@pytest.mark.parametrize("name", ENGINES)
def test_with_every_token_an_eos_each_response_is_its_first_token(name, engines, policy):
    every_id = list(range(len(policy[1])))
    for c in generate(engines(name, every_id)):
        assert len(c.token_ids) == len(c.logprobs) == 1 and not c.truncated, \
            f"{name}: every token id is an EOS, so each response is its first token (kept), got {c}"


@pytest.mark.parametrize("name", ENGINES)
def test_seeds_repeat_and_differ(name, engines, policy):
    engine = engines(name, [policy[1].eos_token_id])
    first, again, other = (generate(engine, seeds=s) for s in (SEEDS, SEEDS, OTHER_SEEDS))
    assert [c.token_ids for c in first] == [c.token_ids for c in again], f"{name}: the same seeds gave other tokens"
    assert [c.logprobs for c in first] == [c.logprobs for c in again], f"{name}: the same seeds gave other log-probs"
    differ = sum(a.token_ids != b.token_ids for a, b in zip(first, other))
    assert differ >= len(PROMPTS) - 1, f"{name}: other seeds changed only {differ} of {len(PROMPTS)} responses"
    if engine.supports_row_seeds:  # a row's draws depend on its seed, not on its batch
        alone = [generate(engine, [prompt], seeds=[seed])[0] for prompt, seed in zip(PROMPTS[2:], SEEDS[2:])]
        assert [c.token_ids for c in alone] == [c.token_ids for c in first[2:]], \
            f"{name}: supports_row_seeds, but a row's response changed with the rest of its batch"
