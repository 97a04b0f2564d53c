"""FedFomo, pFedSim, FedCAC and APPLE keep state for the clients that took part, not an N x N matrix of all of them.

At 10,000 clients the dense matrices were 800 MB (float64, int64) or 100 MB (bool) from the first round, in memory
and written whole into every checkpoint; APPLE's clients each kept N stacked core models. A few clients of a 3,000-client
federation take part here: the state (what a checkpoint writes) must be a few kilobytes. The results stay bitwise the
dense code's (checked against digests of the dense code on one machine when it changed); an older checkpoint's dense layout is refused with one line.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from chillfl.aggregation.apple import APPLE, APPLEOptions, IDS as APPLE_IDS, MODEL as APPLE_MODEL, P0, PROX
from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.fedcac import FedCAC, FedCACOptions
from chillfl.aggregation.fedfomo import IDS, WEIGHTS, FedFomo, FedFomoOptions
from chillfl.aggregation.pfedsim import PFedSim, PFedSimOptions
from test_apple import one_step
from test_personalised import linear, run_client

N = 3000
"""Clients in the federation: an N x N float64 matrix is 72 MB."""
SMALL = 64 * 1024
"""The most bytes of tensors the state of a handful of participants may hold."""


def tensor_bytes(tree: Any) -> int:
    if isinstance(tree, torch.Tensor):
        return tree.numel() * tree.element_size()
    if isinstance(tree, dict):
        return sum(tensor_bytes(v) for v in tree.values())
    return 0


def result(cid: int, values: list[float], **report: torch.Tensor) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor(values), "b": torch.tensor([float(cid)])}, 10, 1, 0.1, 1.0, 0.0, dict(report))


def fomo() -> FedFomo:
    agg = FedFomo(N, ["w", "b"], FedFomoOptions(m=2))
    agg.aggregate({}, [result(5, [1.0, 0.0]), result(2999, [0.0, 1.0]), result(7, [1.0, 1.0])], 0)
    agg.aggregate({}, [result(5, [1.0, 0.5], **{IDS: torch.tensor([2999, 7]), WEIGHTS: torch.tensor([0.25, -0.5], dtype=torch.float64)})], 1)
    return agg


def sim() -> PFedSim:
    agg = PFedSim(N, ["w", "b"], {"w"}, "", 0, PFedSimOptions(similarity="flat"))
    agg.aggregate({}, [result(5, [1.0, 0.0]), result(2999, [1.0, 1.0]), result(7, [0.0, 1.0])], 0)
    return agg


def cac() -> FedCAC:
    agg = FedCAC(N, ["w", "b"], FedCACOptions(tau=0.5))
    glob = {"w": torch.zeros(2), "b": torch.zeros(1)}
    agg.aggregate(glob, [result(5, [1.0, 0.0]), result(2999, [1.0, 2.0])], 0)
    agg.aggregate(glob, [result(7, [0.0, 1.0]), result(5, [2.0, 1.0])], 1)
    return agg


def apple() -> APPLE:
    agg = APPLE(N, linear(0.0), APPLEOptions(downloads=2, p0="uniform"), rounds=4)
    up = {APPLE_IDS: torch.tensor([7, 2999]), "apple_p": torch.zeros(N, dtype=torch.float64)}
    agg.aggregate({}, [result(5, [1.0, 0.0], **up), result(2999, [0.0, 1.0]), result(7, [1.0, 1.0]), result(9, [0.0, 0.0])], 0)
    return agg


SERVERS: dict[str, Callable[[], Any]] = {"fedfomo": fomo, "pfedsim": sim, "fedcac": cac, "apple": apple}


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_the_servers_state_is_that_of_the_clients_that_took_part(name: str) -> None:
    server = SERVERS[name]()
    state = server.state_dict()
    assert tensor_bytes(state) - tensor_bytes(state["models"]) - tensor_bytes(state.get("relations", {})) < SMALL
    again = SERVERS[name]()
    again.load_state_dict(state)  # read back: the same state
    assert tensor_bytes(again.state_dict()) == tensor_bytes(state)


def test_what_the_sparse_state_reads_is_what_was_measured() -> None:
    assert fomo().affinity == {5: {2999: 0.25, 7: -0.5}}
    assert fomo().choose(5, 2) == [2999, 7] and fomo().choose(7, 2) == [5, 2999]  # a client that never rated any: ids order
    s = sim()
    assert s.similarity_of(5, 7) == s.similarity_of(7, 5) == 0.0 and s.similarity_of(5, 2999) == pytest.approx(2 ** -0.5)
    assert s.similarity_of(5, 6) == 0.0  # never compared
    c = cac()
    assert c.held == [5, 7, 2999] and c.shared.shape == (3, 3)
    a = apple()
    assert a.sent == {5: {7, 2999}}
    assert all(9 in a.choose(5, r) for r in range(5))  # the one never sent to 5 first, then one of 7 and 2999


@pytest.mark.parametrize(("name", "key"), [("fedfomo", "affinity"), ("pfedsim", "sim"), ("fedcac", "shared"), ("apple", "sent")])
def test_an_older_checkpoints_dense_matrix_is_refused_in_one_line(name: str, key: str) -> None:
    server = SERVERS[name]()
    state = {**server.state_dict(), key: torch.zeros(N, N, dtype=torch.bool if name == "apple" else torch.float64)}
    with pytest.raises(ValueError, match="before 2026-12-05") as err:
        SERVERS[name]().load_state_dict(state)
    assert "\n" not in str(err.value)


def test_an_apple_client_keeps_only_the_copies_it_holds() -> None:
    model = linear(0.0)
    half = APPLE(N, model, APPLEOptions(p_lr=0.01)).client_half()
    p0 = torch.full((N,), 1 / N, dtype=torch.float64)
    context: dict[str, Any] = {PROX: 0.5, P0: p0, APPLE_IDS: torch.tensor([3, 2000]),
                               f"{APPLE_MODEL}0": {"weight": torch.tensor([[3.0]])}, f"{APPLE_MODEL}1": {"weight": torch.tensor([[5.0]])}}
    reply = run_client(half, model, one_step(), {"weight": torch.tensor([[1.0]])}, lr=0.1, context=context)
    assert reply.state is not None
    assert reply.state["apple.held"].tolist() == [3, 2000]
    assert reply.state["apple.bank.weight"].flatten().tolist() == [3.0, 5.0]
    # a later round: one more copy; the kept ones come back from the state
    context = {PROX: 0.5, P0: p0, APPLE_IDS: torch.tensor([10]), f"{APPLE_MODEL}0": {"weight": torch.tensor([[7.0]])}}
    again = run_client(half, model, one_step(), {"weight": torch.tensor([[1.0]])}, lr=0.1, state=reply.state, context=context)
    assert again.state is not None
    assert again.state["apple.held"].tolist() == [3, 10, 2000]
    assert again.state["apple.bank.weight"].flatten().tolist() == [3.0, 7.0, 5.0]
