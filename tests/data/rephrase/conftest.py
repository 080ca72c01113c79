"""Shared rows and the acceptance run (rules, N=4, seed 0) on the three offline sources."""

import pytest

from rlvr.data import load_rows
from rlvr.data.rephrase import RuleRephraser, rephrase_rows

SOURCES = ("gsm8k-100", "rg:basic_arithmetic:size=100", "rg:chain_sum:size=100")


@pytest.fixture(scope="session")
def source_rows():
    return {spec: load_rows(spec) for spec in SOURCES}


@pytest.fixture(scope="session")
def rules_outputs(source_rows, tmp_path_factory):
    """spec → (rows, path of the rules output, tally), N = 4, K = 8, seed 0."""
    out = {}
    for spec, rows in source_rows.items():
        path = tmp_path_factory.mktemp("rules") / "out.jsonl"
        tally = rephrase_rows(rows, RuleRephraser(), n=4, seed=0, out_path=path, progress=False)
        out[spec] = (rows, path, tally)
    return out


@pytest.fixture
def server(monkeypatch):
    """A loopback OpenAI-compatible server (tests/helpers/openai_server.py), proxies bypassed."""
    from tests.helpers.openai_server import FakeServer

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    fake = FakeServer()
    yield fake
    fake.close()
