"""Robust rules passed from Python are checked as the config's method (their spec's check, the tolerates note), Krum's
too-few-clients refusal names the clients, and shares of n are exact (beta 0.29 of 100 trims 29)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import chillfl
from chillfl.aggregation.bulyan import Bulyan, BulyanOptions
from chillfl.aggregation.dnc import DnC, DnCOptions
from chillfl.aggregation.robust import Krum, KrumOptions, trimmed_mean
from chillfl.aggregation.base import AroundAggregator
from chillfl.api import make_config
from chillfl.errors import ConfigError
from chillfl.experiment import fewer_attackers_note
from chillfl.plugins import CUSTOM

X = torch.randn(12, 2, generator=torch.Generator().manual_seed(0))
Y = torch.tensor([0, 1] * 6)


def config(clients: int = 6, **extra: Any) -> dict[str, Any]:
    return {"federation": {"num_clients": clients, "rounds": 1}, "client": {"lr": 0.1, "batch_size": 100},
            "eval": {"clients": "none", "client_split": "none"}, **extra}


def run(aggregator: Any, clients: int = 6, **extra: Any) -> Any:
    torch.manual_seed(0)
    return chillfl.run(model=torch.nn.Linear(2, 2), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config(clients, **extra),
                       aggregator=aggregator, write=False, progress=False)


@pytest.mark.parametrize(("aggregator", "said"), [
    (Krum(KrumOptions(f=5, m=4)), "Krum needs clients per round > 2f + 2"),
    (Bulyan(BulyanOptions(f=3)), "Bulyan needs clients per round >= 4f + 3"),
    (DnC(0, DnCOptions(f=6, c=1.0)), "DnC removes floor(c f) = 6 clients"),
    (Krum(KrumOptions(f=-1)), "must be in [0, 1000000]"),
], ids=["krum", "bulyan", "dnc", "validate"])
def test_python_instance_gets_its_specs_check(aggregator: Any, said: str) -> None:
    """Refused as ``name = ...`` is, the option named as the instance's (``aggregator.options.f``)."""
    with pytest.raises(ConfigError) as info:
        run(aggregator)
    assert info.value.field == "aggregator.options.f" and said in str(info.value)


def test_python_instance_gets_the_tolerates_note() -> None:
    """f = 0 against two attackers: the note a config's Krum gets, naming the instance's option."""
    run_config = make_config({**config(attack={"kind": "sign_flip", "clients": [0, 1]}), "algorithm": {"name": CUSTOM}})
    around = AroundAggregator(Krum(KrumOptions(f=0)))  # as the run's attack and privacy wrap the instance
    note = fewer_attackers_note(run_config, around)
    assert note is not None and note.startswith("note: aggregator.options.f = 0: krum tolerates no attacker") and "set aggregator.options.f = 1" in note
    assert fewer_attackers_note(run_config, None) is None  # no instance: nothing to read


def test_krum_too_few_clients_names_the_clients() -> None:
    """Two clients a round: no f is tolerated, so the line names clients_per_round, not f = 0."""
    with pytest.raises(ConfigError) as info:
        chillfl.run(
            config={"algorithm": {"name": "krum"}, "federation": {"num_clients": 2, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"}},
            model=torch.nn.Linear(2, 2), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), write=False, progress=False)
    assert info.value.field == "federation.num_clients"  # every client a round: only more clients give more
    assert "2 clients per round are too few for Krum (it needs at least 3)" in str(info.value)


@pytest.mark.parametrize(("federation", "field"), [({"clients_per_round": 2}, "federation.clients_per_round"),
                                                   ({"client_fraction": 0.2}, "federation.client_fraction")])
def test_krum_too_few_clients_names_the_field_that_set_them(federation: dict, field: str) -> None:
    """It named clients_per_round where the user had set client_fraction (10 clients x 0.2 = 2 a round)."""
    from chillfl.aggregation.robust import KrumOptions, check_krum
    from chillfl.config import load_config

    config = load_config(None, {"algorithm.name": "krum", "federation.num_clients": 10, **{f"federation.{k}": v for k, v in federation.items()}})
    with pytest.raises(ConfigError) as info:
        check_krum(KrumOptions(), config, "algorithm")
    assert info.value.field == field


def test_trims_are_exact() -> None:
    """floor(0.29 * 100) of the float product is 28; of 0.29 as written, 29: the trimmed mean and DnC trim 29."""
    values = torch.arange(100, dtype=torch.float64).reshape(100, 1)
    assert float(trimmed_mean(values, 0.29)) == float(values[29:71].mean())
    assert DnCOptions(f=100, c=0.29).removed() == 29


def test_floored_share() -> None:
    from chillfl.numeric import floored_share

    assert floored_share(0.29, 100) == 29 and floored_share(0.5, 7) == 3 and floored_share(0.0, 9) == 0


def test_an_instances_options_are_parsed_as_a_tables_are() -> None:
    """``Krum(KrumOptions(f=1.5))`` passed the range check and crashed in a round (slice indices must be integers):
    an instance's options are parsed as a config's table, so its type is refused in one line."""
    from chillfl.aggregation.robust import Krum, KrumOptions

    with pytest.raises(ConfigError) as info:
        chillfl.run(config={"federation": {"num_clients": 6, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"}},
                    model=torch.nn.Linear(2, 2), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), aggregator=Krum(KrumOptions(f=1.5)),  # type: ignore[arg-type]
                    write=False, progress=False)
    assert info.value.field == "aggregator.options.f"
