"""LoRA's saved models with PEFT's use_rslora, use_dora and modules_to_save: the merged model (save_merged_model)
is PEFT's own ``merge_and_unload`` of the same adapter, the base model (base_model/) the weights before any
adapter; and optimizer.pt's layout (transformers' two parameter groups) reads back into rlvr's one group."""

import copy

import pytest
import torch

from rlvr.run.export import base_state_dict
from rlvr.run.optimizer_layout import (
    decay_split,
    schedule_to_rlvr,
    schedule_to_transformers,
    to_rlvr_layout,
    to_transformers_layout,
)
from tests.helpers.tiny_model import save_tiny_model


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(save_tiny_model(tmp_path_factory.mktemp("m") / "tiny"))


def _adapted(base, **variant):
    """A PEFT model of ``base`` whose adapters moved away from their initial values (B, DoRA's magnitude and the
    saved modules' copies are all changed, so that a merge that ignored one of them would differ)."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                           task_type="CAUSAL_LM", **variant))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model


@pytest.mark.parametrize("variant", [dict(use_rslora=True), dict(use_dora=True),
                                     dict(modules_to_save=["norm"]),
                                     dict(use_rslora=True, use_dora=True, modules_to_save=["norm"])],
                         ids=["rslora", "dora", "modules_to_save", "all"])
def test_the_merged_model_is_peft_merge_and_unload(base, variant):
    model = _adapted(base, **variant)
    ours = base_state_dict(model, model.state_dict(), merge=True)
    theirs = copy.deepcopy(model).merge_and_unload().state_dict()
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        torch.testing.assert_close(ours[key], value, msg=key)
    unmerged = base_state_dict(model, model.state_dict(), merge=False)
    for key, value in base.state_dict().items():
        torch.testing.assert_close(unmerged[key], value, rtol=0, atol=0, msg=key)


def test_optimizer_and_schedule_in_transformers_layout_read_back(base):
    """Two groups (transformers' decay split: every norm weight in the second), the same per-parameter state, and
    the same state again in rlvr's one group."""
    from transformers import get_scheduler

    model = copy.deepcopy(base)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=1, num_training_steps=4)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    scheduler.step()
    names, decay = decay_split(model)
    state = optimizer.state_dict()
    theirs = to_transformers_layout(state, names, decay)
    first, second = theirs["param_groups"]
    kept = [n for n in names if n in decay]  # (the decay names include a tied lm_head, not a parameter of its own)
    assert len(kept) < len(names) and all("norm" in n for n in names if n not in decay)
    assert len(first["params"]) == len(kept) and len(second["params"]) == len(names) - len(kept)
    assert (first["weight_decay"], second["weight_decay"]) == (0.1, 0.0)
    back = to_rlvr_layout(theirs, names, decay)
    assert back["param_groups"][0]["params"] == state["param_groups"][0]["params"]
    for i, value in state["state"].items():
        for key in value:
            torch.testing.assert_close(back["state"][i][key], value[key], rtol=0, atol=0)
    optimizer.load_state_dict(back)  # rlvr's optimiser takes it
    schedule = scheduler.state_dict()
    assert len(schedule_to_transformers(schedule)["base_lrs"]) == 2
    assert schedule_to_rlvr(schedule_to_transformers(schedule)) == schedule
