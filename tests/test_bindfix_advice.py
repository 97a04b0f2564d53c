"""Constructor arguments a bind holds to the run (bindfix #5): FedCAC's unread ``num_clients`` is not held to the run's,
and a constructor argument's refusal advises the run's value, not None (``Scaffold(None)`` is a TypeError)."""

from __future__ import annotations

from test_pyagg_bind import model, refusal, same, state


def test_fedcac_num_clients_is_not_held_to_the_run() -> None:
    """FedCAC never reads it: ``FedCAC(5, keys)`` in a 3-client run is the config's fedcac, as it was before the binding."""
    from chillfl.aggregation.fedcac import FedCAC

    keys = [name for name, _ in model().named_parameters()]
    assert same(state({"name": "fedavg"}, aggregator=FedCAC(5, keys)), state({"name": "fedcac"}))


def test_a_constructor_arguments_refusal_advises_the_runs_value() -> None:
    from chillfl.aggregation.apple import APPLE
    from chillfl.aggregation.feddyn import FedDyn
    from chillfl.aggregation.scaffold import Scaffold

    for make in (lambda: Scaffold(5), lambda: FedDyn(5), lambda: APPLE(5, model())):
        err = refusal(make)
        assert err.field == "aggregator.num_clients" and "pass num_clients=3" in err.message and "None" not in err.message
