"""The run's life around the training step: its folder and files, checkpoints (written, checked, resumed,
exported), what stops it, and how it reports (progress, trackers, callbacks, the Hub)."""
