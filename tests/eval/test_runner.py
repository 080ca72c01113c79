"""evaluate(): output format, pass@k from known counts, resume, refused settings, row seeding."""

import copy
import hashlib
import json
from pathlib import Path

import pytest
import torch

from rlvr.eval import EvalSettings, evaluate, pass_at_k, runner
from rlvr.eval.problems_file import problems_path
from rlvr.eval.seeding import row_seed
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rewards import VerifyResult
from tests.helpers.hostile_names import files_under, hostile_names

TOP_KEYS = {"model", "settings", "datasets"}
SETTINGS_KEYS = {"n", "k", "temperature", "top_p", "max_completion_length", "seed", "instruction",
                 "system_prompt", "greedy", "answer_extraction"}
DATASET_KEYS = {"num_problems", "pass@k", "greedy_accuracy", "frac_uniform", "frac_all_wrong", "diversity",
                "timeouts"}


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = tiny_random_model_and_tokenizer(seed=0)
    model.eval()
    return model, tokenizer


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def _run(tiny, specs, out, **overrides):
    kwargs = {"n": 4, "ks": [1, 2, 4], "temperature": 1.0, "top_p": 0.95, "max_completion_length": 8,
              "model_name": "tiny-random"}
    kwargs.update(overrides)
    return evaluate(*tiny, specs, EvalSettings(**kwargs), out_path=out, progress=False)


def test_real_run_on_unreachable_golds(tiny, tmp_path):
    # Golds a random byte-level model cannot write; greedy on; real verifier pool.
    data = _jsonl(tmp_path / "toy.jsonl", [{"prompt": f"What is {i} + {i}?", "answer": f"{1000 + i}987"}
                                           for i in range(3)])
    out = tmp_path / "res.json"
    result = _run(tiny, [data], out, greedy=True)
    assert json.loads(out.read_text()) == result
    assert set(result) == TOP_KEYS and set(result["settings"]) == SETTINGS_KEYS
    assert result["model"] == "tiny-random" and result["settings"]["k"] == [1, 2, 4]
    block = result["datasets"][data]
    assert set(block) == DATASET_KEYS
    assert block["num_problems"] == 3
    assert block["pass@k"] == {"1": 0.0, "2": 0.0, "4": 0.0}
    assert block["greedy_accuracy"] == 0.0
    assert block["frac_uniform"] == 1.0 and block["frac_all_wrong"] == 1.0
    assert block["diversity"] is None and block["timeouts"] == 0
    lines = problems_path(out).read_text().splitlines()
    assert json.loads(lines[0])["settings"]["n"] == 4
    assert [json.loads(line)["id"] for line in lines[1:]] == ["toy.jsonl#0", "toy.jsonl#1", "toy.jsonl#2"]
    assert json.loads(lines[1]) == {"dataset": data, "id": "toy.jsonl#0", "n": 4, "correct": 0,
                                    "problem": runner.problem_fingerprint({"prompt": "What is 0 + 0?",
                                                                           "answer": "1000987"}),
                                    "greedy_correct": False, "diversity": None, "timeouts": 0}
    assert json.loads(lines[0])["settings"]["dtype"] == "float32"  # read from the model's parameters


class CountingPool:
    """Fake VerifierPool: gold "c,t" → the first c samples of that problem correct, the next t time out."""

    def __init__(self, num_workers=1, timeout_s=1.0):
        self.seen: dict[str, int] = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def verify_batch(self, golds, preds):
        out = []
        for gold in golds:
            c, t = map(int, gold.split(","))
            i = self.seen.get(gold, 0)
            self.seen[gold] = i + 1
            out.append(VerifyResult(correct=i < c, timed_out=c <= i < c + t))
        return out


