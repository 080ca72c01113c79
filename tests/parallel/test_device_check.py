"""rlvr.parallel.device_check: the emulated accelerator refuses what CUDA refuses, and lets through what CUDA
lets through (the GPU check's dry run relies on both)."""

import pytest
import torch

from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.parallel.device_check import ON_DEVICE, DeviceDiscipline, DeviceMixUp, mark_on_device, on_device


def test_a_host_tensor_meeting_a_device_tensor_raises():
    weight = torch.ones(3, 3)
    mark_on_device(weight)
    with DeviceDiscipline():
        assert weight.device == ON_DEVICE and torch.ones(3).device == torch.device("cpu")
        with pytest.raises(DeviceMixUp, match="mul"):
            _ = weight * torch.ones(3, 3)
        assert on_device(weight * torch.ones(3, 3).to(weight.device))  # moved first: fine, and on the device
        assert on_device(weight * torch.tensor(2.0))  # a 0-dim host scalar, as CUDA allows
        assert on_device(weight[torch.tensor([0, 2])])  # a host index, as CUDA allows
        assert on_device(torch.zeros(2, device=weight.device)) and not on_device(torch.zeros(2))


def test_moves_are_copies_and_results_follow_their_inputs():
    weight = torch.ones(2)
    mark_on_device(weight)
    with DeviceDiscipline():
        back = weight.cpu()
        assert not on_device(back) and back is not weight and on_device(weight)
        back += 1  # a host copy: the device tensor is not written through it
        assert weight.tolist() == [1.0, 1.0]
        assert on_device((weight + 1).sum()) and on_device(weight.to(torch.float64))


def test_a_model_forward_with_its_inputs_left_on_the_host_raises():
    model, _ = tiny_random_model_and_tokenizer(seed=0)
    mark_on_device(model)
    ids = torch.tensor([[5, 6, 7]])
    with DeviceDiscipline(), torch.no_grad():
        with pytest.raises(DeviceMixUp, match="embedding"):
            model(input_ids=ids)
        logits = model(input_ids=ids.to(next(model.parameters()).device)).logits
        assert on_device(logits)
        loss = logits.float().logsumexp(-1).sum()
    assert torch.isfinite(loss)
