"""Whole-path checks of DaGRPO and TA-GRPO: the real trainer on hand-worked batches, against float64 by hand.

Neither algorithm has an outside reference implementation (docs/algorithms/dagrpo.md: only the paper's
abstract is public; docs/algorithms/tagrpo.md: the authors' code is v1-era). So each test here builds
``rlvr.train.trainer.Trainer`` from ``rlvr.config.build_config`` exactly as a user's run does
(``model=tiny-random``, a reward function passed as a callable, data as row dicts), fixes the responses
at the rollout boundary (the engine's ``generate``, the one seam between sampling and everything
after it: ``GroupGenerator.sample`` in rlvr/train/rollout_phase.py), runs one training step
(``Trainer.train`` with ``max_steps=1``: rollout phase, rewarding, the DaGRPO phase, experience,
advantages, ``PolicyUpdate``, AdamW), and compares every parameter afterwards with a plain float64
re-computation written here from the formulas of the docs — no rlvr function is called for it:

- prompts: the ChatML text of the tiny byte tokenizer (token id = byte value, 256 ``<|im_start|>``,
  257 ``<|im_end|>`` = EOS), built byte by byte here; responses: the bytes of the text, then EOS;
- log-probs: a plain forward of a float64 copy of the initial policy on [prompt ; response],
  log_softmax(logits / T) at the response positions (docs/design/conventions.md, "Log-probs");
- the loss (docs/design/conventions.md): per sampled token −min(ρA, clip(ρ, 1−ε, 1+ε)A), per anchor
  token −Â·log π_θ(a_t) with no ratio and no clip (docs/algorithms/dagrpo.md, step 5), summed over
  every response token and divided by their number (``loss_type=token_mean``); TA-GRPO's truncated IS
  ρ_t = min(π_θ(o_t|q_0)/π_old(o_t|q_j), C) before the clip (docs/algorithms/tagrpo.md, step 5);
- the optimiser: AdamW written out (m, v, bias corrections, decoupled decay), one step per pass.

The advantages are worked by hand in the test's own numbers:

- DaGRPO (docs/algorithms/dagrpo.md, steps 1-4: s = α·r + (1−α)·q with α = 0.5 and the ``steps``
  scorer's q = fraction of true equations; m_ij = 1[|s_i − s_j| ≥ τ], ties never kept;
  Â_i = Σ_j m_ij (r_i − r_j) / (G (σ + ε)), σ the unbiased std of r, ε = 1e-6):
  group A, r = [1, 1, 0, 0], q = [1, 0, 1/2, 0], s = [1, 0.5, 0.25, 0], τ = 0.5: the pairs (2, 3) and
  (3, 4) (gap 0.25) are masked, (1, 2) and (2, 4) (gap exactly τ) kept; σ = √(1/3), so
  Â = [2, 1, −1, −2] / (4 (√(1/3) + ε)) = [0.866024, 0.433012, −0.433012, −0.866024] (GRPO's: ±0.866024).
  Group B: every response wrong (r = 0), s = [0.5, 0, 0.5, 0.5]; the anchor (the row's solution,
  "3+4=7\\nThe answer is \\boxed{7}.", r = 1, q = 1, s = 1) replaces the lowest-scored response (slot 2);
  the wrong ones tie (masked among themselves), each is exactly τ from the anchor (kept); σ = 0.5, so
  Â_anchor = 3 / (4 · 0.500001) = 1.499997 and −0.499999 for each wrong response.
  One pass (ρ = 1), and two (``num_iterations=2``): the second pass's ratios leave [1 − ε, 1 + ε], so some
  sampled tokens lose their gradient to the clip while the anchor's tokens, which have no ratio, never do.
- TA-GRPO (docs/algorithms/tagrpo.md, steps 3-5), N = 2 rephrasings, G = 2, pools of (N+1)·G = 6:
  pool C, r = [0, 0 | 1, 0 | 1, 1] (q_0 | q_1 | q_2): mean 1/2, σ = √0.3, A = ±0.5 / (√0.3 + ε) =
  ±0.912869 (q_0's own two responses are uniform: GRPO would give them 0); pool D, r = [1, 0 | 0, 0 | 0, 0]:
  mean 1/6, σ = √(1/6), A = 2.041236 and −0.408247. Every response is scored on q_0 (``ratio_anchor=original``,
  one pass: ρ = 1 and the gradient is −A ∇log π(o|q_0)); with ``truncated_is`` the old log-probs are scored on
  the q_j each response was sampled from, ρ is capped at C = 1.3 before the clip, and two passes
  (``num_iterations=2``) take two AdamW steps.
- TA-GRPO × DaGRPO (docs/algorithms/dagrpo.md, step 2: an anchor answers q_0 in every ``ratio_anchor`` mode):
  pool E all wrong, the lowest score (s = 0, a false equation) in q_1's slot, so the anchor replaces it;
  ``ratio_anchor=unanchored`` scores the sampled responses on their own q_j and the anchor on q_0;
  r = [0, 0 | 1, 0 | 0, 0], Â_anchor = 2.041236, −0.408247 for the others.

The fixed responses come with the sampler's log-probs a real engine would report (float64 here, on the prompt
each was sampled from), so ``rollout/logprob_mismatch`` and TA-GRPO's ``tagrpo/anchor_logp_gap`` (the mean
|log π(o|q_j) − log π(o|q_0)| the policy pass sees) are checked against hand values too. The weights are
checked first; rewards, scores, anchors, advantages (samples.jsonl) and the pair and pool metrics after, to
say where a difference came from.

Precision: the product computes in float32 (``dtype`` accepts float32 | bfloat16 | auto, and the log-prob
code works in fp32), so float64 end to end is not possible; the reference is float64 from the same initial
weights. Bound (TOL = 1e-5): for every parameter tensor, max |w_rlvr − w_ref| ≤ TOL × max |w_ref − w_0| of the
whole model (the update's scale) plus one fp32 rounding of the weight itself (2^-24 |w|), and
‖w_rlvr − w_ref‖ ≤ TOL × ‖w_ref − w_0‖ over the whole model. Measured: the worst element 2.3e-6 to 4.5e-6 of
the update's scale, the whole model 1.9e-6 to 3.0e-6 of the update's norm; a planted one-line bug (a threshold
`>=` made `>`, an anchor's sign, a ratio on q_j instead of q_0, a pool's std over one variant) moves some
weight by 2e-3 to 0.4, 10^4 to 10^6 times the bound. To keep AdamW's first step sensitive to the
gradient's size (with the default ε = 1e-8 it is ≈ lr·sign(g), blind to an advantage's magnitude), the runs
set ``adam_epsilon=1`` (the step is then ≈ lr·g/(|g| + 1)), and ``max_grad_norm=0`` (a clip would rescale
away a wrong overall scale).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass

import pytest
import torch

from rlvr.config import build_config
from rlvr.rollout import Completion
from rlvr.train.trainer import Trainer

IM_START, EOS = 256, 257
EPS_ADV = 1e-6  # advantage_eps (verl's default, docs/design/conventions.md)
TOL = 1e-5  # of the update's scale (module docstring)


def chat_prompt(question: str) -> list[int]:
    """The ChatML prompt of one user question, byte by byte (the tiny tokenizer: id = byte)."""
    return ([IM_START, *b"user\n", *question.encode(), EOS, *b"\n", IM_START, *b"assistant\n"])


def response(text: str) -> list[int]:
    return [*text.encode(), EOS]


def boxed_reward(prompts, completions, answer, **kwargs):
    """1 when the response writes \\boxed{gold}, else 0 (the test's own reward function)."""
    return [1.0 if f"\\boxed{{{gold}}}" in text else 0.0 for text, gold in zip(completions, answer)]


class FixedResponses:
    """Stands in for the engine's ``generate``: the responses for each prompt, in the order of its requests,
    with the sampler's log-probs a real engine reports (log π(o_t | the prompt it was sampled from), by ``score``)."""

    def __init__(self, by_prompt: dict[tuple[int, ...], list[str]], score):
        self.by_prompt = {key: list(texts) for key, texts in by_prompt.items()}
        self.taken = {key: 0 for key in by_prompt}
        self.score = score
        self.prompts: list[list[int]] = []

    def __call__(self, prompts, **kwargs):
        out = []
        for prompt in prompts:
            key = tuple(prompt)
            assert key in self.by_prompt, f"unexpected prompt {prompt}"
            self.prompts.append(list(prompt))
            ids = response(self.by_prompt[key][self.taken[key]])
            self.taken[key] += 1
            out.append(Completion(ids, self.score(list(prompt), ids).tolist(), False))
        return out


@dataclass
class Item:
    """One response of the batch as the reference sees it."""

    prompt: list[int]  # the prompt π_θ scores it on (q_0)
    old_prompt: list[int]  # the prompt π_old scores it on (q_0, or q_j under truncated_is)
    response: list[int]
    advantage: float
    anchor: bool = False


def logprobs64(model, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """log π(tokens | prompt) per token: one plain forward, log_softmax(logits / T), float64."""
    ids = torch.tensor([prompt + tokens])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].to(torch.float64) / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


@dataclass
class Reference:
    weights: dict[str, torch.Tensor]
    clipped_tokens: int  # sampled tokens whose gradient the clip (or the cap) removed, over all passes
    anchor_ratio_outside: int  # anchor tokens whose π_θ/π_old left [1−ε, 1+ε] (a clip would have bitten)
    capped_tokens: int  # tokens with A < 0 whose ρ the truncated-IS cap C cut (removing a gradient the clip keeps)


def reference_update(model, items: list[Item], *, passes: int, old_needed: bool, lr: float, betas, adam_eps: float,
                     weight_decay: float, temperature: float, epsilon: float, cap: float | None = None) -> Reference:
    """``passes`` AdamW steps on the token-mean of the clipped surrogate (anchors: −Â log π), float64."""
    model = copy.deepcopy(model).to(torch.float64)
    model.eval()
    params = dict(model.named_parameters())
    old = None
    if old_needed:
        with torch.no_grad():
            old = [logprobs64(model, it.old_prompt, it.response, temperature) for it in items]
    m = {n: torch.zeros_like(p) for n, p in params.items()}
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    num_tokens = sum(len(it.response) for it in items)
    clipped = outside = capped = 0
    for t in range(1, passes + 1):
        model.zero_grad()
        total = torch.zeros((), dtype=torch.float64)
        for k, it in enumerate(items):
            logp = logprobs64(model, it.prompt, it.response, temperature)
            if it.anchor:
                per_token = -it.advantage * logp
                if old is not None:
                    r = torch.exp(logp.detach() - old[k])
                    outside += int(((r < 1 - epsilon) | (r > 1 + epsilon)).sum())
            else:
                behaviour = logp.detach() if old is None else old[k]
                rho = torch.exp(logp - behaviour)
                if cap is not None:  # the cap decides where A < 0: the clip alone keeps ρA's gradient for ρ > 1 + ε
                    capped += int((rho.detach() > cap).sum()) if it.advantage < 0 else 0
                    rho = torch.minimum(rho, torch.tensor(cap, dtype=torch.float64))
                a = it.advantage
                per_token = -torch.minimum(rho * a, torch.clamp(rho, 1 - epsilon, 1 + epsilon) * a)
                r = rho.detach()
                clipped += int((((r > 1 + epsilon) & (a > 0)) | ((r < 1 - epsilon) & (a < 0))).sum())
            total = total + per_token.sum()
        (total / num_tokens).backward()
        b1, b2 = betas
        with torch.no_grad():
            for n, p in params.items():
                g = p.grad
                m[n] = b1 * m[n] + (1 - b1) * g
                v[n] = b2 * v[n] + (1 - b2) * g * g
                m_hat = m[n] / (1 - b1**t)
                v_hat = v[n] / (1 - b2**t)
                p.mul_(1 - lr * weight_decay)
                p.sub_(lr * m_hat / (v_hat.sqrt() + adam_eps))
    return Reference({n: p.detach().clone() for n, p in params.items()}, clipped, outside, capped)


COMMON = {
    "model": "tiny-random", "reward_funcs": [boxed_reward], "prompts_per_step": 2, "max_completion_length": 40,
    "max_steps": 1, "progress_bar": False, "verifier_workers": 1, "instruction": None, "shuffle": False,
    "loss_type": "token_mean", "epsilon": 0.2, "beta": 0.0, "temperature": 0.8, "advantage_eps": EPS_ADV,
    "optim": "adamw_torch", "adam_beta1": 0.9, "adam_beta2": 0.99, "adam_epsilon": 1.0, "weight_decay": 0.0,
    "max_grad_norm": 0.0, "lr_scheduler_type": "constant", "num_completions_to_log": 100,
}


def run_one_step(tmp_path, rows, by_prompt, **overrides):
    """The real trainer, one step, the engine's ``generate`` replaced by the fixed responses.

    Returns (trainer, the initial fp32 weights, a copy of the initial policy, the step's metrics, samples.jsonl's
    records, the engine stand-in)."""
    cfg = build_config({**COMMON, "data": rows, "output_dir": str(tmp_path / "run"), **overrides})
    trainer = Trainer(cfg)
    initial = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
    model0 = copy.deepcopy(trainer.policy)
    model64 = copy.deepcopy(model0).to(torch.float64).eval()
    temperature = cfg.rollout.temperature

    def score(prompt, ids):
        with torch.no_grad():
            return logprobs64(model64, prompt, ids, temperature)

    fixed = FixedResponses(by_prompt, score)
    trainer.engine.generate = fixed  # the rollout boundary: everything downstream is the product's
    (metrics,) = trainer.train()
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    return trainer, initial, model0, metrics, samples, fixed


def assert_weights_match(trainer, initial, ref: Reference) -> tuple[float, float]:
    """Every parameter within TOL of the update's scale (plus one fp32 rounding of the weight itself), and the
    whole model within TOL of the update's norm. Returns (worst element error, whole-model error), both as
    fractions of the update's scale and norm."""
    got = {n: p.detach().double() for n, p in trainer.policy.named_parameters()}
    assert set(got) == set(ref.weights)
    deltas = {n: ref.weights[n] - initial[n].double() for n in got}
    scale = max(float(d.abs().max()) for d in deltas.values())
    assert scale > 1e-3, "the step must move the weights measurably"
    worst = 0.0
    for name, w in got.items():
        err = (w - ref.weights[name]).abs()
        bound = TOL * scale + ref.weights[name].abs() * 2.0**-24
        assert bool((err <= bound).all()), (name, float(err.max()), TOL * scale)
        worst = max(worst, float(err.max()) / scale)
    norm = math.sqrt(sum(float((d * d).sum()) for d in deltas.values()))
    whole = math.sqrt(sum(float(((got[n] - ref.weights[n]) ** 2).sum()) for n in got)) / norm
    assert whole <= TOL, whole
    return worst, whole


# ----------------------------------------------------------------------------------------------- DaGRPO
DAGRPO_ROWS = [
    {"id": "a", "prompt": "What is 2+3?", "answer": "5", "solution": "2+3=5\n#### 5"},
    {"id": "b", "prompt": "What is 3+4?", "answer": "7", "solution": "3+4=7\n#### 7"},
]
# (text, r, q): r from boxed_reward, q the steps scorer's fraction of true equations
GROUP_A = [("2+3=5\n\\boxed{5}", 1, 1.0), ("2+3=6\n\\boxed{5}", 1, 0.0),
           ("2+3=5\n1+1=3\n\\boxed{6}", 0, 0.5), ("2+3=6\n\\boxed{6}", 0, 0.0)]
GROUP_B = [("3+4=7\n\\boxed{8}", 0, 1.0), ("3+4=8\n\\boxed{8}", 0, 0.0),
           ("3+4=7\n\\boxed{9}", 0, 1.0), ("3+4=7\n1+1=2\n\\boxed{6}", 0, 1.0)]
ANCHOR_B = "3+4=7\nThe answer is \\boxed{7}."  # the row's solution as an anchor (#### 7 -> \boxed{7})


def dagrpo_hand_advantages():
    """Group A's masked pairwise advantages and group B's after the anchor, from the module docstring."""
    sigma_a = math.sqrt(1 / 3)  # unbiased std of [1, 1, 0, 0]
    # Σ_j m_ij (r_i − r_j): o1 keeps (2), (3), (4): 0 + 1 + 1; o2 keeps (1), (4): 0 + 1; o3 keeps (1): −1;
    # o4 keeps (1), (2): −1 − 1
    adv_a = [x / (4 * (sigma_a + EPS_ADV)) for x in (2, 1, -1, -2)]
    sigma_b = 0.5  # unbiased std of [0, 1, 0, 0]
    adv_b = [-1 / (4 * (sigma_b + EPS_ADV)), 3 / (4 * (sigma_b + EPS_ADV)),
             -1 / (4 * (sigma_b + EPS_ADV)), -1 / (4 * (sigma_b + EPS_ADV))]
    return adv_a, adv_b


@pytest.mark.parametrize("passes", [1, 2])
def test_dagrpo_pair_masking_and_anchor_one_step_matches_float64(tmp_path, passes):
    q_a, q_b = chat_prompt("What is 2+3?"), chat_prompt("What is 3+4?")
    by_prompt = {tuple(q_a): [t for t, _, _ in GROUP_A], tuple(q_b): [t for t, _, _ in GROUP_B]}
    lr = 0.2
    trainer, initial, model0, metrics, samples, fixed = run_one_step(
        tmp_path, DAGRPO_ROWS, by_prompt, num_generations=4, algo="dagrpo", scorer="steps", score_alpha=0.5,
        pair_masking=True, pair_tau=0.5, contrast="reward", anchors="failed", anchor_max_correct=0,
        anchor_placement="replace_worst", anchor_psi="log", num_iterations=passes, learning_rate=lr)
    assert fixed.prompts == [q_a] * 4 + [q_b] * 4  # the prompts reached the engine as built here

    adv_a, adv_b = dagrpo_hand_advantages()
    items = [Item(q_a, q_a, response(t), a) for (t, _, _), a in zip(GROUP_A, adv_a)]
    texts_b = [GROUP_B[0][0], ANCHOR_B, GROUP_B[2][0], GROUP_B[3][0]]  # the anchor replaced slot 2 (s = 0)
    items += [Item(q_b, q_b, response(t), a, anchor=(k == 1)) for k, (t, a) in enumerate(zip(texts_b, adv_b))]
    ref = reference_update(model0, items, passes=passes, old_needed=passes > 1, lr=lr, betas=(0.9, 0.99),
                           adam_eps=1.0, weight_decay=0.0, temperature=0.8, epsilon=0.2)
    if passes == 2:  # the second pass reaches the clip: sampled tokens lose their gradient, anchor tokens never
        assert ref.clipped_tokens > 0 and ref.anchor_ratio_outside > 0
    assert_weights_match(trainer, initial, ref)

    # the hand-worked batch on the way: rewards, scores, the anchor, the advantages as samples.jsonl logs them
    kept = records_by_row(samples)
    assert [s["reward"] for s in kept["a"]] == [r for _, r, _ in GROUP_A] == [1, 1, 0, 0]
    assert [s["anchor"] for s in kept["b"]] == [False, True, False, False]
    assert kept["b"][1]["completion"] == ANCHOR_B and kept["b"][1]["reward"] == 1.0
    for got, want in zip([s["advantage"] for s in kept["a"] + kept["b"]], adv_a + adv_b):
        assert got == pytest.approx(want, rel=1e-6)
    assert metrics["dagrpo/anchor_rate"] == 0.5
    # s = 0.5 r + 0.5 q over the 8 sampled responses and the anchor: (1 + 0.5 + 0.25 + 0) + (0.5 + 0 + 0.5 + 0.5) + 1
    hand_scores = [0.5 * r + 0.5 * q for _, r, q in GROUP_A + GROUP_B] + [1.0]
    assert metrics["dagrpo/score_mean"] == pytest.approx(sum(hand_scores) / 9) == pytest.approx(4.25 / 9)
    # masked pairs: A (2,3), (3,4); B (1,3), (1,4), (3,4) of 12 within-group pairs; contrasting: A's 4, B's 3
    assert metrics["dagrpo/masked_pair_frac"] == pytest.approx(5 / 12)
    assert metrics["dagrpo/masked_contrast_frac"] == pytest.approx(1 / 7)


def records_by_row(samples) -> dict[str, list[dict]]:
    """samples.jsonl's records per row id, in order (every response is logged: num_completions_to_log=100)."""
    by_id: dict[str, list[dict]] = {}
    for record in samples:
        by_id.setdefault(record["id"], []).append(record)
    return by_id


# ----------------------------------------------------------------------------------------------- TA-GRPO
TAGRPO_ROWS = [
    {"id": "c", "prompt": "What is 2+3?", "answer": "5", "rephrasings": ["Compute 2 plus 3.", "Add 3 to 2."]},
    {"id": "d", "prompt": "What is 3+4?", "answer": "7", "rephrasings": ["Compute 3 plus 4.", "Add 4 to 3."]},
]
# per row, per variant q_0, q_1, q_2: G = 2 responses (text, r)
POOL_C = [[("\\boxed{6}", 0), ("\\boxed{4}", 0)], [("\\boxed{5}", 1), ("\\boxed{9}", 0)],
          [("So \\boxed{5}", 1), ("\\boxed{5}", 1)]]
POOL_D = [[("\\boxed{7}", 1), ("\\boxed{1}", 0)], [("\\boxed{2}", 0), ("\\boxed{3}", 0)],
          [("\\boxed{8}", 0), ("7", 0)]]


def pooled_hand_advantages(rewards: list[int]) -> list[float]:
    """A = (r − mean_pool) / (std_pool + ε), the unbiased std over the whole pool (docs/algorithms/tagrpo.md, 4)."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + EPS_ADV) for r in rewards]


@pytest.mark.parametrize("mode,passes", [("original", 1), ("truncated_is", 2)])
def test_tagrpo_pooled_advantages_and_q0_anchored_ratios_match_float64(tmp_path, mode, passes):
    prompts = {row["id"]: [chat_prompt(q) for q in [row["prompt"], *row["rephrasings"]]] for row in TAGRPO_ROWS}
    pools = {"c": POOL_C, "d": POOL_D}
    by_prompt = {tuple(prompts[rid][j]): [t for t, _ in pools[rid][j]] for rid in pools for j in range(3)}
    lr, cap = 0.2, 1.3
    trainer, initial, model0, metrics, samples, fixed = run_one_step(
        tmp_path, TAGRPO_ROWS, by_prompt, num_generations=2, algo="tagrpo", num_rephrasings=2, pooled=True,
        ratio_anchor=mode, truncated_is_cap=cap, num_iterations=passes, learning_rate=lr)
    assert fixed.prompts == [p for rid in ("c", "d") for p in prompts[rid] for _ in range(2)]

    # hand-worked pooled advantages: C ±0.912869 (σ = √0.3), D 2.041236 / −0.408247 (σ = √(1/6))
    adv = {rid: pooled_hand_advantages([r for variant in pools[rid] for _, r in variant]) for rid in pools}
    assert adv["c"][2] == pytest.approx(0.5 / (math.sqrt(0.3) + EPS_ADV)) == pytest.approx(0.912869, abs=1e-6)
    assert adv["d"][0] == pytest.approx((5 / 6) / (math.sqrt(1 / 6) + EPS_ADV)) == pytest.approx(2.041236, abs=1e-6)
    items = []
    for rid, pool in pools.items():
        for j, variant in enumerate(pool):
            for (text, _), a in zip(variant, adv[rid][2 * j : 2 * j + 2]):
                old_prompt = prompts[rid][j] if mode == "truncated_is" else prompts[rid][0]
                items.append(Item(prompts[rid][0], old_prompt, response(text), a))
    ref = reference_update(model0, items, passes=passes, old_needed=passes > 1 or mode == "truncated_is", lr=lr,
                           betas=(0.9, 0.99), adam_eps=1.0, weight_decay=0.0, temperature=0.8, epsilon=0.2,
                           cap=cap if mode == "truncated_is" else None)
    if mode == "truncated_is":  # the case reaches the cap C (where it decides) and the clip
        assert ref.capped_tokens > 0 and ref.clipped_tokens > 0
    assert_weights_match(trainer, initial, ref)

    # on the way: rewards against q_0's gold, pooled advantages as samples.jsonl logs them, the pool metrics
    logged = records_by_row(samples)
    for rid, pool in pools.items():
        assert [s["variant"] for s in logged[rid]] == [0, 0, 1, 1, 2, 2]
        assert [s["reward"] for s in logged[rid]] == [float(r) for v in pool for _, r in v]
        for got, want in zip([s["advantage"] for s in logged[rid]], adv[rid]):
            assert got == pytest.approx(want, rel=1e-6)
    assert metrics["tagrpo/variants_per_pool"] == 3
    assert metrics["tagrpo/frac_uniform_variant_groups"] == pytest.approx(4 / 6)  # C: q_0, q_2; D: q_1, q_2
    # the policy pass scored q_1/q_2's responses on q_0: the gap to the sampler's log π(o|q_j), by hand
    model64 = copy.deepcopy(model0).to(torch.float64).eval()
    with torch.no_grad():
        gaps = []
        for rid, pool in pools.items():
            for j in (1, 2):
                for text, _ in pool[j]:
                    ids = response(text)
                    gaps.append((logprobs64(model64, prompts[rid][0], ids, 0.8)
                                 - logprobs64(model64, prompts[rid][j], ids, 0.8)).abs())
    assert metrics["tagrpo/anchor_logp_gap"] == pytest.approx(float(torch.cat(gaps).mean()), rel=1e-4)
    assert metrics["rollout/logprob_mismatch"] < 1e-5  # q_0's responses: the sampler's own log-probs


# ------------------------------------------------------------------------------------ TA-GRPO × DaGRPO
POOL_E_ROW = {"id": "e", "prompt": "What is 4+4?", "answer": "8", "solution": "4+4=8\n#### 8",
              "rephrasings": ["Compute 4 plus 4.", "Add 4 to 4."]}
# every response wrong (r = 0); the steps scorer gives q = 1 but to q_1's first (4+4=9: q = 0, s = 0, the lowest)
POOL_E = [["4+4=8\n\\boxed{9}", "4+4=8\n\\boxed{7}"], ["4+4=9\n\\boxed{9}", "4+4=8\n\\boxed{6}"],
          ["4+4=8\n\\boxed{1}", "4+4=8\n\\boxed{2}"]]
ANCHOR_E = "4+4=8\nThe answer is \\boxed{8}."


def test_tagrpo_unanchored_pool_with_an_anchor_in_a_q1_slot_scores_it_on_q0(tmp_path):
    """docs/algorithms/dagrpo.md, step 2: an anchor answers q_0 — under TA-GRPO it is variant 0 and scored on q_0
    in every ``ratio_anchor`` mode, whichever variant's slot it took. Here ``unanchored``: the sampled responses
    are scored on their own q_j, the anchor (in q_1's slot) on q_0. Pool of 6 after injection: r = [0, 0 | 1, 0 |
    0, 0], mean 1/6, σ = √(1/6): Â_anchor = (5/6)/(σ + ε) = 2.041236, −0.408247 for the others (τ = 0)."""
    prompts = [chat_prompt(q) for q in [POOL_E_ROW["prompt"], *POOL_E_ROW["rephrasings"]]]
    lr = 0.2
    trainer, initial, model0, metrics, samples, fixed = run_one_step(
        tmp_path, [POOL_E_ROW], {tuple(p): texts for p, texts in zip(prompts, POOL_E)}, prompts_per_step=1,
        num_generations=2, algo="tagrpo", num_rephrasings=2, ratio_anchor="unanchored", scorer="steps",
        score_alpha=0.5, anchors="failed", anchor_max_correct=0, anchor_psi="log", learning_rate=lr)
    assert fixed.prompts == [p for p in prompts for _ in range(2)]

    adv = pooled_hand_advantages([0, 0, 1, 0, 0, 0])
    texts = [t for variant in POOL_E for t in variant]
    texts[2] = ANCHOR_E
    sampled_from = [0, 0, 1, 1, 2, 2]
    items = [Item(prompts[0] if k == 2 else prompts[sampled_from[k]], prompts[sampled_from[k]], response(t), a,
                  anchor=k == 2) for k, (t, a) in enumerate(zip(texts, adv))]
    ref = reference_update(model0, items, passes=1, old_needed=False, lr=lr, betas=(0.9, 0.99), adam_eps=1.0,
                           weight_decay=0.0, temperature=0.8, epsilon=0.2)
    assert_weights_match(trainer, initial, ref)

    logged = records_by_row(samples)["e"]
    assert [s["anchor"] for s in logged] == [False, False, True, False, False, False]
    assert [s["variant"] for s in logged] == [0, 0, 0, 1, 2, 2]  # the anchor is variant 0
    assert logged[2]["completion"] == ANCHOR_E
    for got, want in zip([s["advantage"] for s in logged], adv):
        assert got == pytest.approx(want, rel=1e-6)
    assert metrics["dagrpo/anchor_rate"] == 1.0
