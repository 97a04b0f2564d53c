"""FedGen built without a seed draws its generator once (pa3left finding 3), as pFedHN's hypernetwork
(tests/test_seedbind_seed.py).

Built without a seed, FedGen drew its generator from seed 0 at construction and again from the run's seed when the run
bound it. It is drawn at first use now, once, from the run's seed; a seeded run's results are unchanged (the draw is
the same fork of the run's stream, (seed, "fedgen-init"), whenever it happens).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from chillfl.aggregation import fedgen
from chillfl.aggregation.fedgen import FedGen, FedGenOptions
from chillfl.training.fedgen import FeatureGenerator
from test_pyagg_bind import same, state
from test_seedbind_seed import _fedgen


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry for each generator FedGen draws."""
    made: list[int] = []

    class Counted(FeatureGenerator):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(1)

    monkeypatch.setattr(fedgen, "FeatureGenerator", Counted)
    return made


def test_an_unset_seed_draws_the_generator_once_in_a_run(draws: list[int]) -> None:
    aggregator, table, extra = _fedgen(None)
    assert draws == []  # was 1: drawn from seed 0 at construction
    assert same(state({"name": "fedavg"}, aggregator=aggregator, **extra), state(table))
    assert len(draws) == 2  # one draw in the instance's run, one in the config's (was 3: the instance's twice)


def test_a_generator_read_before_the_run_is_drawn_again_from_the_runs_seed() -> None:
    aggregator, table, extra = _fedgen(None)
    assert aggregator.params  # drawn from seed 0 here
    assert same(state({"name": "fedavg"}, aggregator=aggregator, **extra), state(table))


def test_outside_a_run_an_unset_seed_draws_as_seed_0() -> None:
    def made(*seed: int) -> FedGen:
        return FedGen(FedGenOptions(noise_dim=3, hidden=8, samples=4), "head", 2, 5, *seed)

    unset, zero = made(), made(0)
    assert same(unset.params, zero.params) and not same(unset.params, made(1).params)


def test_weights_set_before_the_first_read_are_kept() -> None:
    """Loading a checkpoint sets the weights before anything reads them: the module drawn later does not replace them."""
    gen = FedGen(FedGenOptions(noise_dim=3, hidden=8, samples=4), "head", 2, 5, seed=3)
    other = FedGen(FedGenOptions(noise_dim=3, hidden=8, samples=4), "head", 2, 5, seed=4)
    loaded = {k: v + 1 for k, v in other.params.items()}
    gen.load_state_dict({**other.state_dict(), "generator": loaded})
    assert isinstance(gen.generator, FeatureGenerator)
    assert same(gen.params, loaded)
    y, noise = torch.tensor([0, 1]), torch.rand(2, 3)
    assert torch.equal(gen._generate(y, noise, gen.params), torch.func.functional_call(other.generator, loaded, (y, noise)))