def test_pass_at_k_in_the_file_equals_the_hand_values(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "VerifierPool", CountingPool)
    data = _jsonl(tmp_path / "known.jsonl", [{"id": "a", "prompt": "qa", "answer": "3,1"},
                                             {"id": "b", "prompt": "qb", "answer": "0,0"},
                                             {"id": "c", "prompt": "qc", "answer": "8,0"}])
    out = tmp_path / "known.json"
    _run(tiny, [data], out, n=8, ks=[1, 2, 4, 8])
    block = json.loads(out.read_text())["datasets"][data]
    # c = 3, 0, 8 of n = 8
    assert block["pass@k"]["1"] == pytest.approx((3 / 8 + 0 + 1) / 3)  # 11/24
    assert block["pass@k"]["2"] == pytest.approx((1 - 10 / 28 + 0 + 1) / 3)  # C(5,2)/C(8,2) = 10/28
    assert block["pass@k"]["4"] == pytest.approx((1 - 5 / 70 + 0 + 1) / 3)  # C(5,4)/C(8,4) = 5/70
    assert block["pass@k"]["8"] == pytest.approx(2 / 3)  # n − c < k for a and c
    assert block["pass@k"]["4"] == pytest.approx((pass_at_k(8, 3, 4) + pass_at_k(8, 0, 4) + pass_at_k(8, 8, 4)) / 3)
    assert block["frac_uniform"] == pytest.approx(2 / 3)
    assert block["frac_all_wrong"] == pytest.approx(1 / 3)
    assert block["timeouts"] == 1


class TextPool(CountingPool):
    """Fake VerifierPool whose verdict is a fixed function of the sampled text (extraction patched out)."""

    def verify_batch(self, golds, preds):
        return [VerifyResult(correct=hashlib.sha256(p.encode()).digest()[0] % 2 == 0) for p in preds]


@pytest.fixture
def text_verdicts(monkeypatch):
    monkeypatch.setattr(runner, "VerifierPool", TextPool)
    monkeypatch.setattr(runner, "extract_answer", lambda text, mode: text)


def _four_problems(tmp_path) -> str:
    return _jsonl(tmp_path / "four.jsonl", [{"prompt": f"question number {i}" + " pad" * i, "answer": "1"}
                                            for i in range(4)])


def test_resume_after_interruption_gives_the_uninterrupted_result(tiny, tmp_path, text_verdicts):
    data = _four_problems(tmp_path)
    whole = _run(tiny, [data], tmp_path / "whole.json", batch_size=64)
    lines = problems_path(tmp_path / "whole.json").read_text().splitlines()
    counts = [json.loads(line)["correct"] for line in lines[1:]]
    assert 0 < sum(counts) < 16  # the verdicts vary, so equality below means the same samples

    out = tmp_path / "resumed.json"
    _run(tiny, [data], out, limit=2, batch_size=4)  # one problem per generate call
    problems = problems_path(out)
    header, first, second = problems.read_text().splitlines()
    problems.write_text(f"{header}\n{first}\n{second[: len(second) // 2]}")  # killed mid-write
    resumed = _run(tiny, [data], out, batch_size=8)  # two problems per call
    assert resumed == whole
    assert json.loads(out.read_text()) == whole
    lines = problems.read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line) for line in lines)
    assert [json.loads(line)["correct"] for line in lines[1:]] == counts


def test_rerun_skips_finished_problems(tiny, tmp_path, monkeypatch):
    data = _four_problems(tmp_path)
    out = tmp_path / "r.json"
    first = _run(tiny, [data], out)

    def no_generation(*args, **kwargs):
        raise AssertionError("a finished problem was generated again")

    monkeypatch.setattr(runner._ChunkEvaluator, "run", no_generation)
    second = _run(tiny, [data], out, ks=[1, 4])  # k is not a sampling setting: allowed to change
    assert second["settings"]["k"] == [1, 4]
    assert second["datasets"][data]["pass@k"] == {k: first["datasets"][data]["pass@k"][k] for k in ("1", "4")}
    assert len(problems_path(out).read_text().splitlines()) == 1 + 4


@pytest.mark.parametrize(("change", "named"), [({"n": 2, "ks": [1, 2]}, "n: 4 → 2"),
                                               ({"temperature": 0.5}, "temperature: 1.0 → 0.5"),
                                               ({"seed": 1}, "seed: 0 → 1"),
                                               ({"model_name": "other"}, "model: 'tiny-random' → 'other'"),
                                               ({"chat_template_kwargs": {"enable_thinking": False}},
                                                "chat_template_kwargs: None → {'enable_thinking': False}")])
def test_changed_settings_are_refused(tiny, tmp_path, change, named):
    data = _four_problems(tmp_path)
    out = tmp_path / "s.json"
    _run(tiny, [data], out, limit=1)
    with pytest.raises(ValueError, match="other settings") as info:
        _run(tiny, [data], out, **change)
    assert named in str(info.value) and "delete" in str(info.value)


