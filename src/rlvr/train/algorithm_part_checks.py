"""What a researcher's own estimator, loss or aggregation returns, checked right after each call, and each part
probed once on a small synthetic batch at start-up and by ``--dry-run`` (rlvr.train.algorithm_parts loads them).

A part registered from a user's file is wrapped by :func:`checked`: its return's type, shape, dtype and gradient
are checked where it returns (not three calls later, deep in the update), and its own exception is reported as
its own, with the frames of the user's file kept. Every failure is an :class:`AlgorithmPartError` whose first
line names the option, the file:function and what was expected. The built-ins are not wrapped (no cost to them).
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from rlvr.core.advantages import ADVANTAGE_ESTIMATORS, AdvantageInputs, AdvantageSettings
from rlvr.core.losses import AGGREGATIONS, POLICY_LOSSES, Denominators, LossSettings


class AlgorithmPartError(ValueError):
    """A user's algorithm part returned what its family does not take, or raised: one line naming it (then, for
    the user's own exception, the frames of the user's file)."""


def checked(fn: Callable, option: str, spec: str, signature: str) -> Callable:
    """``fn`` wrapped: its exception re-raised as :class:`AlgorithmPartError` naming ``option=spec`` and keeping
    the user's frames; its return checked by the family's check."""
    check = RETURN_CHECKS[option]
    where = f"{option}={spec}"

    @functools.wraps(fn)
    def call(*args):
        try:
            out = fn(*args)
        except AlgorithmPartError:
            raise
        except Exception as exc:  # the user's own error: theirs, not a config problem
            raise AlgorithmPartError(own_exception_line(where, fn, exc)) from exc
        check(out, args, where, signature)
        return out

    call.checked_part = fn  # the user's own function, for tests and the probe's messages
    return call


def own_exception_line(where: str, fn: Callable, exc: Exception) -> str:
    """``where`` raised ``exc``: one line, then the traceback's frames in the user's file (the file ``fn`` is in)."""
    source = _source_file(fn)
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if source is not None and Path(frame.filename).resolve() == source]
    message = " ".join(str(exc).split())[:300]
    line = f"{where} raised {type(exc).__name__}: {message} (an error in your function, not in the config)"
    if not frames:
        return line
    return line + "\n" + "".join(traceback.format_list(frames)).rstrip()


def _source_file(fn: Callable) -> Path | None:
    code = getattr(fn, "__code__", None)
    return Path(code.co_filename).resolve() if code is not None else None


def _shape(tensor: torch.Tensor) -> str:
    return f"[{', '.join(str(size) for size in tensor.shape)}]"


def _check_advantages(out, args, where: str, signature: str) -> None:
    inputs = args[0]
    n = inputs.rewards.shape[0]
    if not isinstance(out, torch.Tensor):
        raise AlgorithmPartError(f"{where} returned a {type(out).__name__}; expected {signature}: a float tensor of "
                                 f"shape [{n}] (one advantage per response), e.g. torch.as_tensor(values)")
    if out.shape != (n,):
        raise AlgorithmPartError(f"{where} returned a tensor of shape {_shape(out)}; expected [{n}] (one advantage "
                                 "per response of inputs.rewards)")
    if not out.is_floating_point():
        raise AlgorithmPartError(f"{where} returned a {out.dtype} tensor; expected a floating-point one (e.g. "
                                 "inputs.rewards.dtype)")
    bad = int((~torch.isfinite(out)).sum())
    if bad:
        raise AlgorithmPartError(f"{where} returned {bad} non-finite advantage(s) (NaN or inf) of {n}; guard its "
                                 "divisions (e.g. std + eps)")


def _check_policy_loss(out, args, where: str, signature: str) -> None:
    logprobs = args[0]
    if not (isinstance(out, tuple | list) and len(out) == 2 and all(isinstance(x, torch.Tensor) for x in out)):
        got = (f"a tensor of shape {_shape(out)}" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}")
        raise AlgorithmPartError(f"{where} returned {got}; expected {signature}: a pair of tensors shaped like "
                                 f"the log-probs {_shape(logprobs)}")
    loss, clipped = out
    if loss.shape != logprobs.shape:
        raise AlgorithmPartError(f"{where} returned a loss of shape {_shape(loss)}; expected the per-token loss "
                                 f"{_shape(logprobs)}, shaped like the log-probs (the aggregation reduces it)")
    if not loss.is_floating_point():
        raise AlgorithmPartError(f"{where} returned a {loss.dtype} loss; expected a floating-point one")
    if logprobs.requires_grad and torch.is_grad_enabled() and not loss.requires_grad:
        raise AlgorithmPartError(f"{where} returned a loss without gradient; it must be computed from `logprobs` "
                                 "(not detached, not under torch.no_grad())")
    if clipped.shape != logprobs.shape or clipped.dtype != torch.bool:
        raise AlgorithmPartError(f"{where} returned clipped as a {clipped.dtype} tensor of shape {_shape(clipped)}; "
                                 f"expected a bool tensor {_shape(logprobs)} (True where the clip removed the "
                                 "gradient; torch.zeros_like(mask, dtype=torch.bool) if it never clips)")


def _check_aggregation(out, args, where: str, signature: str) -> None:
    per_token = args[0]
    if not isinstance(out, torch.Tensor):
        raise AlgorithmPartError(f"{where} returned a {type(out).__name__}; expected {signature}: a 0-d tensor")
    if out.dim() != 0:
        raise AlgorithmPartError(f"{where} returned a tensor of shape {_shape(out)}; expected a scalar (0-d) loss: "
                                 f"reduce the per-token loss {_shape(per_token)} (e.g. .sum() / denominator)")
    if per_token.requires_grad and torch.is_grad_enabled() and not out.requires_grad:
        raise AlgorithmPartError(f"{where} returned a loss without gradient; it must be computed from `per_token`")


RETURN_CHECKS = {"advantage_estimator": _check_advantages, "policy_loss": _check_policy_loss,
                 "loss_type": _check_aggregation}


def probe_algorithm_parts(advantages: AdvantageSettings, loss: LossSettings, *, group_size: int,
                          user_parts: dict[str, str]) -> None:
    """Call each user part (``user_parts``: option -> spec) once on a synthetic batch of two groups of
    ``group_size`` responses, 4 tokens each (one padded), with the run's settings: a part that cannot run is
    refused at start-up, before the model loads, by the same checks as in a step."""
    if not user_parts:
        return
    n, t = 2 * group_size, 4
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(n, generator=generator)
    group_ids = torch.arange(n) // group_size
    mask = torch.ones(n, t, dtype=torch.bool)  # as a step passes it: bool to the loss, float to the aggregation
    mask[0, -1] = False  # one padded position
    logprobs = (-torch.rand(n, t, generator=generator)).requires_grad_()
    old = logprobs.detach() - 0.05 * torch.rand(n, t, generator=generator)
    batch = f"(probed on a synthetic batch of 2 groups of {group_size} responses, {t} tokens each)"
    try:
        adv = rewards - rewards.mean()
        if "advantage_estimator" in user_parts:
            adv = ADVANTAGE_ESTIMATORS[user_parts["advantage_estimator"]](AdvantageInputs(rewards, group_ids),
                                                                          advantages)
        per_token = -logprobs * adv.detach().float().unsqueeze(-1) * mask
        if "policy_loss" in user_parts:
            per_token = POLICY_LOSSES[user_parts["policy_loss"]](logprobs, old, adv.detach().float(), mask, loss)[0]
        if "loss_type" in user_parts:
            AGGREGATIONS[user_parts["loss_type"]](per_token, mask.to(per_token.dtype),
                                                   Denominators(float(mask.sum()), float(n), t))
    except AlgorithmPartError as error:
        first, _, rest = str(error).partition("\n")
        raise AlgorithmPartError(f"{first} {batch}" + (f"\n{rest}" if rest else "")) from error.__cause__
