"""optimizer.pt and scheduler.pt in transformers' layout, so that a checkpoint resumes under transformers' Trainer
(TRL) too.

rlvr's AdamW holds every trainable parameter in one group. transformers' ``Trainer.create_optimizer`` makes two:
the parameters ``Trainer.get_decay_parameter_names`` names (every weight but biases and norms), then the others
with ``weight_decay`` 0, each in ``named_parameters()`` order. ``torch.optim.Optimizer.load_state_dict`` needs the
same groups of the same sizes, so a checkpoint's optimizer.pt is written in transformers' two groups
(:func:`to_transformers_layout`: the same per-parameter state, renumbered) and read back into rlvr's one group
(:func:`to_rlvr_layout`); a TRL checkpoint's optimizer.pt is read the same way. The schedule keeps a value per
group (``base_lrs``, ``_last_lr``, ``lr_lambdas``): scheduler.pt holds rlvr's one value for each of the two groups
(:func:`schedule_to_transformers`, :func:`schedule_to_rlvr`).

Convention: the second group is written with weight_decay 0, as transformers builds it (TRL resuming an rlvr
run decays what transformers decays); rlvr's one group keeps its own weight_decay on resume. Equal when
weight_decay is 0 (TRL's and rlvr's default).
"""

from __future__ import annotations

from typing import Any


def decay_split(model) -> tuple[list[str], set[str]]:
    """(the trainable parameters' names in ``named_parameters()`` order, the ones transformers decays)."""
    from transformers import Trainer

    names = [name for name, p in model.named_parameters() if p.requires_grad]
    return names, set(Trainer.get_decay_parameter_names(None, model))  # (uses no trainer state)


def to_transformers_layout(state: dict[str, Any], names: list[str], decay: set[str]) -> dict[str, Any]:
    """rlvr's one-group optimizer ``state`` (its parameters in ``names`` order) as transformers' two groups."""
    (group,) = state["param_groups"]
    assert len(group["params"]) == len(names), "the optimiser holds the model's trainable parameters"
    order = [i for i, n in enumerate(names) if n in decay] + [i for i, n in enumerate(names) if n not in decay]
    ids = group["params"]
    renumbered = {new: state["state"][ids[old]] for new, old in enumerate(order) if ids[old] in state["state"]}
    k = sum(n in decay for n in names)
    hyper = {key: value for key, value in group.items() if key != "params"}
    groups = [{**hyper, "params": list(range(k))}, {**hyper, "weight_decay": 0.0, "params": list(range(k, len(names)))}]
    return {"state": renumbered, "param_groups": groups}


def to_rlvr_layout(state: dict[str, Any], names: list[str], decay: set[str]) -> dict[str, Any]:
    """transformers' two-group optimizer ``state`` (rlvr's or TRL's optimizer.pt) as rlvr's one group; a one-group
    state (rlvr's checkpoints before this layout) as it is."""
    groups = state["param_groups"]
    if len(groups) == 1:
        return state
    if len(groups) != 2 or sum(len(g["params"]) for g in groups) != len(names):
        raise ValueError(f"optimizer.pt holds {len(groups)} parameter groups of {[len(g['params']) for g in groups]} "
                         f"parameters, not transformers' two groups of this model's {len(names)} trainable "
                         "parameters: it was saved for another model or LoRA configuration; resume with the same "
                         "model and LoRA options as the run that saved it")
    order = [i for i, n in enumerate(names) if n in decay] + [i for i, n in enumerate(names) if n not in decay]
    ids = groups[0]["params"] + groups[1]["params"]
    restored = {old: state["state"][ids[new]] for new, old in enumerate(order) if ids[new] in state["state"]}
    hyper = {key: value for key, value in groups[0].items() if key != "params"}
    return {"state": restored, "param_groups": [{**hyper, "params": list(range(len(names)))}]}


def schedule_to_transformers(state: dict[str, Any]) -> dict[str, Any]:
    """rlvr's one-group scheduler ``state`` (a ``LambdaLR``'s) with each per-group list given to both groups."""
    return {key: value * 2 if isinstance(value, list) and len(value) == 1 else value for key, value in state.items()}


def schedule_to_rlvr(state: dict[str, Any]) -> dict[str, Any]:
    """A two-group scheduler ``state`` (rlvr's or TRL's scheduler.pt) as rlvr's one group: the first group's values,
    which are the second's too (transformers gives both groups one learning rate and schedule)."""
    return {key: value[:1] if isinstance(value, list) and len(value) == 2 else value for key, value in state.items()}
