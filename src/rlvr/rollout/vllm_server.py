"""The vLLM generation server of ``rlvr vllm-serve`` (the command: rlvr.vllm_serve_cli), which the trainer samples
from and pushes weights into.

One process: an in-process ``vllm.LLM`` (for tensor_parallel_size K > 1, vLLM's multiprocessing
executor with K workers) behind a FastAPI app served by uvicorn. The engine settings are the
colocated engine's (:mod:`rlvr.rollout.vllm_engine`): token ids in and out, processed log-probs,
vLLM's own sampling defaults, eager mode; requests are built by the same functions, so a server
and a colocated engine with the same weights and seeds return the same completions.

Endpoints (JSON in and out; an error is HTTP 4xx/5xx with ``{"error": message}``):

- ``GET /health``: model, architecture, tensor_parallel_size, max_model_len, dtype, device,
  weights_version.
- ``POST /generate`` ``{prompts, max_new_tokens, sampling, seeds, eos_token_ids, weights_version}``
  → ``{completions: [{token_ids, logprobs}]}``: waits (at most ``--weights-timeout`` s) until the
  server's weights_version reaches the one asked for, so no DDP rank samples from weights older
  than those rank 0 pushed for the same step.
- ``POST /init_weight_group`` ``{host, port, world_size, backend}``: weights_version = 0; the K
  workers join a standalone group (ranks 0..K-1, the trainer K; :mod:`rlvr.rollout.weight_transport`)
  in a background thread: the call returns before the trainer joins.
- ``POST /update_weights`` ``{tensors: [[name, dtype, shape], ...]}``: the workers receive the
  tensors by broadcast from the trainer and reload them; prefix cache reset; weights_version += 1.
- ``POST /close_weight_group``.

Generation, weight updates and the group's set-up hold one lock: an update waits for the
generation in flight, and the reverse.

Only stdlib, at import: ``rlvr vllm-serve --help`` loads neither vllm nor torch.
"""

import logging
import threading
import time

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8000
DEFAULT_GROUP_PORT = 51216
WORKER_EXTENSION = "rlvr.rollout.vllm_worker.WeightSync"  # vLLM: a dotted qualname
ARCHITECTURE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "vocab_size")


