"""A pFedHN whose seed the run fills, given a hypernetwork from Python (the ``hyper`` setter, or ``load_state_dict`` to
warm-start): the run's bind drew it again from the run's seed whenever one was set, and dropped the user's (rev103e).
Only the untouched seed-0 drawing is drawn again; a set or loaded one is kept."""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import torch

import chillfl
from chillfl.aggregation.base import ClientResult, Params
from chillfl.aggregation.pfedhn import CAPABILITIES, PFedHN, PFedHNOptions
from test_pyagg_bind import X, Y, config, model

OPTIONS = PFedHNOptions(hidden=4, hidden_layers=1)
SEEN: list[Params] = []


class Spy(PFedHN):
    """pFedHN that records the hypernetwork it starts each step with (in :data:`SEEN`: the run steps its own copy)."""

    capabilities = CAPABILITIES  # pFedHN's own: its personal model

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        SEEN.append({k: v.clone() for k, v in self.hyper.items()})
        return super().aggregate(global_params, results, round)


def spy(seed: int | None = None) -> Spy:
    return Spy(OPTIONS, 3, {k: v.shape for k, v in model().named_parameters()}, seed, torch.float64)


def first_hyper(g: Spy) -> Params:
    """The hypernetwork at the first step of a one-round run of seed 3."""
    SEEN.clear()
    logging.disable(logging.WARNING)
    try:
        chillfl.run(model=model(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config({"name": "fedavg"}, {"federation.rounds": 1}),
                    write=False, progress=False, aggregator=g)
    finally:
        logging.disable(logging.NOTSET)
    return SEEN[0]


def warm() -> Params:
    """A user's warm start: no drawing makes it."""
    return {k: torch.full_like(v, 0.5) for k, v in spy().hyper.items()}


def set_hyper(g: PFedHN) -> None:
    g.hyper = warm()


def load_state(g: PFedHN) -> None:
    g.load_state_dict({"hyper": warm(), "velocity": {}})


def same(a: Params, b: Params) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_hypernetwork_set_from_python_is_kept_whatever_was_read_first() -> None:
    reads: list[Callable[[PFedHN], object]] = [lambda g: None, lambda g: g.hyper, lambda g: g.state_dict()]
    for read in reads:
        for give in (set_hyper, load_state):
            g = spy()
            read(g)
            give(g)
            assert same(first_hyper(g), warm()), (read, give)


def test_an_instance_only_read_is_drawn_from_the_runs_seed() -> None:
    read = spy()
    _ = read.hyper  # seed 0's drawing: not the user's, drawn again
    assert same(first_hyper(read), first_hyper(spy(3)))
