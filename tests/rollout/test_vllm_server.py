"""vLLM server mode: `rlvr vllm-serve` in a subprocess and its client engine, against the colocated engine.

One server (tiny_llama of test_vllm_engine, head size 32, on a free port) serves the whole module;
the test that kills it runs last. The comparison engine is the colocated VLLMEngine in this process,
on the same model object: both sample with the same seeds from the same weights, so token ids are
equal and log-probs agree to rounding (TOL, as in test_vllm_engine). Weights travel over gloo.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.rollout import GREEDY, RolloutEngine, Sampling
from rlvr.rollout.vllm_client import VLLMServerEngine
from tests.rollout.test_vllm_engine import EOS, LONG_PROMPTS, PAD_ID, SHORT_PROMPTS, TOL, tiny_llama, vllm_engine

pytestmark = pytest.mark.vllm
PROMPTS = SHORT_PROMPTS * 3 + LONG_PROMPTS
WEIGHTS_TIMEOUT = 6  # the server's --weights-timeout: how long a /generate waits for a version


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model_dir, log_path, *extra: str):
        self.port, self.group_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        command = [sys.executable, "-m", "rlvr.cli", "vllm-serve", "--model", str(model_dir), "--host", "127.0.0.1",
                   "--port", str(self.port), "--weights-timeout", str(WEIGHTS_TIMEOUT), *extra]
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "HF_HUB_OFFLINE": "1"})

    def log(self) -> str:
        return self.log_path.read_text()[-4000:]

    def wait_healthy(self, limit: float = 240.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rlvr vllm-serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"rlvr vllm-serve not healthy within {limit}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


@pytest.fixture(scope="module")
def policy():
    return tiny_llama(seed=0)  # changed by test_sync_weights_follows_the_policy (and synced to both engines)


@pytest.fixture(scope="module")
def server(tmp_path_factory, policy):
    folder = tmp_path_factory.mktemp("vllm-serve")
    policy.save_pretrained(folder / "tiny-llama")
    server = Server(folder / "tiny-llama", folder / "server.log")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def colocated(policy):
    return vllm_engine(policy)


@pytest.fixture(scope="module")
def client(server, policy):
    return VLLMServerEngine(policy, pad_token_id=PAD_ID, eos_token_ids=[EOS], base_url=server.url,
                            group_port=server.group_port, timeout=60)


def assert_same(ours, ref):
    assert [c.token_ids for c in ours] == [c.token_ids for c in ref]
    assert [c.truncated for c in ours] == [c.truncated for c in ref]
    for a, b in zip(ours, ref):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), **TOL)


SETTINGS = [
    (Sampling(1.0), {"generator_seed": 3}),
    (Sampling(0.7, top_p=0.9, top_k=50, repetition_penalty=1.1), {"row_seeds": list(range(100, 100 + len(PROMPTS)))}),
    (GREEDY, {}),
]


def test_health_describes_the_served_model(server, client):
    with urllib.request.urlopen(server.url + "/health", timeout=10) as answer:
        import json

        health = json.load(answer)
    assert health["status"] == "ok" and health["tensor_parallel_size"] == 1 and health["dtype"] == "float32"
    assert health["architecture"] == {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                      "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 259}
    assert health["max_model_len"] == 1024 and health["weights_version"] == 1  # the client's first push
    assert isinstance(client, RolloutEngine)


@pytest.mark.parametrize(("sampling", "seeds"), SETTINGS)
def test_generation_equals_the_colocated_engine(client, colocated, sampling, seeds):
    ours = client.generate(PROMPTS, max_new_tokens=24, sampling=sampling, **seeds)
    assert_same(ours, colocated.generate(PROMPTS, max_new_tokens=24, sampling=sampling, **seeds))
    if sampling.temperature:
        assert {c.truncated for c in ours} == {True, False} or len({tuple(c.token_ids) for c in ours}) > 1


def test_the_tool_loop_through_the_server_is_the_colocated_ones(client, colocated):
    """vllm_mode=server with tools: the loop cuts, appends results and resumes through the client as through the
    colocated engine (tests/rollout/test_vllm_tools.py's format: every first turn calls), the same responses."""
    from rlvr.rollout.tool_loop import ToolLoop, ToolResult
    from tests.rollout.test_vllm_tools import CUT, RESULT, TOKENIZER, EveryFirstTurnCalls

    def looped(engine):
        return ToolLoop(engine, TOKENIZER, {"echo": lambda calls: [ToolResult("ABC") for _ in calls]},
                        tool_format=EveryFirstTurnCalls(), max_tool_calling_iterations=1)

    seeds = {"row_seeds": list(range(7, 7 + len(SHORT_PROMPTS) * 2))}
    prompts = SHORT_PROMPTS * 2
    served = looped(client).generate(prompts, max_new_tokens=24, sampling=Sampling(0.9), **seeds)
    assert_same(served, looped(colocated).generate(prompts, max_new_tokens=24, sampling=Sampling(0.9), **seeds))
    assert all(c.token_ids[CUT:CUT + len(RESULT)] == RESULT and 0 in c.tool_mask for c in served)


def test_sync_weights_follows_the_policy(client, colocated, policy):
    sampling, seeds = SETTINGS[0]
    before = client.generate(PROMPTS, max_new_tokens=24, sampling=sampling, **seeds)
    with torch.no_grad():  # an "update": every parameter moves
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    stale = client.generate(PROMPTS, max_new_tokens=24, sampling=sampling, **seeds)
    assert [c.token_ids for c in stale] == [c.token_ids for c in before]  # the server's copy until synced
    version = client.weights_version
    client.sync_weights()
    colocated.sync_weights()
    assert client.weights_version == version + 1
    for sampling, seeds in SETTINGS:
        after = client.generate(PROMPTS, max_new_tokens=24, sampling=sampling, **seeds)
        assert_same(after, colocated.generate(PROMPTS, max_new_tokens=24, sampling=sampling, **seeds))
    assert [c.token_ids for c in client.generate(PROMPTS, max_new_tokens=24, sampling=SETTINGS[0][0],
                                                 **SETTINGS[0][1])] != [c.token_ids for c in before]


def test_a_rank_waits_for_the_version_rank_0_pushes(client, server, policy):
    # Another DDP rank: same model, no push; it counts the same syncs. One sync ahead of the server,
    # its /generate waits until rank 0's push lands, then samples from the pushed weights.
    rank1 = VLLMServerEngine(policy, pad_token_id=PAD_ID, eos_token_ids=[EOS], base_url=server.url,
                             group_port=server.group_port, timeout=60, push_weights=False)
    rank1.weights_version = client.weights_version
    rank1.sync_weights()  # no push: only counts
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=rank1.generate(
        SHORT_PROMPTS, max_new_tokens=8, sampling=GREEDY)))
    thread.start()
    time.sleep(1.0)
    assert thread.is_alive(), "generated before rank 0 pushed the version it asked for"
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    client.sync_weights()
    thread.join(WEIGHTS_TIMEOUT)
    assert not thread.is_alive()
    assert [c.token_ids for c in result["out"]] == [
        c.token_ids for c in client.generate(SHORT_PROMPTS, max_new_tokens=8, sampling=GREEDY)]
    rank1.sync_weights()  # ahead again, and rank 0 never pushes: refused after --weights-timeout
    with pytest.raises(RuntimeError, match=r"HTTP 409.*weights_version \d+ asked for.*has not pushed"):
        rank1.generate(SHORT_PROMPTS, max_new_tokens=8, sampling=GREEDY)


