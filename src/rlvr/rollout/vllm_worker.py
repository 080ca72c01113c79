"""vLLM worker extension of ``rlvr vllm-serve``: weight sync over the standalone trainer-workers group.

vLLM mixes :class:`WeightSync` into each of its workers (``worker_extension_cls``); the server calls
its methods on every tensor-parallel worker at once with ``llm.collective_rpc``. ``self`` is then a
vLLM worker: ``self.rank`` its rank among the K workers, ``self.reload_weights`` the in-place reload
the colocated engine uses. Attribute names must not clash with vLLM's worker (vLLM checks).
"""

from __future__ import annotations

import logging


class WeightSync:
    def init_weight_group(self, host: str, port: int, world_size: int, backend: str, timeout: float) -> None:
        """Join the group as rank ``self.rank`` (worker 0 hosts the TCPStore); blocks until the trainer joins."""
        from rlvr.rollout.weight_transport import WeightGroup

        self.close_weight_group()
        self._rlvr_weight_group = WeightGroup(host, port, rank=self.rank, world_size=world_size,
                                              backend=backend, timeout=timeout)

    def receive_weights(self, meta: list[list]) -> int:
        """Receive the tensors ``meta`` lists and load them (checkpoint names, as the colocated engine)."""
        from rlvr.rollout.vllm_engine import _ROTARY_FILTER

        group = getattr(self, "_rlvr_weight_group", None)
        if group is None:
            raise RuntimeError("no weight group on this vLLM worker: POST /init_weight_group first")
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_ROTARY_FILTER)
        weights = group.receive(meta)
        self.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
        for _ in weights:  # every broadcast must be joined, even those the loader did not ask for
            pass
        return len(meta)

    def close_weight_group(self) -> None:
        group = getattr(self, "_rlvr_weight_group", None)
        self._rlvr_weight_group = None
        if group is not None:
            group.close()
