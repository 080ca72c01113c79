"""rephrase_rows: output format, seeding, resuming after a crash, the solver check, errors."""

import json
import random

import pytest

from rlvr.data.rephrase import GenerationFailed, RuleRephraser, Tally, read_done_ids, rephrase_rows
from tests.helpers.hostile_names import files_under, hostile_names


def tag(rng):
    return "".join(rng.choice("abcdefghij") for _ in range(10))


class Echo:
    """Candidates that say which rng they got: 'Q (variant <10 letters drawn from the rng>)'."""

    name = "echo"

    def __init__(self):
        self.calls = []

    def rephrase(self, question, rngs):
        self.calls.append(question)
        return [f"{question} (variant {tag(rng)})" for rng in rngs]


def rows(count=6):
    return [{"id": f"q{i}", "prompt": f"Tom has {i} apples and Sara has {i + 1}. How many in all?",
             "answer": str(2 * i + 1)} for i in range(count)]


def run(path, **kwargs):
    kwargs = {"n": 2, "seed": 0, "progress": False, **kwargs}
    return rephrase_rows(kwargs.pop("rows", rows()), kwargs.pop("rephraser", RuleRephraser()), out_path=path,
                         **kwargs)


def test_writes_one_line_per_question_in_row_order(tmp_path):
    path = tmp_path / "sub" / "out.jsonl"
    tally = run(path, k=5)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in records] == [f"q{i}" for i in range(6)]
    for record in records:
        assert set(record) == {"id", "rephrasings", "rejected"}
        assert 1 <= len(record["rephrasings"]) <= 2
        assert list(record["rejected"]) == sorted(record["rejected"])
    assert tally.questions == 6 and tally.candidates == 30 and tally.resumed == 0
    assert sum(tally.kept.values()) == 6
    assert "questions rephrased: 6" in tally.summary()


def test_candidate_rngs_depend_on_seed_id_and_index_only(tmp_path):
    echo = Echo()
    run(tmp_path / "a.jsonl", rephraser=echo, rows=rows(3), k=3)
    first = (tmp_path / "a.jsonl").read_text().splitlines()
    run(tmp_path / "b.jsonl", rephraser=Echo(), rows=rows(3)[::-1], k=3)  # other order, same lines
    assert sorted((tmp_path / "b.jsonl").read_text().splitlines()) == sorted(first)
    expected = [f"{rows()[0]['prompt']} (variant {tag(random.Random(f'0:q0:{k}'))})" for k in range(2)]
    assert json.loads(first[0])["rephrasings"] == expected


def test_resume_after_a_crash_mid_line_gives_the_uninterrupted_file(tmp_path):
    full = tmp_path / "full.jsonl"
    run(full, rows=rows(8))
    lines = full.read_bytes().splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # died while writing line 4
    echo = Echo()
    tally = rephrase_rows(rows(8), RuleRephraser(), n=2, seed=0, out_path=crashed, progress=False)
    assert crashed.read_bytes() == full.read_bytes()
    assert tally.resumed == 3 and tally.questions == 5
    # A finished file: nothing left to do, nothing generated.
    tally = rephrase_rows(rows(8), echo, n=2, seed=0, out_path=crashed, progress=False)
    assert tally.questions == 0 and tally.resumed == 8 and echo.calls == []
    assert "nothing rephrased in this run" in tally.summary() and "mean 0.00" not in tally.summary()
    assert crashed.read_bytes() == full.read_bytes()


def test_read_done_ids_rejects_a_broken_complete_line(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "q0", "rephrasings": [], "rejected": {}}\nnot json\n{"id": "q2"}\n')
    with pytest.raises(ValueError, match="line 2 of .* delete that line"):
        read_done_ids(path)
    assert read_done_ids(tmp_path / "missing.jsonl") == set()


def test_solver_check_rejects_changed_answers_and_is_skipped_when_the_solver_fails_the_original(tmp_path):
    def solver(question):  # fails the original "hard" question; variants a and b change the answer
        if "(variant a" in question or "(variant b" in question:
            return "wrong"
        return None if "3 apples" in question else "1"

    data = [{"id": "ok", "prompt": "Tom has 2 apples. How many?", "answer": "1"},
            {"id": "hard", "prompt": "Tom has 3 apples. How many?", "answer": "3"}]
    tally = run(tmp_path / "out.jsonl", rows=data, rephraser=Echo(), n=8, k=16, solver=solver)
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    assert records["ok"]["rejected"].get("solver_wrong", 0) > 0
    assert not any("(variant a" in t or "(variant b" in t for t in records["ok"]["rephrasings"])
    assert len(records["ok"]["rephrasings"]) == 8
    assert "solver_wrong" not in records["hard"]["rejected"]  # the solver failed the original
    assert tally.solver_skipped == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be an int >= 1"),
    ({"n": 3, "k": 2}, "k must be an int >= 3"),
    ({"seed": -1}, "seed must be"),
    ({"rows": [{"id": "m", "prompt": [{"role": "user", "content": "Hi 2"}], "answer": "2"}]}, "plain-text prompt"),
])
def test_bad_arguments_and_rows_raise(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        run(tmp_path / "out.jsonl", **kwargs)


def test_tally_mean_and_histogram():
    tally = Tally(questions=4)
    tally.kept.update({0: 1, 2: 1, 4: 2})
    assert tally.mean_kept == pytest.approx((0 + 2 + 8) / 4)
    assert "histogram {kept: questions} 0: 1, 2: 1, 4: 2" in tally.summary()


class Silent:
    """A rephraser that fails (all None) on the questions whose id is in `failing`."""

    name = "silent"

    def __init__(self, failing):
        self.failing = failing

    def rephrase(self, question, rngs):
        fails = any(f"has {i} apples" in question for i in self.failing)
        return [None if fails else f"Please answer: {question}" for _ in rngs]


def test_a_question_without_any_candidate_is_not_written_and_is_retried(tmp_path):
    path = tmp_path / "out.jsonl"
    tally = run(path, rephraser=Silent(failing={2}))
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["q0", "q1", "q3", "q4", "q5"]
    assert tally.no_candidates == 1 and "not written; rerun to retry" in tally.summary()
    tally = run(path, rephraser=Silent(failing=set()))
    assert tally.questions == 1 and tally.resumed == 5
    assert json.loads(path.read_text().splitlines()[-1])["id"] == "q2"


def test_a_generator_that_gives_nothing_stops_the_run_early(tmp_path):
    path = tmp_path / "out.jsonl"
    with pytest.raises(GenerationFailed, match="no candidate for the first 5 questions"):
        run(path, rephraser=Silent(failing=range(100)), rows=rows(50))
    assert path.read_text() == ""


def test_hostile_row_ids_never_become_paths(tmp_path, monkeypatch):
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)  # so a relative "../../x" would land inside tmp_path, where it is seen
    names = hostile_names(tmp_path)
    hostile = [dict(row, id=name) for row, name in zip(rows(len(names)), names)]
    run(work / "out.jsonl", rows=hostile, k=3)
    assert [json.loads(line)["id"] for line in (work / "out.jsonl").read_text().splitlines()] == names
    assert files_under(tmp_path) == {"work/deep/out.jsonl"}
