"""TRL's Python API on rlvr: ``from rlvr import GRPOTrainer, GRPOConfig`` in a TRL script (docs/from_trl.md).

:class:`~rlvr.trl_api.config.GRPOConfig` has TRL's ``GRPOConfig`` fields and defaults;
:class:`~rlvr.trl_api.trainer.GRPOTrainer` takes what TRL's trainer takes and runs rlvr's
:class:`~rlvr.train.trainer.Trainer` on the config those arguments make (``preset: trl``: TRL's
defaults and semantics, docs/from_trl.md).
"""
