"""DnC, NormBound, FedMut, IFCA, FeSEM, pFedHN and FedGen took their seed as a required constructor argument and drew
with it whatever the run's seed: ``DnC(0)`` in a seed-3 run was not the config's ``dnc`` (docs/python-api.md says an
instance runs bitwise as the config's method) and every seed of ``compare`` drew alike. Built without a seed they now
take the run's (pFedHN too: the run's seed, from which it derives its hypernetwork's generator seed as its builder
does); a seed given that is not the run's is refused on ``aggregator.seed``; a seed passed positionally still binds
where it is the run's.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from test_pyagg_bind import model, same, state

from chillfl.errors import ConfigError

Made = tuple[Any, dict[str, Any], dict[str, Any]]
"""(the instance, the config's table of the same method, what else ``chillfl.run`` takes: its terms)."""


def _keys() -> list[str]:
    return [k for k, _ in model().named_parameters()]


def _dnc(seed: int | None) -> Made:
    from chillfl.aggregation.dnc import DnC, DnCOptions

    options = {"f": 1, "subsample": 10}
    return DnC(seed, DnCOptions(**options)), {"name": "dnc", **options}, {}


def _norm_bound(seed: int | None) -> Made:
    from chillfl.aggregation.norm_bound import NormBound, NormBoundOptions

    options = {"max_norm": 1.0, "sigma": 0.01}
    return NormBound(seed, NormBoundOptions(**options)), {"name": "norm_bound", **options}, {}


def _fedmut(seed: int | None) -> Made:
    from chillfl.aggregation.fedmut import FedMut

    return (FedMut() if seed is None else FedMut(seed)), {"name": "fedmut"}, {}


def _ifca(seed: int | None) -> Made:
    from chillfl.aggregation.ifca import Ifca

    return (Ifca(model()) if seed is None else Ifca(model(), seed)), {"name": "ifca"}, {}


def _fesem(seed: int | None) -> Made:
    from chillfl.aggregation.fesem import Fesem, FesemOptions

    return Fesem(3, _keys(), model(), seed, FesemOptions(clusters=3)), {"name": "fesem", "clusters": 3}, {}  # 3: the draw of centres shows


def _pfedhn(seed: int | None) -> Made:
    from chillfl.aggregation.pfedhn import PFedHN, PFedHNOptions

    shapes = {k: v.shape for k, v in model().named_parameters()}
    return PFedHN(PFedHNOptions(hidden=4, hidden_layers=1), 3, shapes, seed, torch.float64), {"name": "pfedhn", "hidden": 4, "hidden_layers": 1}, {}


def _fedgen(seed: int | None) -> Made:
    from chillfl.aggregation.fedgen import FedGen, FedGenOptions
    from chillfl.training.fedgen import FedGenTerm

    options = {"noise_dim": 3, "hidden": 8, "samples": 4, "generator_steps": 2, "generator_batch": 4}
    made = FedGen(FedGenOptions(**options), "head", 2, 5) if seed is None else FedGen(FedGenOptions(**options), "head", 2, 5, seed)
    return made, {"name": "fedgen", **options}, {"terms": [FedGenTerm("head")]}


SEEDED: list[tuple[str, Callable[[int | None], Made]]] = [
    ("dnc", _dnc), ("norm_bound", _norm_bound), ("fedmut", _fedmut), ("ifca", _ifca), ("fesem", _fesem), ("pfedhn", _pfedhn), ("fedgen", _fedgen)]
IDS = [s[0] for s in SEEDED]


@pytest.mark.parametrize(("name", "make"), SEEDED, ids=IDS)
def test_unset_seed_is_the_runs(name: str, make: Callable[[int | None], Made]) -> None:
    """Built without a seed (a TypeError before: it was required), the instance runs bitwise as the config's method in a
    seed-3 run."""
    aggregator, table, extra = make(None)
    assert same(state({"name": "fedavg"}, aggregator=aggregator, **extra), state(table))


@pytest.mark.parametrize(("name", "make"), SEEDED, ids=IDS)
def test_another_seed_is_refused(name: str, make: Callable[[int | None], Made]) -> None:
    """``X(0, ...)`` in a seed-3 run drew with seed 0 (every seed of a comparison alike); refused in one line now."""
    aggregator, _, extra = make(0)
    with pytest.raises(ConfigError) as err:
        state({"name": "fedavg"}, aggregator=aggregator, **extra)
    assert err.value.field == "aggregator.seed" and "got 0" in err.value.message and "\n" not in err.value.message
    assert "pass seed=" in err.value.message


@pytest.mark.parametrize(("name", "make"), SEEDED, ids=IDS)
def test_the_runs_seed_given_positionally_binds(name: str, make: Callable[[int | None], Made]) -> None:
    """A caller passing the run's seed positionally, as before, keeps running the config's method."""
    aggregator, table, extra = make(3)
    assert same(state({"name": "fedavg"}, aggregator=aggregator, **extra), state(table))


def test_pfedhn_seed_is_the_runs_not_its_generators() -> None:
    """pFedHN's seed is the run's, as the others' are: the hypernetwork's generator seed it derives itself
    (``derive_seed(seed, "pfedhn-init")``), so that number given as the seed is another seed, refused naming the run's."""
    from chillfl.aggregation.pfedhn import init_seed

    with pytest.raises(ConfigError) as err:
        state({"name": "fedavg"}, aggregator=_pfedhn(init_seed(3))[0])
    assert err.value.field == "aggregator.seed" and err.value.message.endswith("pass seed=3")


def test_outside_a_run_an_unset_seed_draws_as_seed_0() -> None:
    """Used directly (no run to bind it), an unset seed draws as seed 0, as the old required ``0`` did."""
    from chillfl.aggregation.pfedhn import PFedHN, PFedHNOptions

    shapes = {"w": torch.Size([2])}
    assert same(PFedHN(PFedHNOptions(hidden=2, hidden_layers=1), 2, shapes).hyper, PFedHN(PFedHNOptions(hidden=2, hidden_layers=1), 2, shapes, 0).hyper)


def test_pfedhn_with_an_unset_seed_draws_its_hypernetwork_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built without a seed, pFedHN drew its hypernetwork (hidden x the model's parameters, up to ``max_params``) from
    seed 0 at construction and again from the run's seed when the run bound it: twice the time and a second copy at once.
    It is drawn at first use now, once, from the run's seed."""
    from chillfl.aggregation import pfedhn

    seeds: list[int] = []
    real = pfedhn.init_hypernetwork

    def counted(*args: Any) -> Any:
        seeds.append(args[5])
        return real(*args)

    monkeypatch.setattr(pfedhn, "init_hypernetwork", counted)
    aggregator, table, _ = _pfedhn(None)
    assert seeds == []
    assert same(state({"name": "fedavg"}, aggregator=aggregator), state(table))
    assert seeds == [pfedhn.init_seed(3)] * 2  # one draw in the instance's run, one in the config's


def test_pfedhn_read_before_the_run_is_drawn_again_from_the_runs_seed() -> None:
    """An unset seed's hypernetwork read before the run (seed 0's) is replaced by the run's: the run is the config's."""
    aggregator, table, _ = _pfedhn(None)
    assert aggregator.hyper  # drawn from seed 0 here
    assert same(state({"name": "fedavg"}, aggregator=aggregator), state(table))


@pytest.mark.parametrize(("name", "make"), SEEDED, ids=IDS)
def test_the_runs_seed_as_another_number_type_runs_as_the_config(name: str, make: Callable[[int | None], Made]) -> None:
    """``np.int64(3)`` (a seed read from a numpy array) equals the run's 3, so the bind let it through, and the instance
    kept it: the first draw raised ``TypeError: derive_seed takes ints and strs`` mid-run, a half-written folder left.
    The bind keeps the run's own int."""
    import numpy as np

    aggregator, table, extra = make(np.int64(3))  # type: ignore[arg-type]
    assert same(state({"name": "fedavg"}, aggregator=aggregator, **extra), state(table))