def test_another_architecture_or_tensor_parallel_size_is_refused(server):
    config = tiny_llama().config.to_dict() | {"num_hidden_layers": 3}
    other = LlamaForCausalLM(LlamaConfig(**config))
    with pytest.raises(ValueError, match=r"serves .*tiny-llama.*\(num_hidden_layers=2\), another architecture than the policy "
                                         r"\(num_hidden_layers=3\)"):
        VLLMServerEngine(other, pad_token_id=PAD_ID, eos_token_ids=[EOS], base_url=server.url,
                         group_port=server.group_port, timeout=30)
    with pytest.raises(ValueError, match=r"tensor_parallel_size 1, but vllm_tensor_parallel_size is 2"):
        VLLMServerEngine(tiny_llama(), pad_token_id=PAD_ID, eos_token_ids=[EOS], base_url=server.url,
                         group_port=server.group_port, timeout=30, tensor_parallel_size=2, push_weights=False)


def test_too_long_a_prompt_is_refused_before_sending(client):
    with pytest.raises(ValueError, match="max_model_len 1024"):
        client.generate([[1] * 1020], max_new_tokens=8, sampling=GREEDY)


def test_no_server_fails_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"no vLLM server answered at http://127\.0\.0\.1:\d+/health within "
                                              r"1\.5s.*rlvr vllm-serve --model"):
        VLLMServerEngine(tiny_llama(), pad_token_id=PAD_ID, eos_token_ids=[EOS],
                         base_url=f"http://127.0.0.1:{free_port()}", timeout=1.5)
    assert time.monotonic() - start < 5


