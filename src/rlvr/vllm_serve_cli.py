"""``rlvr vllm-serve``: the command (its arguments, the engine it builds, the server it runs), beside the other
commands (``eval_cli.py``, ``rephrase_cli.py``, ``report_cli.py``). The server itself, its endpoints and the
weight protocol are rlvr.rollout.vllm_server's.

Only stdlib, at import: ``rlvr vllm-serve --help`` loads neither vllm nor torch.
"""

import argparse
import logging
import os
import sys
from pathlib import Path

from rlvr.rollout.vllm_server import DEFAULT_PORT, WORKER_EXTENSION, WeightServer, build_app


def add_vllm_serve_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "vllm-serve",
        help="serve a model with vLLM for rollout_engine=vllm vllm_mode=server",
        description="Serve a model with vLLM for training with rollout_engine=vllm vllm_mode=server: the "
        "trainer sends prompts (token ids) and pushes its weights after every update. Examples:\n"
        "  rlvr vllm-serve --model smollm2-135m --port 8000\n"
        "  CUDA_VISIBLE_DEVICES=6,7 rlvr vllm-serve --model Qwen/Qwen2.5-1.5B --tensor-parallel-size 2 "
        "--dtype bfloat16\n"
        "See docs/training.md, 'Server mode'.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True,
                        help="a local Hugging Face folder, the alias smollm2-135m, or a Hub id (owner/name)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, help="GPUs the model is split over (default 1)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                        help="CUDA: fraction of each GPU vLLM may take, weights + KV cache (default 0.9)")
    parser.add_argument("--max-model-len", type=int, default=None,
                        help="longest prompt + response (default min(max_position_embeddings, 8192))")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="weights and compute dtype (default float32); pushed weights are cast to it")
    parser.add_argument("--enforce-eager", action="store_true", default=None,
                        help="no CUDA graphs (trl vllm-serve's enforce_eager); default: graphs on CUDA, eager on CPU")
    parser.add_argument("--kv-cache-tokens", type=int, default=32768,
                        help="CPU only: the KV cache holds this many tokens (default 32768)")
    parser.add_argument("--seed", type=int, default=0, help="vLLM's seed for requests without one (default 0)")
    parser.add_argument("--weights-timeout", type=float, default=600.0,
                        help="seconds a /generate waits for the weights_version it asks for, and /update_weights "
                        "for the trainer to join the weight group (default 600)")
    return parser


def resolve_model(name: str) -> str:
    """The alias ``smollm2-135m`` → its local folder; an existing folder → its absolute path; else a Hub id."""
    if name == "smollm2-135m":
        from rlvr.models.smollm2 import smollm2_path

        return str(smollm2_path())
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"--model {name}: the folder has no config.json (not a Hugging Face model folder)")
        return str(path.resolve())
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ValueError(f"--model {name}: no such folder, and not a Hub id (owner/name) or smollm2-135m")
    return name


def build_llm(args: argparse.Namespace, model: str):
    """The engine, with the colocated engine's settings (rlvr.rollout.vllm_engine)."""
    if args.tensor_parallel_size == 1:
        # In-process engine core and worker, as the colocated engine.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import torch
    from transformers import AutoConfig

    from rlvr.rollout.vllm_engine import _check_head_dim, _import_vllm, graph_mode, memory_kwargs

    vllm = _import_vllm()
    from vllm.platforms import current_platform

    config = AutoConfig.from_pretrained(model)
    max_model_len = args.max_model_len or min(getattr(config, "max_position_embeddings", 8192), 8192)
    _check_head_dim(config)
    kwargs = memory_kwargs(config, getattr(torch, args.dtype), max_model_len, args.kv_cache_tokens,
                           args.gpu_memory_utilization)
    if args.tensor_parallel_size > 1:
        kwargs["distributed_executor_backend"] = "mp"
    return vllm.LLM(
        model=model,
        tensor_parallel_size=args.tensor_parallel_size,
        skip_tokenizer_init=True,  # prompts and responses stay token ids
        dtype=args.dtype,
        seed=args.seed,
        enforce_eager=graph_mode("cpu" if current_platform.is_cpu() else "cuda", args.enforce_eager),
        max_model_len=max_model_len,
        logprobs_mode="processed_logprobs",  # log softmax(logits / T): the trainer's convention
        generation_config="vllm",  # ignore the checkpoint's sampling defaults (top_k, penalties)
        worker_extension_cls=WORKER_EXTENSION,
        **kwargs,
    )


def run_vllm_serve(args: argparse.Namespace) -> int:
    if args.tensor_parallel_size < 1:
        print("rlvr vllm-serve: --tensor-parallel-size must be >= 1", file=sys.stderr)
        return 2
    try:
        model = resolve_model(args.model)
        llm = build_llm(args, model)
    except (ImportError, ValueError, OSError) as error:  # no vllm here, a bad --model, a missing file
        print(f"rlvr vllm-serve: {error}", file=sys.stderr)
        return 2
    import uvicorn
    from vllm.platforms import current_platform

    server = WeightServer(llm, model=model, tensor_parallel_size=args.tensor_parallel_size, dtype=args.dtype,
                          device="cpu" if current_platform.is_cpu() else "cuda",
                          weights_timeout=args.weights_timeout)
    print(f"rlvr vllm-serve: {model} (tensor_parallel_size {args.tensor_parallel_size}, {args.dtype}, "
          f"max_model_len {server.max_model_len}) at http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    uvicorn.run(build_app(server), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":  # python -m rlvr.vllm_serve_cli --model ...
    _parser = argparse.ArgumentParser(prog="rlvr")
    _sub = _parser.add_subparsers(dest="command", required=True)
    add_vllm_serve_parser(_sub)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(run_vllm_serve(_parser.parse_args(["vllm-serve", *sys.argv[1:]])))
