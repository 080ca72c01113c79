"""Output paths checked before the model loads: UTF-8, and not inside another run through a link (issue 41, point 3)."""

import os

import pytest

from rlvr.config import build_config
from rlvr.run.folder import MARKER, check_not_nested, check_path_encodable
from rlvr.train import trainer as trainer_module
from rlvr.train.trainer import Trainer

from .cli_runs import reward_file


def _model_must_not_load(*args, **kwargs):
    raise AssertionError("the model was loaded before the output path was refused")


def _cfg(output_dir, tmp_path, **extra):
    return build_config({"model": "tiny-random", "data": "rg:basic_arithmetic:size=16", "max_steps": 1,
                         "prompts_per_step": 2, "num_generations": 2, "max_completion_length": 4,
                         "output_dir": output_dir, "progress_bar": False, "verifier_workers": 1,
                         "reward_funcs": [reward_file(tmp_path)], **extra})


def test_a_non_utf8_output_dir_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    """`runs/$'bad\\xffname'` trained, then failed at its first save with "'utf-8' codec can't encode"."""
    monkeypatch.setattr(trainer_module, "build_models", _model_must_not_load)
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/runs/bad\xffname")  # as Python holds a 0xff byte
    with pytest.raises(ValueError, match=r"output_dir=.*runs/bad\\xffname is not valid UTF-8 .*choose an output_dir"):
        Trainer(_cfg(bad, tmp_path))
    assert not (tmp_path / "runs").exists()  # nothing written


def test_a_non_utf8_logging_dir_is_refused_too(tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_module, "build_models", _model_must_not_load)
    bad = os.fsdecode(b"tb\xfe")
    with pytest.raises(ValueError, match=r"logging_dir=.*tb\\xfe is not valid UTF-8"):
        Trainer(_cfg(str(tmp_path / "run"), tmp_path, logging_dir=bad))


def test_utf8_names_beyond_ascii_are_accepted(tmp_path):
    check_path_encodable(tmp_path / "résultats-実験")


def test_a_link_into_another_run_is_refused_like_its_real_path(tmp_path, monkeypatch):
    """folder.py compared abspath: runs/link -> runs/a/sub passed where runs/a/sub was refused."""
    monkeypatch.setattr(trainer_module, "build_models", _model_must_not_load)
    outer = tmp_path / "a"
    (outer / "sub").mkdir(parents=True)
    (outer / MARKER).touch()
    link = tmp_path / "link"
    link.symlink_to(outer / "sub")
    with pytest.raises(ValueError, match=rf"output_dir={link} \(a link to {outer / 'sub'}\) is inside the run folder "
                                         rf"{outer}: "):
        Trainer(_cfg(str(link), tmp_path))
    with pytest.raises(ValueError, match=rf"is inside the run folder {outer}"):
        check_not_nested(link / "deeper")
    assert sorted(p.name for p in (outer / "sub").iterdir()) == []  # nothing written through the link
