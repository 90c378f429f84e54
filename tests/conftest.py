import pytest

import ddlsim


@pytest.fixture(scope="session")
def resnet_runs():
    """ResNet-50 on 8 workers, both strategies, with jitter (shared by invariant tests)."""
    common = dict(model="resnet50", workers=8, iterations=2, jitter=0.05, seed=7)
    return {
        "ring": ddlsim.simulate(strategy="ring", **common),
        "ps": ddlsim.simulate(strategy="ps", servers=2, **common),
        # ByteScheduler: partitions side by side on each comm stream, priority order negotiated across ranks
        "bytescheduler": ddlsim.simulate(strategy="ring", stream_policy="priority", partition_bytes="4MB", credit_bytes="16MB",
                                         barrier=False, trace_detail="step", **common),
    }
