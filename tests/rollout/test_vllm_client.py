"""The vLLM server client's checks and error handling, against a stdlib HTTP stub (no vllm needed),
and the gloo weight transport between two members in one process."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from rlvr.rollout import GREEDY, RolloutEngine, Sampling
from rlvr.rollout.names import VLLM_SERVER_ENGINE
from rlvr.rollout.vllm_client import ServerRefused, VLLMServerEngine
from rlvr.rollout.weight_transport import WeightGroup, plan_buckets, tensor_meta
from tests.rollout.test_vllm_engine import EOS, PAD_ID, tiny_llama

ARCHITECTURE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                "num_key_value_heads": 1, "vocab_size": 259}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stub:
    """/health from ``health``; POST paths answer ``replies[path]`` = (status, body); records bodies."""

    def __init__(self, **health):
        self.health = {"status": "ok", "model": "/models/tiny", "architecture": dict(ARCHITECTURE),
                       "tensor_parallel_size": 1, "max_model_len": 64, "dtype": "float32", "device": "cpu",
                       "weights_version": 0, **health}
        self.health_status = 200
        self.replies: dict[str, tuple[int, dict]] = {}
        self.bodies: list[tuple[str, dict]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(stub.health_status, stub.health if stub.health_status == 200 else {"error": "no weights"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                stub.bodies.append((self.path, body))
                self._send(*stub.replies.get(self.path, (404, {"error": f"no {self.path}"})))

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stub():
    server = Stub()
    yield server
    server.close()


def engine(url, **options):
    return VLLMServerEngine(tiny_llama(), pad_token_id=PAD_ID, eos_token_ids=[EOS], base_url=url,
                            push_weights=False, timeout=options.pop("timeout", 5.0), **options)


def test_registered_and_keeps_the_engine_contract(stub):
    assert VLLM_SERVER_ENGINE == "rlvr.rollout.vllm_client:VLLMServerEngine"
    client = engine(stub.url)
    assert isinstance(client, RolloutEngine) and client.supports_row_seeds and client.eos_token_ids == [EOS]


def test_another_architecture_is_refused_naming_both(stub):
    stub.health["architecture"] |= {"hidden_size": 576, "num_hidden_layers": 30}
    with pytest.raises(ValueError, match=r"serves '/models/tiny' \(hidden_size=576, num_hidden_layers=30\), another "
                                         r"architecture than the policy \(hidden_size=64, num_hidden_layers=2\)"):
        engine(stub.url)


def test_tensor_parallel_size_and_max_model_len_are_checked(stub):
    stub.health["tensor_parallel_size"] = 2
    with pytest.raises(ValueError, match="tensor_parallel_size 2, but vllm_tensor_parallel_size is 1"):
        engine(stub.url)
    assert engine(stub.url, tensor_parallel_size=2).max_model_len == 64
    with pytest.raises(ValueError, match="max_model_len 128 exceeds the vLLM server's 64"):
        engine(stub.url, tensor_parallel_size=2, max_model_len=128)


def test_generate_sends_seeds_and_version_and_parses_completions(stub):
    client = engine(stub.url)
    stub.replies["/generate"] = (200, {"completions": [{"token_ids": [5, EOS, 7], "logprobs": [-1.0, -2.0, -3.0]},
                                                       {"token_ids": [5, 6], "logprobs": [-0.5, -0.25]}]})
    out = client.generate([[1, 2], [3]], max_new_tokens=3, sampling=Sampling(0.7, top_p=0.9), row_seeds=[11, -1])
    assert [(c.token_ids, c.logprobs, c.truncated) for c in out] == [([5, EOS], [-1.0, -2.0], False),
                                                                     ([5, 6], [-0.5, -0.25], True)]
    path, body = stub.bodies[-1]
    assert path == "/generate" and body["prompts"] == [[1, 2], [3]] and body["eos_token_ids"] == [EOS]
    assert body["seeds"] == [11, (-1) % 2**63] and body["weights_version"] == 1
    assert body["sampling"] == {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "min_p": None,
                                "repetition_penalty": 1.0}
    client.sync_weights()  # a rank that does not push still counts
    client.generate([[1, 2], [3]], max_new_tokens=3, sampling=GREEDY)
    assert stub.bodies[-1][1]["weights_version"] == 2 and stub.bodies[-1][1]["seeds"] == [None, None]


def test_a_server_error_is_raised_with_its_message(stub):
    client = engine(stub.url)
    stub.replies["/generate"] = (500, {"error": "/generate failed: RuntimeError: engine core died"})
    with pytest.raises(ServerRefused, match=r"refused /generate \(HTTP 500\): /generate failed: RuntimeError: "
                                            r"engine core died"):
        client.generate([[1]], max_new_tokens=2, sampling=GREEDY)
    with pytest.raises(ValueError, match="exceeds the vLLM engine's max_model_len 64"):
        client.generate([[1] * 60], max_new_tokens=8, sampling=GREEDY)  # checked here, before sending


def test_a_vanished_server_gives_the_resume_message(stub):
    client = engine(stub.url)
    stub.close()
    with pytest.raises(RuntimeError, match=r"vLLM server at http://127\.0\.0\.1:\d+ stopped answering during "
                                           r"generate.*last checkpoint is intact.*resume=true"):
        client.generate([[1]], max_new_tokens=2, sampling=GREEDY)


def test_no_server_fails_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"no vLLM server answered at http://127\.0\.0\.1:\d+/health within 1s "
                                              r"\(.*\): start one with `rlvr vllm-serve --model"):
        engine(f"http://127.0.0.1:{free_port()}", timeout=1.0)
    assert time.monotonic() - start < 3


def test_an_unhealthy_server_is_reported(stub):
    stub.health_status = 503
    with pytest.raises(ConnectionError, match=r"answered /health with HTTP 503: no weights"):
        engine(stub.url)


def test_weight_transport_round_trip_over_gloo():
    weights = [("a", torch.randn(3, 4)), ("b", torch.arange(5.0)), ("c", torch.randn(2).to(torch.bfloat16)),
               ("d", torch.randn(2, 2))]
    meta = tensor_meta(weights, torch.bfloat16)
    assert [m[1] for m in meta] == ["bfloat16"] * 4
    assert [len(b) for b in plan_buckets(tensor_meta(weights))] == [2, 1, 1]  # one dtype per bucket
    assert [len(b) for b in plan_buckets(tensor_meta(weights), bucket_bytes=48)] == [1, 1, 1, 1]
    port, received = free_port(), {}

    def worker():
        group = WeightGroup("127.0.0.1", port, rank=0, world_size=2, backend="gloo", timeout=30)
        received.update((name, t.clone()) for name, t in group.receive(meta))
        group.close()

    thread = threading.Thread(target=worker)
    thread.start()
    trainer = WeightGroup("127.0.0.1", port, rank=1, world_size=2, backend="gloo", timeout=30)
    trainer.send(weights, dtype=torch.bfloat16)
    thread.join(30)
    trainer.close()
    assert list(received) == ["a", "b", "c", "d"]
    for name, tensor in weights:
        assert received[name].dtype == torch.bfloat16 and torch.equal(received[name], tensor.to(torch.bfloat16))


def test_serve_help_loads_neither_torch_nor_vllm():
    import subprocess
    import sys

    code = ("import sys\nfrom rlvr.cli import main\ntry:\n    main(['vllm-serve', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint(sorted(m for m in ('torch', 'vllm', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "--tensor-parallel-size" in out and "--kv-cache-tokens" in out and out.strip().endswith("[]")
