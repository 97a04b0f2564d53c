"""A FedGen whose seed the run fills, read before the run (its ``params`` or ``state_dict()``), then given weights from
Python (the ``params`` setter, or ``load_state_dict`` to warm-start): the run's bind drew the generator again from the
run's seed and dropped those weights, a checkpoint's Adam state kept beside fresh weights (rev103e). Weights still the
seed-0 drawing are drawn again; set ones are kept."""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import torch

import chillfl
from chillfl.aggregation.base import ClientResult, Params
from chillfl.aggregation.fedgen import FedGen, FedGenOptions
from chillfl.training.fedgen import FedGenTerm
from test_pyagg_bind import X, Y, config, model

OPTS = FedGenOptions(noise_dim=3, hidden=8, samples=4, generator_steps=2, generator_batch=4)


SEEN: list[Params] = []


class Spy(FedGen):
    """FedGen that records the weights it starts each training with (in :data:`SEEN`: the run trains its own copy)."""

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        SEEN.append({k: v.clone() for k, v in self.params.items()})
        return super().aggregate(global_params, results, round, weights)


def first_weights(g: Spy) -> Params:
    """The generator's weights at its first training in a one-round run of seed 3."""
    SEEN.clear()
    logging.disable(logging.WARNING)
    try:
        chillfl.run(model=model(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config({"name": "fedavg"}, {"federation.rounds": 1}),
                    write=False, progress=False, aggregator=g, terms=[FedGenTerm("head")])
    finally:
        logging.disable(logging.NOTSET)
    return SEEN[0]


def warm() -> Params:
    """A user's warm start: no drawing makes it."""
    return {k: torch.full_like(v, 0.5) for k, v in FedGen(OPTS, "head", 2, 5).params.items()}


def set_params(g: FedGen) -> None:
    g.params = warm()


def load_state(g: FedGen) -> None:
    src = FedGen(OPTS, "head", 2, 5)
    src.params = warm()
    g.load_state_dict(src.state_dict())


def same(a: Params, b: Params) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_weights_set_from_python_are_kept_whatever_was_read_first() -> None:
    reads: list[Callable[[FedGen], object]] = [lambda g: None, lambda g: g.params, lambda g: g.state_dict(), lambda g: g.generator]
    for read in reads:
        for give in (set_params, load_state):
            g = Spy(OPTS, "head", 2, 5)
            read(g)
            give(g)
            assert same(first_weights(g), warm()), (read, give)


def test_an_instance_only_read_is_drawn_from_the_runs_seed() -> None:
    read = Spy(OPTS, "head", 2, 5)
    _ = read.params  # seed 0's drawing: not the user's, drawn again
    assert same(first_weights(read), first_weights(Spy(OPTS, "head", 2, 5, 3)))
