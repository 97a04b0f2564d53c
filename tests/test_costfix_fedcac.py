"""FedCAC's server: the overlap counts from one matrix product equal the pairwise counts, and aggregate reads each
start its downlink built this round instead of building it again (the same masks, counts and metrics)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.fedcac import FedCAC, FedCACOptions, shared_counts

SHAPES = {"conv": (3, 2, 3, 3), "bias": (3,), "fc": (5, 7)}


def random_masks(g: torch.Generator, p: float) -> dict[str, torch.Tensor]:
    return {k: torch.rand(s, generator=g) < p for k, s in SHAPES.items()}


def pairwise(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> int:
    """The count as the server took it before: one bitwise and and a sum a pair."""
    fa = torch.cat([m.reshape(-1) for m in a.values()])
    fb = torch.cat([m.reshape(-1) for m in b.values()])
    return int((fa & fb).sum())


@pytest.mark.parametrize("budget", [1, 25, 1 << 24])
def test_one_product_gives_the_pairwise_counts(budget: int) -> None:
    g = torch.Generator().manual_seed(0)
    rows = [random_masks(g, p) for p in (0.0, 0.3, 0.9)]
    cols = [random_masks(g, p) for p in (0.5, 1.0, 0.1, 0.7, 0.0, 0.4, 0.6)]
    got = shared_counts(rows, cols, list(SHAPES), budget)
    assert got.dtype == torch.int64
    assert got.tolist() == [[pairwise(a, b) for b in cols] for a in rows]
    assert got[0].tolist() == [0] * 7 and got[:, 1].tolist() == [sum(int(m.sum()) for m in r.values()) for r in rows]


def result(cid: int, params: dict[str, torch.Tensor]) -> ClientResult:
    return ClientResult(cid, params, 10 + cid, 1, 0.1, 1.0, 0.0)


def rounds(agg: FedCAC, with_downlink: bool) -> list[Any]:
    """Three rounds of random uploads (clients 0-5, three a round): what the server keeps after each."""
    g = torch.Generator().manual_seed(1)
    glob = {k: torch.randn(s, generator=g) for k, s in SHAPES.items()}
    seen = []
    for t, sampled in enumerate([[0, 1, 2], [1, 3, 4], [0, 2, 5]]):
        if with_downlink:
            starts = {c: agg.downlink(c, t, glob).params for c in sampled}
        else:  # the same starts, built apart from the downlink: aggregate builds them again
            starts = {c: agg.start(c, t, glob)[0] for c in sampled if c in agg.masks}
        ups = []
        for c in sampled:
            start = starts.get(c) or glob
            ups.append(result(c, {k: start[k] + torch.randn(s, generator=g) for k, s in SHAPES.items()}))
        glob = agg.aggregate(glob, ups, t)
        seen.append((glob, agg.shared.clone(), {c: dict(agg.masks[c]) for c in sorted(agg.masks)}, dict(agg.round_metrics())))
        held = sorted(agg.masks)
        assert agg.shared.tolist() == [[pairwise(agg.masks[i], agg.masks[j]) for j in held] for i in held]
    return seen


def test_aggregate_reads_the_starts_downlink_built_with_the_same_results(monkeypatch: pytest.MonkeyPatch) -> None:
    options = FedCACOptions(tau=0.5, beta=2)
    reference = rounds(FedCAC(6, list(SHAPES), options), with_downlink=False)  # every start built in aggregate
    agg = FedCAC(6, list(SHAPES), options)
    built: list[int] = []
    start = agg.start

    def counted(client_id: int, round: int, global_params: dict[str, torch.Tensor]) -> Any:
        built.append(client_id)
        return start(client_id, round, global_params)

    monkeypatch.setattr(agg, "start", counted)
    got = rounds(agg, with_downlink=True)
    # downlink built each held client's start once: rounds 1 and 2 send clients 1 and 0, 2 their own (3, 4, 5 are new)
    assert built == [1, 0, 2]
    assert len(got) == len(reference)
    for (g1, s1, m1, r1), (g2, s2, m2, r2) in zip(got, reference):
        assert all(torch.equal(g1[k], g2[k]) for k in SHAPES)
        assert torch.equal(s1, s2) and r1 == r2
        assert m1.keys() == m2.keys() and all(torch.equal(m1[c][k], m2[c][k]) for c in m1 for k in SHAPES)