class ServerError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class WeightServer:
    """The engine and its state; each method is one endpoint."""

    def __init__(self, llm, *, model: str, tensor_parallel_size: int, dtype: str, device: str,
                 weights_timeout: float):
        self.llm = llm
        self.model = model
        self.tensor_parallel_size = tensor_parallel_size
        self.dtype = dtype
        self.device = device
        self.weights_timeout = weights_timeout
        self.max_model_len = int(llm.model_config.max_model_len)
        hf, text = llm.model_config.hf_config, llm.model_config.hf_text_config
        self.architecture = {
            "model_type": hf.model_type, "hidden_size": text.hidden_size,
            "num_hidden_layers": text.num_hidden_layers, "num_attention_heads": text.num_attention_heads,
            "num_key_value_heads": getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
            "vocab_size": text.vocab_size,
        }
        self.lock = threading.Lock()  # the engine: generation, updates, group set-up
        self.changed = threading.Condition()  # weights_version
        self.weights_version = 0
        self._join: threading.Thread | None = None
        self._join_error: BaseException | None = None

    def health(self) -> dict:
        return {"status": "ok", "model": self.model, "architecture": self.architecture,
                "tensor_parallel_size": self.tensor_parallel_size, "max_model_len": self.max_model_len,
                "dtype": self.dtype, "device": self.device, "weights_version": self.weights_version}

    def generate(self, body: dict) -> dict:
        from vllm.inputs import TokensPrompt

        from rlvr.rollout.sampling import Sampling
        from rlvr.rollout.vllm_engine import check_prompt_lengths, sample_token_logprobs, sampling_params

        prompts = body["prompts"]
        seeds = body.get("seeds") or [None] * len(prompts)
        if len(seeds) != len(prompts):
            raise ValueError(f"seeds has {len(seeds)} entries for {len(prompts)} prompts")
        if not body["eos_token_ids"]:
            raise ValueError("eos_token_ids is empty: a response needs at least one EOS token id")
        sampling = Sampling(**body.get("sampling") or {})
        max_new_tokens = int(body["max_new_tokens"])
        check_prompt_lengths(prompts, max_new_tokens, self.max_model_len)
        params = sampling_params(sampling, max_new_tokens, body["eos_token_ids"], seeds)
        wanted = int(body.get("weights_version", 0))
        deadline = time.monotonic() + self.weights_timeout
        while True:
            self._wait_for_version(wanted, deadline)
            with self.lock:
                if self.weights_version < wanted:  # a new weight group reset it meanwhile
                    continue
                outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                            use_tqdm=False)
                break
        completions = []
        for out in outputs:
            ids, logprobs = sample_token_logprobs(out.outputs[0])
            completions.append({"token_ids": ids, "logprobs": logprobs})
        return {"completions": completions, "weights_version": self.weights_version}

    def _wait_for_version(self, wanted: int, deadline: float) -> None:
        with self.changed:
            while self.weights_version < wanted:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ServerError(409, (
                        f"weights_version {wanted} asked for, the server holds {self.weights_version} after "
                        f"waiting {self.weights_timeout:g}s (--weights-timeout): the trainer's rank 0 has not "
                        "pushed those weights (stopped, or another training run reset the weight group)"))
                self.changed.wait(left)

    def init_weight_group(self, body: dict) -> dict:
        from rlvr.rollout.weight_transport import BACKENDS

        world_size, backend = int(body["world_size"]), body.get("backend", "gloo")
        if world_size != self.tensor_parallel_size + 1:
            raise ValueError(f"world_size {world_size}: this server has {self.tensor_parallel_size} tensor-parallel "
                             f"worker(s), so the weight group has {self.tensor_parallel_size + 1} members "
                             "(workers + the trainer)")
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r}: choose one of {BACKENDS}")
        if backend == "nccl" and self.device != "cuda":
            raise ValueError("backend nccl: this server runs on CPU; use gloo")
        previous = self._join
        if previous is not None and previous.is_alive():
            raise ServerError(409, "a trainer is still joining the previous weight group; retry when it has "
                                   f"(at most {self.weights_timeout:g}s)")
        kwargs = {"host": body["host"], "port": int(body["port"]), "world_size": world_size, "backend": backend,
                  "timeout": float(body.get("timeout", self.weights_timeout))}
        with self.changed:
            self.weights_version = 0
            self.changed.notify_all()
        self._join_error = None
        with self.lock:  # the previous group's TCPStore must be gone before the trainer connects to the port:
            self.llm.collective_rpc("close_weight_group")  # else it reaches the old store and its stale keys

        def join() -> None:
            try:
                with self.lock:
                    self.llm.collective_rpc("init_weight_group", kwargs=kwargs)
            except BaseException as error:
                logger.exception("joining the weight group failed")
                self._join_error = error

        self._join = threading.Thread(target=join, name="rlvr-weight-group-join", daemon=True)
        self._join.start()
        return {"status": "joining", "world_size": world_size, "backend": backend}

    def _joined(self) -> None:
        if self._join is None:
            raise ServerError(409, "no weight group: POST /init_weight_group first")
        self._join.join(self.weights_timeout)
        if self._join.is_alive():
            raise ServerError(504, f"the trainer has not joined the weight group within {self.weights_timeout:g}s")
        if self._join_error is not None:
            raise ServerError(500, f"joining the weight group failed: {type(self._join_error).__name__}: "
                                   f"{self._join_error}")

    def update_weights(self, body: dict) -> dict:
        from rlvr.rollout.weight_transport import plan_buckets

        meta = body["tensors"]
        if not meta:
            raise ValueError("tensors is empty: nothing to update")
        plan_buckets(meta)  # malformed metadata fails here, before the workers wait for broadcasts
        self._joined()
        with self.lock:
            self.llm.collective_rpc("receive_weights", args=(meta,))
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
            with self.changed:
                self.weights_version += 1
                self.changed.notify_all()
            return {"weights_version": self.weights_version, "tensors": len(meta)}

    def close_weight_group(self) -> dict:
        if self._join is not None:
            self._join.join(self.weights_timeout)
        with self.lock:
            self.llm.collective_rpc("close_weight_group")
        self._join = None
        return {"status": "closed"}


def build_app(server: WeightServer):
    from fastapi import Body, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    app = FastAPI(title="rlvr vllm-serve")

    @app.exception_handler(ServerError)
    def _server_error(request: Request, error: ServerError):
        return JSONResponse(status_code=error.status, content={"error": str(error)})

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, error: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        return JSONResponse(status_code=422, content={"error": f"{request.url.path}: invalid body: {problems}"})

    def _bad_request(request: Request, error: Exception):
        kind = "missing field" if isinstance(error, KeyError) else type(error).__name__
        return JSONResponse(status_code=400, content={"error": f"{request.url.path}: {kind}: {error}"})

    for kind in (ValueError, KeyError, TypeError):
        app.add_exception_handler(kind, _bad_request)

    @app.exception_handler(Exception)
    def _failed(request: Request, error: Exception):
        logger.exception("%s failed", request.url.path)
        return JSONResponse(status_code=500,
                            content={"error": f"{request.url.path} failed: {type(error).__name__}: {error}"})

    @app.get("/health")
    def health():
        return server.health()

    @app.post("/generate")
    def generate(body: dict = Body(...)):  # noqa: B008 - FastAPI's idiom
        return server.generate(body)

    @app.post("/init_weight_group")
    def init_weight_group(body: dict = Body(...)):  # noqa: B008
        return server.init_weight_group(body)

    @app.post("/update_weights")
    def update_weights(body: dict = Body(...)):  # noqa: B008
        return server.update_weights(body)

    @app.post("/close_weight_group")
    def close_weight_group():
        return server.close_weight_group()

    return app
