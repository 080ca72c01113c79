"""Running model-written programs in a sandbox: ``SandboxPool`` (program + input -> ``Outcome``).

docs/code_rewards.md says what the sandbox stops and what it does not.
"""

from rlvr.rewards.sandbox.pool import (
    LANGUAGES,
    LIMITS_ONLY_HINT,
    SANDBOX_MODES,
    Job,
    Outcome,
    SandboxLimits,
    SandboxPool,
    SandboxUnavailable,
    shared_pool,
)

__all__ = ["LANGUAGES", "LIMITS_ONLY_HINT", "SANDBOX_MODES", "Job", "Outcome", "SandboxLimits", "SandboxPool",
           "SandboxUnavailable", "shared_pool"]