def test_a_bfloat16_resume_of_a_float32_file_is_refused(tiny, tmp_path):
    # Issue 16: a problems file mixing fp32 and bf16 problems was accepted.
    data = _four_problems(tmp_path)
    out = tmp_path / "dtype.json"
    _run(tiny, [data], out, limit=1)
    bf16 = (copy.deepcopy(tiny[0]).to(torch.bfloat16), tiny[1])
    with pytest.raises(ValueError, match="other settings") as info:
        _run(bf16, [data], out)
    assert "dtype: 'float32' → 'bfloat16'" in str(info.value) and "--out" in str(info.value)
    assert len(problems_path(out).read_text().splitlines()) == 1 + 1  # nothing was added


def test_changed_data_under_the_same_spec_is_refused(tiny, tmp_path):
    rows = [{"prompt": f"question number {i}", "answer": "1"} for i in range(3)]
    data = _jsonl(tmp_path / "edited.jsonl", rows)
    out = tmp_path / "edited.json"
    _run(tiny, [data], out, limit=2)
    _run(tiny, [data], out)  # the same data: resumes (adds problem 3)
    rows[1]["answer"] = "2"  # a recorded problem whose gold changed
    _jsonl(tmp_path / "edited.jsonl", rows)
    with pytest.raises(ValueError, match="edited.jsonl#1") as info:
        _run(tiny, [data], out)
    assert "another prompt or answer" in str(info.value) and "--out" in str(info.value)


def test_a_file_of_the_format_before_the_dtype_check_is_refused_by_its_settings(tiny, tmp_path):
    data = _four_problems(tmp_path)
    out = tmp_path / "old.json"
    _run(tiny, [data], out, limit=2)
    header, *records = (json.loads(line) for line in problems_path(out).read_text().splitlines())
    del header["settings"]["dtype"]
    for record in records:
        del record["problem"]
    _jsonl(problems_path(out), [header, *records])  # as written before issue 16
    with pytest.raises(ValueError, match="other settings") as info:
        _run(tiny, [data], out)
    assert "dtype: None → 'float32'" in str(info.value)


def test_a_record_line_that_is_not_a_problem_is_refused(tiny, tmp_path):
    data = _four_problems(tmp_path)
    out = tmp_path / "damaged.json"
    _run(tiny, [data], out, limit=2)
    header, _first, second = problems_path(out).read_text().splitlines()
    problems_path(out).write_text(f"{header}\n{{\"dataset\": 1}}\n{second}\n")
    with pytest.raises(ValueError, match="line 2 is not a problem record"):
        _run(tiny, [data], out)


def test_k_larger_than_n_is_refused_before_any_work(tiny, tmp_path):
    with pytest.raises(ValueError, match="k=8 is larger than n=4"):
        _run(tiny, ["gsm8k-100"], tmp_path / "x.json", ks=[1, 8])
    assert not problems_path(tmp_path / "x.json").exists()


def test_row_seeds_depend_only_on_their_key():
    assert row_seed(0, "gsm8k-100", "gsm8k-100:1", 3) == row_seed(0, "gsm8k-100", "gsm8k-100:1", 3)
    seeds = {row_seed(s, d, i, j) for s in (0, 1) for d in ("a", "b") for i in ("x", "y") for j in range(4)}
    assert len(seeds) == 32 and all(0 <= s < 2**63 for s in seeds)


def test_diversity_is_recorded_per_problem_and_averaged(tiny, tmp_path):
    pytest.importorskip("sentence_transformers", reason="needs the embed extra: pip install 'rlvr[embed]'")
    data = _four_problems(tmp_path)
    out = tmp_path / "div.json"
    result = _run(tiny, [data], out, limit=2, diversity=True)
    values = [json.loads(line)["diversity"] for line in problems_path(out).read_text().splitlines()[1:]]
    assert len(values) == 2 and all(isinstance(v, float) and v >= 0 for v in values)
    assert result["datasets"][data]["diversity"] == pytest.approx(sum(values) / 2)


