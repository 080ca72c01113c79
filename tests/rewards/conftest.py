"""One verifier pool for the whole rewards test session (workers take ~1 s to start)."""

import pytest

from rlvr.rewards import VerifierPool


@pytest.fixture(scope="session")
def pool():
    # timeout_s=1 keeps the adversarial tests short; every test leaves the pool usable.
    with VerifierPool(num_workers=2, timeout_s=1.0) as p:
        yield p
