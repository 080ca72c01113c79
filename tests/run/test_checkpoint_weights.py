"""Which files of a checkpoint are the model's weights (rlvr.run.checkpoint_files.weight_files): the one
model.safetensors, or the shards an index names, or a LoRA run's adapter — never another ``*.safetensors`` the folder
happens to hold (the resume loaded every one before; a stray file made the model "not match")."""

import json

import pytest
import torch
from safetensors.torch import save_file

from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.run.checkpoint_check import checkpoint_problem
from rlvr.run.checkpoint_files import weight_files
from rlvr.run.checkpoints import load_model_weights


def _state(model) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone().contiguous() for name, value in model.state_dict().items()}


def _fresh():
    torch.manual_seed(1)
    model, _ = tiny_random_model_and_tokenizer()
    return model


def test_a_stray_safetensors_file_beside_the_model_is_not_loaded(tmp_path):
    source = _fresh()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(0.5)  # weights no fresh model has
    save_file(_state(source), str(tmp_path / "model.safetensors"))
    save_file({"not.a.model.key": torch.ones(3)}, str(tmp_path / "probe_activations.safetensors"))
    assert weight_files(tmp_path, adapter=False) == [tmp_path / "model.safetensors"]
    target = _fresh()
    load_model_weights(target, tmp_path)
    for (name, mine), theirs in zip(target.state_dict().items(), source.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs), name


def test_sharded_weights_load_from_their_index_and_a_missing_shard_is_named(tmp_path):
    source = _fresh()
    with torch.no_grad():
        for p in source.parameters():
            p.mul_(-1.0)
    state = _state(source)
    names = sorted(state)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(tmp_path / file))
    index = {"metadata": {}, "weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    save_file({"stray": torch.zeros(1)}, str(tmp_path / "extra.safetensors"))
    assert [f.name for f in weight_files(tmp_path, adapter=False)] == sorted(shards)
    target = _fresh()
    load_model_weights(target, tmp_path)
    assert all(torch.equal(target.state_dict()[k], state[k]) for k in names)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ValueError, match="model-00002-of-00002.safetensors"):
        load_model_weights(_fresh(), tmp_path)


def test_a_folder_without_the_model_file_is_refused_and_reported(tmp_path):
    save_file({"stray": torch.zeros(1)}, str(tmp_path / "something_else.safetensors"))
    assert weight_files(tmp_path, adapter=False) == [] and weight_files(tmp_path, adapter=True) == []
    with pytest.raises(ValueError, match="holds no model.safetensors"):
        load_model_weights(_fresh(), tmp_path)
    assert "model weights" in checkpoint_problem(tmp_path)
