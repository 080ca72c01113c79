"""Several processes and precision: the process group and its collectives, DDP and FSDP2 wrapping of the
policy, and bf16 autocast."""
