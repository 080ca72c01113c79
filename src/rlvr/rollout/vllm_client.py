"""Rollout engine that samples from a separate ``rlvr vllm-serve`` process (vLLM server mode).

The trainer's side needs neither vllm nor an HTTP library: stdlib ``urllib`` + ``json`` for the
requests, torch for the weights. Sampling is the colocated engine's (:mod:`rlvr.rollout.vllm_engine`:
same seeds per request, same vLLM settings, same completion parsing), so its departures from the
trainer's log-prob convention hold here too.

Weights: rank 0 of the training job (``push_weights=True``; the other DDP ranks pass False) opens
a standalone process group with the server's workers at construction (:mod:`rlvr.rollout.weight_transport`)
and pushes the policy (LoRA merged) then and at every :meth:`VLLMServerEngine.sync_weights`.

Version rule: every engine instance counts its pushes as if it made them, 1 at construction and
+1 per ``sync_weights`` (all ranks call it at the same steps), and sends that count with each
``/generate``; the server answers once it holds at least that version, so a rank never samples
from weights older than those rank 0 pushed for the same step. (A training job should build its
engines, then barrier: a non-pushing rank could otherwise see the version a previous job left on
the server before rank 0's construction resets it.)
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import torch

from rlvr.rollout.completion import Completion
from rlvr.rollout.sampling import Sampling
from rlvr.rollout.vllm_engine import (
    INSTALL_HINT,
    check_prompt_lengths,
    completion_from_sample,
    merged_state_dict,
    request_seeds,
    warn_warped_logprobs,
)
from rlvr.rollout.vllm_server import ARCHITECTURE_KEYS

_CONNECTION_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, OSError)


def policy_architecture(config) -> dict:
    """The fields a server's model must share with the policy (its /health ``architecture``)."""
    text = config.get_text_config()
    return {"model_type": config.model_type, "hidden_size": text.hidden_size,
            "num_hidden_layers": text.num_hidden_layers, "num_attention_heads": text.num_attention_heads,
            "num_key_value_heads": getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
            "vocab_size": text.vocab_size}


class ServerRefused(RuntimeError):
    """The server answered with an HTTP error."""


logger = logging.getLogger(__name__)

# a /generate answers when its last response is done: 15 x vllm_server_timeout (1 h by default), which
# also covers the server's wait for a weight version (`rlvr vllm-serve --weights-timeout`, 600 s)
GENERATE_TIMEOUT_FACTOR = 15


