"""CFD with renormalize: the uplink carries the quantiser's codes, the server renormalises after decoding (distbase finding 1)."""

from __future__ import annotations

import torch

from chillfl.distillation.methods import cfd
from chillfl.distillation.quantize import DeltaCoder


def _halves(**kw: object) -> tuple[cfd.CFDClient, cfd.CFD]:
    o = cfd.CFDMethodOptions(**kw)  # type: ignore[arg-type]
    return cfd.CFDClient(o, 3, 0), cfd.CFD(o, 3, 0, "int32", 10)


def test_delta_coded_bytes_price_the_codes_the_client_quantised_with_renormalize() -> None:
    # 2 bits (L = 3), one public row, one client, by hand:
    # round 1: [0.45, 0.45, 0.10] -> codes [1, 1, 0]; against zeros 2 changed: bitmap ceil(3/8) = 1 B + 2 x 2 bits = 1 B -> 2 B
    # round 2: [0.50, 0.50, 0.00] -> codes [2, 2, 0]; 2 changed -> 1 + 1 = 2 B
    # (the old code re-quantised the renormalised [0.5, 0.5, 0] both rounds, codes [2, 2, 0] twice: 1 B in round 2)
    client, server = _halves(bits_up=2, delta_coding=True, renormalize=True)
    idx = torch.arange(1)
    logged = [server.uplink_bytes(client.upload(0, r, idx, torch.tensor(p), None))["soft_labels"]  # type: ignore[arg-type]
              for r, p in ((1, [[0.45, 0.45, 0.10]]), (2, [[0.50, 0.50, 0.00]]))]
    assert logged == [2, 2]
    truth = DeltaCoder(2, 3)
    assert [truth.encode(idx, torch.tensor(p)).nbytes() for p in ([[0.45, 0.45, 0.10]], [[0.50, 0.50, 0.00]])] == [2, 2]


def test_the_uplink_is_on_the_code_grid_and_the_mean_is_of_renormalised_rows() -> None:
    # 2 bits: A [0.45, 0.45, 0.10] -> codes [1, 1, 0] -> sent [1/3, 1/3, 0], renormalised [1/2, 1/2, 0]
    #         B [0.90, 0.30, 0.00] -> codes [3, 1, 0] -> sent [1, 1/3, 0],   renormalised [3/4, 1/4, 0]
    #         C [0.10, 0.10, 0.10] -> codes [0, 0, 0] -> sent zeros,         renormalised uniform [1/3, 1/3, 1/3]
    # mean of the renormalised rows: [(1/2 + 3/4 + 1/3) / 3, (1/2 + 1/4 + 1/3) / 3, (1/3) / 3] = [19/36, 13/36, 4/36]
    client, server = _halves(bits_up=2, renormalize=True)
    idx = torch.arange(1)
    probs = ([[0.45, 0.45, 0.10]], [[0.90, 0.30, 0.00]], [[0.10, 0.10, 0.10]])
    ups = [client.upload(cid, 1, idx, torch.tensor(p), None) for cid, p in enumerate(probs)]  # type: ignore[arg-type]
    assert torch.allclose(ups[1].soft_labels, torch.tensor([[1.0, 1 / 3, 0.0]]))  # the codes, not renormalised
    agg = server.aggregate(1, idx, ups)
    assert torch.allclose(agg.rows, torch.tensor([[19 / 36, 13 / 36, 4 / 36]]))
    assert agg.keep.tolist() == [True]


def test_without_renormalize_the_rows_are_the_plain_mean_of_the_codes() -> None:
    # 2 bits: [1/3, 1/3, 0] and [1, 1/3, 0] -> mean [2/3, 1/3, 0], as sent (no renormalisation anywhere)
    client, server = _halves(bits_up=2)
    idx = torch.arange(1)
    ups = [client.upload(cid, 1, idx, torch.tensor(p), None) for cid, p in enumerate(([[0.45, 0.45, 0.10]], [[0.90, 0.30, 0.00]]))]  # type: ignore[arg-type]
    assert torch.allclose(server.aggregate(1, idx, ups).rows, torch.tensor([[2 / 3, 1 / 3, 0.0]]))
