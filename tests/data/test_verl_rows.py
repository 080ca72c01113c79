"""verl's parquet rows load as they are: chat prompt, gold from reward_model.ground_truth, columns kept."""

import re

import pytest

from rlvr.data import load_rows, normalize_row
from rlvr.train.rewarding import reward_columns

GSM8K = [  # (question, answer) as in openai/gsm8k
    (("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
      "clips did Natalia sell altogether in April and May?"),
     ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in "
      "April and May.\n#### 72")),
    (("Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did "
      "she earn?"),
     ("Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = "
      "$<<0.2*50=10>>10.\n#### 10")),
    ("A shop sold 1,200 pens on Monday and 300 on Tuesday. How many pens did it sell?",
     "1,200 + 300 = <<1200+300=1500>>1,500\n#### 1,500"),
]


def write_verl_gsm8k(path, split="train"):
    """verl's examples/data_preprocess/gsm8k.py, step for step, on the rows above."""
    import datasets

    def extract_solution(solution_str):
        solution = re.search("#### (\\-?[0-9\\.\\,]+)", solution_str)
        assert solution is not None
        final_solution = solution.group(0)
        return final_solution.split("#### ")[1].replace(",", "")

    data_source = "openai/gsm8k"
    instruction_following = 'Let\'s think step by step and output the final answer after "####".'

    def make_map_fn(split):
        def process_fn(example, idx):
            question_raw = example.pop("question")
            question = question_raw + " " + instruction_following
            answer_raw = example.pop("answer")
            solution = extract_solution(answer_raw)
            return {
                "data_source": data_source,
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": solution},
                "extra_info": {"split": split, "index": idx, "answer": answer_raw, "question": question_raw},
            }

        return process_fn

    dataset = datasets.Dataset.from_list([{"question": q, "answer": a} for q, a in GSM8K])
    dataset = dataset.map(function=make_map_fn(split), with_indices=True)
    dataset.to_parquet(str(path))
    return dataset


def test_verl_gsm8k_parquet_loads_with_the_gold_from_reward_model(tmp_path):
    path = tmp_path / "train.parquet"
    write_verl_gsm8k(path)
    import pyarrow.parquet

    # verl's columns only (the raw question/answer were popped): the gold can only come from reward_model
    assert pyarrow.parquet.read_schema(path).names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    rows = load_rows(str(path))
    assert [row["answer"] for row in rows] == ["72", "10", "1500"]
    first = rows[0]
    assert first["prompt"] == [{"role": "user", "content": GSM8K[0][0] + " Let's think step by step and output "
                                                           "the final answer after \"####\"."}]
    assert first["id"] == "train.parquet#0"
    columns = reward_columns(first)
    assert columns["reward_model"] == {"style": "rule", "ground_truth": "72"}
    assert columns["data_source"] == "openai/gsm8k" and columns["ability"] == "math"
    assert columns["extra_info"] == {"split": "train", "index": 0, "answer": GSM8K[0][1], "question": GSM8K[0][0]}


def test_a_verl_row_needs_a_usable_ground_truth():
    row = {"prompt": [{"role": "user", "content": "q"}], "reward_model": {"style": "rule", "ground_truth": "#### 7"}}
    assert normalize_row(row, 0, "verl")["answer"] == "7"
    assert normalize_row({**row, "answer": "8"}, 0, "verl")["answer"] == "8"  # a top-level answer comes first
    with pytest.raises(ValueError, match=r"'reward_model\.ground_truth' is a list"):
        normalize_row({**row, "reward_model": {"style": "rule", "ground_truth": ["7", "seven"]}}, 0, "verl")
    with pytest.raises(ValueError, match="field 'answer' is missing"):
        normalize_row({**row, "reward_model": {"style": "model"}}, 0, "verl")
