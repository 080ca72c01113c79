"""The Python API: callables in reward_funcs and in-memory data, recorded in the config by label."""

import pytest
import yaml

from rlvr.config import build_config
from rlvr.config.python_objects import callable_label, data_label
from rlvr.rewards.math_rewards import format_reward

ROWS = [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": "What is 2 + 2?", "answer": "4"}]


def test_callables_and_rows_become_labels_and_ride_along():
    local = lambda prompts, completions, **kw: [0.0] * len(completions)
    cfg = build_config({"model": "tiny-random", "reward_funcs": [format_reward, local, "accuracy"],
                        "reward_weights": [1, 0.5, 2], "data": ROWS})
    labels = cfg.reward.reward_funcs
    assert labels[0] == "rlvr.rewards.math_rewards.format_reward"  # imports back: usable from the CLI
    assert labels[1].startswith("python:test_python_objects.") or labels[1].startswith("python:tests.")
    assert labels[1].endswith("<lambda>") and labels[2] == "accuracy"
    assert [cfg.python.reward(spec) for spec in labels] == [format_reward, local, "accuracy"]
    assert cfg.python.data is ROWS
    assert cfg.data.data == data_label(ROWS) and cfg.data.data.startswith("python:list[2 rows, ")
    yaml.safe_dump(cfg.to_dict())  # config.yaml can still be written
    assert cfg == build_config({"model": "tiny-random", "reward_funcs": labels, "reward_weights": [1, 0.5, 2],
                                "data": cfg.data.data})  # the objects are not part of the comparison


def test_the_data_label_changes_with_the_rows():
    assert data_label(ROWS) != data_label([*ROWS[:1], {"prompt": "What is 2 + 2?", "answer": "5"}])


def test_two_lambdas_get_two_labels():
    a = lambda prompts, completions, **kw: []
    b = lambda prompts, completions, **kw: []
    cfg = build_config({"reward_funcs": [a, b]})
    assert len(set(cfg.reward.reward_funcs)) == 2
    assert [cfg.python.reward(s) for s in cfg.reward.reward_funcs] == [a, b]


def test_a_datasets_dataset_is_accepted_and_a_dataset_dict_refused():
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_list(ROWS)
    cfg = build_config({"data": dataset})
    assert cfg.python.data is dataset and cfg.data.data.startswith("python:Dataset[2 rows, ")
    with pytest.raises(TypeError, match=r"pick a split, e\.g\. dataset\['train'\]"):
        build_config({"data": datasets.DatasetDict({"train": dataset})})
    with pytest.raises(TypeError, match="list of row dicts"):
        build_config({"data": ["What is 1 + 1?"]})


def test_python_data_cannot_be_named_from_the_command_line():
    from rlvr.data import load_rows

    with pytest.raises(ValueError, match="given from Python"):
        load_rows(data_label(ROWS))


def test_a_function_of_a_module_is_labelled_by_its_dotted_name():
    from rlvr.rewards.registry import resolve_reward

    label = callable_label(format_reward)
    assert resolve_reward(label) is format_reward
    with pytest.raises(ValueError, match="pass the callable again from Python"):
        resolve_reward(callable_label(lambda prompts, completions, **kw: []))
