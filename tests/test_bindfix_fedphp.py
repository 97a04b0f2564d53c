"""``FedPHP(1)`` with ``horizon`` unset (bindfix #4) runs H = 1 and records it: it was refused, and the advice
(``FedPHPOptions(horizon=1)``) changed the recorded options, so an older folder could not be resumed either way."""

from __future__ import annotations

from chillfl.experiment import Plugged, plugged_records
from test_pyagg_bind import same, state


def test_fedphp_with_horizon_unset_runs_its_own_h_and_records_it() -> None:
    from chillfl.aggregation.fedphp import FedPHP, FedPHPOptions

    assert same(state({"name": "fedavg"}, aggregator=FedPHP(1)), state({"name": "fedphp", "horizon": 1}))
    assert plugged_records(Plugged(FedPHP(1)))["algorithm"]["options"]["horizon"] == 1
    assert plugged_records(Plugged(FedPHP(1, FedPHPOptions(horizon=2))))["algorithm"]["options"]["horizon"] == 2