def post(url, body):
    import json

    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_bad_requests_get_an_http_error_naming_the_problem(server):
    status, body = post(server.url + "/generate", {"prompts": [[1], [2]], "max_new_tokens": 4, "seeds": [1],
                                                   "eos_token_ids": [EOS]})
    assert status == 400 and "seeds has 1 entries for 2 prompts" in body["error"]
    status, body = post(server.url + "/generate", {"prompts": [[1]], "max_new_tokens": 4, "eos_token_ids": [EOS],
                                                   "sampling": {"temperature": -1}})
    assert status == 400 and "temperature must be >= 0" in body["error"]
    status, body = post(server.url + "/update_weights", {"tensors": [["a", "float99", [2]]]})
    assert status == 400 and "unknown tensor dtype 'float99'" in body["error"]
    status, body = post(server.url + "/init_weight_group", {"host": "127.0.0.1", "port": 1, "world_size": 3})
    assert status == 400 and "the weight group has 2 members" in body["error"]


def test_a_new_trainer_takes_over_the_server(client, server, policy, colocated):
    # A second run against the same server: it opens a new weight group (version back to 1) and
    # its weights replace the first run's.
    client.close()
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    second = VLLMServerEngine(policy, pad_token_id=PAD_ID, eos_token_ids=[EOS], base_url=server.url,
                              group_port=server.group_port, timeout=60)
    colocated.sync_weights()
    with urllib.request.urlopen(server.url + "/health", timeout=10) as answer:
        import json

        assert json.load(answer)["weights_version"] == 1 == second.weights_version
    sampling, seeds = SETTINGS[0]
    assert_same(second.generate(PROMPTS, max_new_tokens=24, sampling=sampling, **seeds),
                colocated.generate(PROMPTS, max_new_tokens=24, sampling=sampling, **seeds))
    second.close()


def test_a_killed_server_gives_the_resume_message(server, policy):  # last: it kills the shared server
    client = VLLMServerEngine(policy, pad_token_id=PAD_ID, eos_token_ids=[EOS], base_url=server.url,
                              group_port=server.group_port, timeout=60)
    client.generate(SHORT_PROMPTS, max_new_tokens=4, sampling=GREEDY)
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(30)
    with pytest.raises(RuntimeError, match=r"vLLM server at http://127\.0\.0\.1:\d+ stopped answering during "
                                           r"generate.*last checkpoint is intact.*resume=true"):
        client.generate(SHORT_PROMPTS, max_new_tokens=4, sampling=GREEDY)
    with pytest.raises(RuntimeError, match=r"stopped answering during update_weights.*resume=true"):
        client.sync_weights()
