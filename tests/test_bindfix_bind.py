"""pFedSim's bind (bindfix #2): its options are validated before it (-1.0 and 2.5 ran, rewritten unseen), and a warm-up
count they do not say is refused (it ran under a record of another warm-up)."""

from __future__ import annotations

import pytest

from test_pyagg_bind import model, refusal


@pytest.mark.parametrize("bad", [-1.0, 2.5])
def test_pfedsim_invalid_options_are_refused_before_its_bind(bad: float) -> None:
    from chillfl.aggregation.pfedsim import PFedSim, PFedSimOptions

    keys = list(model().state_dict())
    err = refusal(lambda: PFedSim(3, keys, ["head.weight", "head.bias"], "head.weight", 1, PFedSimOptions(warmup=bad)))
    assert err.field == "aggregator.options.warmup"


def test_pfedsim_count_its_options_do_not_say_is_refused() -> None:
    """Built for 4 rounds (R_w = 2 of share 0.5), run for 3: 2 warm-up rounds ran under a record of share 0.5 (1 round)."""
    from chillfl.aggregation.registry import make_aggregator

    built, _ = make_aggregator("pfedsim", {}, num_clients=3, model=model(), seed=0, rounds=4)
    err = refusal(lambda: built)
    assert err.field == "aggregator.warmup" and "got 2" in err.message and "PFedSimOptions(warmup=2.0)" in err.message