class VLLMServerEngine:
    """Batched sampling on a vLLM server holding a synced copy of the policy.

    Args:
        model: the training causal LM (transformers, or a PEFT LoRA wrapper of one).
        pad_token_id: unused (vLLM does not pad); kept for the common engine signature.
        eos_token_ids: ids that end a response (vLLM stop tokens, kept in the response).
        base_url: the server, e.g. ``http://host:8000``.
        timeout: seconds to wait for the server at construction, and for each call's answer (a weight
            push, a health check); a generation may take ``GENERATE_TIMEOUT_FACTOR`` times as long (its
            answer comes when every response is done; a server that dies is still noticed at once,
            its connection resets).
        group_port: the weight group's TCPStore port on the server's host (server worker 0 listens).
        tensor_parallel_size: the server's, checked (``vllm_tensor_parallel_size``).
        push_weights: rank 0 of a DDP job pushes the weights; the other ranks pass False.
        max_model_len: longest prompt + response; default (and at most) the server's.
    """

    supports_row_seeds = True  # generate(row_seeds=...): a request's draws do not depend on its batch
    # abilities (rlvr.rollout.engine.RolloutEngine): the server holds its own copy of the weights
    keeps_own_weights = True
    supports_async_generation = True
    is_correction_by_default = True
    supports_sleep = False
    optional_package = ("vllm", INSTALL_HINT)

    def __init__(
        self,
        model,
        *,
        pad_token_id: int,
        eos_token_ids: list[int],
        base_url: str,
        timeout: float = 240.0,
        group_port: int = 51216,
        tensor_parallel_size: int = 1,
        push_weights: bool = True,
        max_model_len: int | None = None,
    ):
        if not eos_token_ids:
            raise ValueError("the rollout engine needs at least one EOS token id")
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = list(eos_token_ids)
        self.base_url = (base_url if "://" in base_url else f"http://{base_url}").rstrip("/")
        self.timeout = float(timeout)
        self.group_port = int(group_port)
        self.tensor_parallel_size = int(tensor_parallel_size)
        self.push_weights = push_weights
        self._warned_warps = False
        self._group = None
        self.weights_version = 1  # the construction's push (by rank 0), then +1 per sync_weights
        health = self._wait_for_health()
        self._check_server(health, max_model_len)
        self.server_dtype = getattr(torch, health["dtype"])
        self.server_device = health.get("device", "cpu")
        if push_weights:
            self._init_group()
            self._push()

    # -- checks -------------------------------------------------------------------------------

    def _serve_command(self) -> str:
        name = getattr(self.model.config, "_name_or_path", "") or "MODEL"
        port = urllib.parse.urlparse(self.base_url).port or 80
        return f"rlvr vllm-serve --model {name} --port {port}"

    def _wait_for_health(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return self._request("GET", "/health", None, timeout=max(0.1, min(left, 10.0)))
            except urllib.error.HTTPError as error:
                raise ConnectionError(f"the vLLM server at {self.base_url} answered /health with HTTP "
                                      f"{error.code}: {_error_text(error)}") from None
            except _CONNECTION_ERRORS as error:
                last = error
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConnectionError(
                    f"no vLLM server answered at {self.base_url}/health within {self.timeout:g}s "
                    f"({_reason(last)}): start one with `{self._serve_command()}` on that host (docs/training.md, "
                    "'Server mode'), or point vllm_server_host / vllm_server_port at the running one")
            time.sleep(min(0.5, left))

    def _check_server(self, health: dict, max_model_len: int | None) -> None:
        ours, theirs = policy_architecture(self.model.config), health.get("architecture") or {}
        differ = [k for k in ARCHITECTURE_KEYS if ours.get(k) != theirs.get(k)]
        if differ:
            show = ", ".join
            name = getattr(self.model.config, "_name_or_path", "")
            raise ValueError(
                f"the vLLM server at {self.base_url} serves {health.get('model')!r} "
                f"({show(f'{k}={theirs.get(k)}' for k in differ)}), another architecture than the policy"
                f"{f' {name!r}' if name else ''} ({show(f'{k}={ours[k]}' for k in differ)}): "
                f"restart the server with the policy's model (`{self._serve_command()}`)")
        served = int(health["tensor_parallel_size"])
        if served != self.tensor_parallel_size:
            raise ValueError(
                f"the vLLM server at {self.base_url} runs with tensor_parallel_size {served}, but "
                f"vllm_tensor_parallel_size is {self.tensor_parallel_size}: set vllm_tensor_parallel_size={served} "
                f"(or restart the server with --tensor-parallel-size {self.tensor_parallel_size})")
        limit = int(health["max_model_len"])
        if max_model_len is not None and max_model_len > limit:
            raise ValueError(f"max_model_len {max_model_len} exceeds the vLLM server's {limit}: restart it "
                             f"with --max-model-len {max_model_len}, or ask for less")
        self.max_model_len = max_model_len or limit

    # -- HTTP ---------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: dict | None, *, timeout: float) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def _call(self, method: str, path: str, body: dict | None = None, *, during: str,
              timeout: float | None = None) -> dict:
        """One call; an HTTP error → ServerRefused (with the server's message), no answer → RuntimeError."""
        try:
            return self._request(method, path, body, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as error:
            raise ServerRefused(f"the vLLM server at {self.base_url} refused {path} (HTTP {error.code}): "
                                f"{_error_text(error)}") from None
        except (*_CONNECTION_ERRORS, json.JSONDecodeError) as error:
            raise RuntimeError(self._stopped(during, error)) from error

    def _stopped(self, during: str, error: BaseException | str) -> str:
        return (f"the vLLM server at {self.base_url} stopped answering during {during} ({_reason(error)}); "
                "the run's last checkpoint is intact: restart the server "
                f"(`{self._serve_command()}`) and rerun the same training command with resume=true")

    # -- weights ------------------------------------------------------------------------------

    def _init_group(self) -> None:
        from rlvr.rollout.weight_transport import WeightGroup

        host = urllib.parse.urlparse(self.base_url).hostname
        on_cuda = next(self.model.parameters()).device.type == "cuda"
        backend = "nccl" if self.server_device == "cuda" and on_cuda else "gloo"
        size = self.tensor_parallel_size + 1
        self._call("POST", "/init_weight_group", {"host": host, "port": self.group_port, "world_size": size,
                                                  "backend": backend, "timeout": self.timeout},
                   during="init_weight_group")
        try:
            self._group = WeightGroup(host, self.group_port, rank=size - 1, world_size=size, backend=backend,
                                      timeout=self.timeout)
        except (RuntimeError, ValueError) as error:  # torch's DistNetworkError / DistStoreError are RuntimeErrors
            raise RuntimeError(f"could not join the weight group of the vLLM server at {self.base_url} "
                               f"(TCPStore {host}:{self.group_port}, {backend}): {error}; the port must be free on "
                               "the server's host and reachable from here (vllm_server_group_port)") from error

    @torch.no_grad()
    def _push(self) -> None:
        from rlvr.rollout.weight_transport import tensor_meta

        weights = merged_state_dict(self.model)
        # Everything, tied copies included (on CPU vLLM keeps a packed copy of a tied lm_head).
        items = [(name, weights[name]) for name in sorted(weights)]
        outcome: dict = {}

        def post() -> None:
            try:
                outcome["answer"] = self._call("POST", "/update_weights",
                                               {"tensors": tensor_meta(items, self.server_dtype)},
                                               during="update_weights")
            except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
                outcome["error"] = error

        def check() -> None:
            if "error" in outcome:
                raise outcome["error"]

        thread = threading.Thread(target=post, name="rlvr-update-weights", daemon=True)
        thread.start()
        if self._group is None:
            raise RuntimeError("no weight group: the engine was closed (or built with push_weights=False)")
        try:
            self._group.send(items, dtype=self.server_dtype, check=check, timeout=self.timeout)
        except Exception as error:
            thread.join(min(self.timeout, 10.0))  # the server's answer says more than a broken broadcast
            if "error" in outcome and outcome["error"] is not error:
                raise outcome["error"] from error
            if isinstance(error, (ServerRefused, RuntimeError)) and "vLLM server" in str(error):
                raise
            raise RuntimeError(self._stopped("update_weights (broadcasting the weights)", error)) from error
        thread.join(self.timeout)
        if thread.is_alive():
            raise RuntimeError(self._stopped("update_weights", f"no answer within {self.timeout:g}s"))
        check()

    def sync_weights(self) -> None:
        """Push the training model's current weights (rank 0), and count the version on every rank."""
        if self.push_weights:
            self._push()
        self.weights_version += 1

    def close(self) -> None:
        """Leave the weight group (the server keeps its weights). A server that is gone has nothing to
        close: that is logged, not raised (the trainer closes while it may be handling that very error)."""
        group, self._group = self._group, None
        if group is not None:
            try:
                self._call("POST", "/close_weight_group", during="close_weight_group")
            except (RuntimeError, ServerRefused) as error:
                logger.warning("leaving the weight group of %s: %s", self.base_url, error)
            finally:
                group.close()

    # -- generation ---------------------------------------------------------------------------

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        sampling: Sampling,
        generator_seed: int | None = None,
        row_seeds: list[int] | None = None,
    ) -> list[Completion]:
        """Sample one completion per prompt, as :meth:`rlvr.rollout.vllm_engine.VLLMEngine.generate`."""
        check_prompt_lengths(prompts, max_new_tokens, self.max_model_len)
        if not self._warned_warps:
            self._warned_warps = warn_warped_logprobs(sampling)
        seeds = request_seeds(len(prompts), generator_seed, row_seeds)
        body = {"prompts": [list(map(int, p)) for p in prompts], "max_new_tokens": int(max_new_tokens),
                "sampling": dataclasses.asdict(sampling), "seeds": seeds, "eos_token_ids": self.eos_token_ids,
                "weights_version": self.weights_version}
        answer = self._call("POST", "/generate", body, during="generate",
                            timeout=GENERATE_TIMEOUT_FACTOR * self.timeout)
        completions = answer["completions"]
        if len(completions) != len(prompts):
            raise RuntimeError(f"the vLLM server at {self.base_url} returned {len(completions)} completions "
                               f"for {len(prompts)} prompts")
        return [completion_from_sample(c["token_ids"], c["logprobs"], self.eos_token_ids) for c in completions]


def _error_text(error: urllib.error.HTTPError) -> str:
    try:
        body = error.read().decode(errors="replace")
    except OSError:
        return str(error.reason)
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        return body.strip()[:500] or str(error.reason)
    if isinstance(parsed, dict):
        return str(parsed.get("error") or parsed.get("detail") or parsed)
    return str(parsed)


def _reason(error: BaseException | str) -> str:
    if isinstance(error, urllib.error.URLError) and not isinstance(error, urllib.error.HTTPError):
        error = error.reason
    if isinstance(error, str):
        return error
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
