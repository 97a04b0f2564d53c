"""A FedGen or pFedHN whose seed the run fills, read before the run, then warm-started by writing into the dict it
returned (``update``, item assignment, a tensor's ``copy_``): the bind told seed 0's drawing from the user's weights by
the dict's identity, which these writes keep, so the run drew fresh weights over the user's (rev104a). It now decides by
value: only weights still equal to seed 0's drawing are drawn again."""

from __future__ import annotations

import copy
from typing import Callable

import torch

from chillfl.aggregation.base import Params
from test_genbind_fedgen import OPTS, Spy, first_weights, same, warm
from test_genbind_pfedhn import first_hyper, spy
from test_genbind_pfedhn import warm as hwarm

Write = Callable[[Params, Params], None]


def by_update(held: Params, w: Params) -> None:
    held.update(w)


def by_item(held: Params, w: Params) -> None:
    for k in w:
        held[k] = w[k]


def by_copy(held: Params, w: Params) -> None:
    with torch.no_grad():
        for k, v in held.items():
            v.copy_(w[k])


WRITES: list[Write] = [by_update, by_item, by_copy]


def test_fedgen_weights_written_in_place_are_kept() -> None:
    for write in WRITES:
        g = Spy(OPTS, "head", 2, 5)
        write(g.params, warm())
        assert same(first_weights(g), warm()), write
        g = Spy(OPTS, "head", 2, 5)
        write(g.params, warm())
        assert same(first_weights(copy.deepcopy(g)), warm()), write  # the run works on a copy: kept there too


def test_fedgen_one_tensor_changed_is_the_users() -> None:
    g = Spy(OPTS, "head", 2, 5)
    k = next(iter(g.params))
    with torch.no_grad():
        g.params[k].add_(1.0)
    mine = {n: v.clone() for n, v in g.params.items()}
    assert same(first_weights(g), mine)


def test_pfedhn_hypernetwork_written_in_place_is_kept() -> None:
    for write in WRITES:
        h = spy()
        write(h.hyper, hwarm())
        assert same(first_hyper(h), hwarm()), write
        h = spy()
        write(h.hyper, hwarm())
        assert same(first_hyper(copy.deepcopy(h)), hwarm()), write


def test_an_untouched_copy_is_still_drawn_from_the_runs_seed() -> None:
    g = Spy(OPTS, "head", 2, 5)
    _ = g.params
    assert same(first_weights(copy.deepcopy(g)), first_weights(Spy(OPTS, "head", 2, 5, 3)))
    h = spy()
    _ = h.hyper
    assert same(first_hyper(copy.deepcopy(h)), first_hyper(spy(3)))
