"""FedCP's declared cost prices the calls of its steps (CALLS steps' overheads a pass), by hand on test_cost_model's config."""

from __future__ import annotations

from chillfl.aggregation.fedcp import CALLS
from chillfl.capabilities import FORWARD, Cost
from chillfl.catalogue import declared_cost

from test_cost_model import SAMPLES, STEPS, _close, _config, _minutes


def test_fedcp_prices_its_calls_on_each_pass() -> None:
    # 24 steps of 1 + FORWARD = 1.5 passes (the reference body's forward): 36 passes over 1.5 x the samples, each pass
    # with CALLS = 1.5 steps' overheads more, no FLOPs: 54 overheads.
    cp = _config(algorithm={"name": "fedcp"})
    assert CALLS == 1.5 and FORWARD == 0.5
    assert declared_cost(cp) == Cost(step_passes=1.5, pass_overhead=1.5)
    _close(cp, _minutes(1.5 * STEPS, 1.5 * SAMPLES, overhead=36 * 1.5))