def test_hostile_dataset_names_and_row_ids_never_become_paths(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "VerifierPool", CountingPool)
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)  # so a relative "../../x" would land inside tmp_path, where it is seen
    names = hostile_names(tmp_path)
    specs = {name: [{"id": name, "prompt": "q", "answer": "0,0"}] for name in names}
    specs["ids"] = [{"id": name, "prompt": "q", "answer": "0,0"} for name in names]
    result = _run(tiny, specs, work / "out" / "e.json", n=2, ks=[1, 2])
    assert list(result["datasets"]) == [*names, "ids"] and result["datasets"]["ids"]["num_problems"] == len(names)
    assert files_under(tmp_path) == {"work/deep/out/e.json", "work/deep/out/e.json.problems.jsonl"}


def test_log_samples_writes_every_response_and_its_verdict(tiny, tmp_path, text_verdicts):
    data = _four_problems(tmp_path)
    out = tmp_path / "logged.json"
    result = _run(tiny, [data], out, log_samples=True)
    rows = [json.loads(line) for line in runner.samples_path(out).read_text().splitlines()]
    assert len(rows) == 4 * 4  # problems x n
    assert {(r["id"], r["sample"]) for r in rows} == {(f"four.jsonl#{i}", j) for i in range(4) for j in range(4)}
    problems = {json.loads(line)["id"]: json.loads(line) for line in problems_path(out).read_text().splitlines()[1:]}
    for pid, problem in problems.items():  # the logged verdicts are the ones counted
        mine = [r for r in rows if r["id"] == pid]
        assert sum(r["correct"] for r in mine) == problem["correct"]
        assert all(r["extracted"] == r["completion"] and r["answer"] == "1" for r in mine)  # extraction patched
    assert result == _run(tiny, [data], tmp_path / "plain.json")  # logging changes no number
    assert not runner.samples_path(tmp_path / "plain.json").exists()


def _settings(**overrides) -> EvalSettings:
    kwargs = {"n": 4, "ks": [1, 2, 4], "temperature": 1.0, "top_p": 0.95, "max_completion_length": 8}
    return EvalSettings(**(kwargs | overrides))


@pytest.mark.parametrize(("change", "message"), [({"n": 0}, "n must be a positive int, got 0"),
                                                 ({"ks": []}, "ks is empty"),
                                                 ({"ks": [1, 0]}, "every k must be a positive int"),
                                                 ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
                                                 ({"temperature": -1.0}, "temperature must be >= 0"),
                                                 ({"batch_size": True}, "batch_size must be a positive int"),
                                                 ({"limit": 0}, "limit must be a positive int"),
                                                 ({"max_completion_length": 0}, "max_completion_length must be"),
                                                 ({"answer_extraction": "last"}, "answer_extraction must be one of")])
def test_bad_settings_are_refused_when_built(change, message):
    with pytest.raises(ValueError, match=message):
        _settings(**change)


def test_settings_sort_ks_and_copy_the_template_variables():
    kwargs = {"enable_thinking": False}
    settings = _settings(ks=[4, 1, 4, 2], chat_template_kwargs=kwargs)
    kwargs["enable_thinking"] = True
    assert settings.ks == (1, 2, 4) and settings.chat_template_kwargs == {"enable_thinking": False}
    with pytest.raises(AttributeError):
        settings.n = 8  # frozen: one validated object


def test_the_problems_header_keeps_its_keys():
    # A problems file written before is resumed only if this header is unchanged: the keys, and
    # chat_template_kwargs / raw_strings present only when given.
    header = runner.result_settings(_settings(model_name="m"), dtype="float32")
    assert header == {"model": "m", "dtype": "float32", "n": 4, "temperature": 1.0, "top_p": 0.95,
                      "max_completion_length": 8, "seed": 0, "instruction": runner.AUTO_INSTRUCTION,
                      "system_prompt": None, "greedy": False, "answer_extraction": runner.DEFAULT_EXTRACTION,
                      "diversity": False}
    given = runner.result_settings(_settings(model_name="m", chat_template_kwargs={"enable_thinking": False},
                                             raw_strings=True, batch_size=8, limit=2, log_samples=True),
                                   dtype="bfloat16")
    assert given == header | {"dtype": "bfloat16", "chat_template_kwargs": {"enable_thinking": False},
                              "raw_strings": True}
