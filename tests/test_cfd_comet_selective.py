"""CFD quantisation / delta coding, COMET clustering and regulariser, Selective-FD selectors."""

import math

import numpy as np
import pytest
import torch

from chillfl.distillation.comet import (
    cluster_clients,
    cluster_targets,
    comet_regularizer,
    comet_targets,
    kmeans,
    nearest_centroids,
    per_sample_centroids,
)
from chillfl.distillation.quantize import (
    DeltaCoder,
    compress,
    dequantize,
    hard_labels,
    payload_bytes,
    quantize,
)
from chillfl.distillation.selective import (
    KuLSIF,
    client_keep_mask,
    client_threshold,
    l1_to_one_hot,
    masked_mean,
    server_keep_mask,
)
from chillfl.errors import ConfigError
from chillfl.options import parse_options
from chillfl.distillation.methods.cfd import CFDOptions
from chillfl.distillation.methods.comet import COMETOptions
from chillfl.distillation.methods.selective_fd import SelectiveFDOptions

# ---- CFD ---------------------------------------------------------------------------


def test_quantize_two_bits_by_hand() -> None:
    # b = 2 -> L = 3 steps, levels {0, 1/3, 2/3, 1}; code = floor(3x + 1/2)
    # x = 0.1 -> 0.3 -> 0; 0.2 -> 0.6 -> 1; 0.5 -> 1.5 -> 2 (half up); 0.9 -> 2.7 -> 3
    x = torch.tensor([0.1, 0.2, 0.5, 0.9])
    codes = quantize(x, 2)
    assert codes.tolist() == [0, 1, 2, 3]
    assert torch.allclose(dequantize(codes, 2), torch.tensor([0.0, 1 / 3, 2 / 3, 1.0]))


def test_quantize_one_bit_thresholds_each_element() -> None:
    # b = 1: code = floor(x + 1/2): [0.6, 0.3, 0.1] -> [1, 0, 0]; [0.4, 0.35, 0.25] -> all 0
    x = torch.tensor([[0.6, 0.3, 0.1], [0.4, 0.35, 0.25]])
    assert quantize(x, 1).tolist() == [[1, 0, 0], [0, 0, 0]]
    # the argmax reading keeps a label for the second row
    assert compress(x, 1, one_bit="argmax").tolist() == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert hard_labels(torch.tensor([[0.2, 0.5, 0.3]])).tolist() == [[0.0, 1.0, 0.0]]


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
def test_roundtrip_error_at_most_half_a_step(bits: int) -> None:
    g = torch.Generator().manual_seed(bits)
    x = torch.rand(500, 10, generator=g, dtype=torch.float64)
    err = (dequantize(quantize(x, bits), bits, torch.float64) - x).abs().max().item()
    assert err <= 0.5 / (2**bits - 1) + 1e-12


def test_full_precision_passthrough_and_payload_bytes() -> None:
    x = torch.softmax(torch.randn(4, 10, generator=torch.Generator().manual_seed(0)), dim=-1)
    assert torch.equal(compress(x, 32), x)
    assert payload_bytes(x, 32) == 160  # 40 float32
    assert payload_bytes(x, 1) == 5  # 40 bits
    assert payload_bytes(x, 1, one_bit="argmax") == 2  # 4 samples x ceil(log2 10) = 4 bits -> 16 bits
    assert payload_bytes(x, 3) == 15  # 120 bits


def test_renormalize_option() -> None:
    # 1-bit [0.6, 0.3, 0.1] -> [1, 0, 0] (sums to 1); [0.4, 0.35, 0.25] -> zeros -> uniform 1/3 each
    out = compress(torch.tensor([[0.6, 0.3, 0.1], [0.4, 0.35, 0.25]]), 1, renormalize=True)
    assert torch.allclose(out, torch.tensor([[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]]))


def test_delta_coding_by_hand() -> None:
    sender, receiver = DeltaCoder(bits=2, num_classes=4), DeltaCoder(bits=2, num_classes=4)
    idx = torch.tensor([7])
    # round 1: codes [0, 1, 2, 3] against zeros -> 3 changed; bytes = ceil(4/8) + ceil(3*2/8) = 1 + 1
    m1 = sender.encode(idx, torch.tensor([[0.1, 0.2, 0.5, 0.9]]))
    assert m1.changed.tolist() == [[False, True, True, True]] and m1.nbytes() == 2
    assert torch.allclose(receiver.decode(m1), torch.tensor([[0.0, 1 / 3, 2 / 3, 1.0]]))
    # round 2: codes [0, 2, 2, 3] -> only element 1 changed, new code 2
    m2 = sender.encode(idx, torch.tensor([[0.1, 0.6, 0.5, 0.9]]))
    assert m2.changed.tolist() == [[False, True, False, False]] and m2.new_codes.tolist() == [2]
    assert torch.allclose(receiver.decode(m2), torch.tensor([[0.0, 2 / 3, 2 / 3, 1.0]]))


def test_cfd_options() -> None:
    opts = parse_options(CFDOptions, {}, "cfd")
    assert (opts.bits_up, opts.bits_down, opts.delta_coding) == (1, 32, False)  # SCARLET Table V
    with pytest.raises(ConfigError, match="cfd.bits_up"):
        parse_options(CFDOptions, {"bits_up": 0}, "cfd")
    with pytest.raises(ConfigError, match="bits"):  # the caller's field when it names one (distillation.bits_up: test_halvesfix_quantize)
        quantize(torch.zeros(2), 20)


# ---- COMET -------------------------------------------------------------------------

A = [[0.9, 0.1], [0.8, 0.2]]  # two public samples, 2 classes: group A says class 0
B = [[0.1, 0.9], [0.2, 0.8]]  # group B says class 1


def _two_groups() -> torch.Tensor:
    noise = [0.0, 0.02, -0.02]
    rows = []
    for k in range(6):  # clients 0, 2, 4 in group A; 1, 3, 5 in group B (interleaved)
        base = torch.tensor(A if k % 2 == 0 else B, dtype=torch.float64)
        eps = noise[k // 2]
        rows.append(base + torch.tensor([[eps, -eps], [eps, -eps]], dtype=torch.float64))
    return torch.stack(rows)


def test_kmeans_recovers_obvious_clusters_canonically() -> None:
    z = _two_groups()
    labels = cluster_clients(z, 2, np.random.default_rng(0))
    assert labels.tolist() == [0, 1, 0, 1, 0, 1]  # cluster ids named by their first client
    for seed in range(5):  # any seed: same partition, same ids
        assert cluster_clients(z, 2, np.random.default_rng(seed)).tolist() == [0, 1, 0, 1, 0, 1]


def test_kmeans_one_dimensional_by_hand() -> None:
    # points 0, 1, 10, 11 with c = 2 -> {0, 1} and {10, 11}; centroids 0.5 and 10.5; inertia 4 x 0.25 = 1
    res = kmeans(torch.tensor([[0.0], [1.0], [10.0], [11.0]]), 2, np.random.default_rng(1))
    assert res.labels.tolist() == [0, 0, 1, 1]
    assert res.centroids.ravel().tolist() == [0.5, 10.5]
    assert res.inertia == pytest.approx(1.0)
    # fewer distinct points than clusters: c shrinks
    assert kmeans(torch.tensor([[1.0], [1.0]]), 3, np.random.default_rng(0)).labels.tolist() == [0, 0]


def test_cluster_targets_are_member_means() -> None:
    z = _two_groups()
    labels, per_client = comet_targets(z, 2, np.random.default_rng(0))
    # group A members: offsets 0, +0.02, -0.02 cancel -> mean is exactly A (up to float rounding)
    assert torch.allclose(per_client[0], torch.tensor(A, dtype=torch.float64))
    assert torch.allclose(per_client[3], torch.tensor(B, dtype=torch.float64))
    # weighted: clients 0 and 2 of group A with weights 1:3 -> 0.25*0.9 + 0.75*0.92 = 0.915
    t = cluster_targets(z[[0, 2]], [0, 0], weights=[1.0, 3.0])
    assert t[0, 0, 0].item() == pytest.approx(0.915)
    assert labels.tolist() == [0, 1, 0, 1, 0, 1]


def test_comet_regularizer_by_hand() -> None:
    # sample 1: logits [0, 0] -> q = [1/2, 1/2]; target [1, 0]: KL = ln 2 = 0.6931472
    # sample 2: logits [ln 3, 0] -> q = [3/4, 1/4]; target [1/2, 1/2]:
    #   KL = 0.5 ln(0.5/0.75) + 0.5 ln(0.5/0.25) = -0.2027326 + 0.3465736 = 0.1438410
    # batch mean 0.4184941; lambda = 2 -> 0.8369882
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    target = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    assert comet_regularizer(logits, target, 2.0).item() == pytest.approx(0.8369882, abs=1e-6)
    assert comet_regularizer(logits, target, 0.0).item() == 0.0


def test_per_sample_centroids_alternative() -> None:
    z = _two_groups()
    cents = per_sample_centroids(z, 2, np.random.default_rng(0))
    assert cents.shape == (2, 2, 2)
    own = torch.tensor(B, dtype=torch.float64)  # a group-B client picks B's centroid for each sample
    assert torch.allclose(nearest_centroids(own, cents), own, atol=1e-12)


def test_comet_options() -> None:
    assert parse_options(COMETOptions, {"num_clusters": 3}, "comet").num_clusters == 3
    with pytest.raises(ConfigError, match="comet.num_clusters"):
        parse_options(COMETOptions, {"num_clusters": 0}, "comet")


# ---- Selective-FD --------------------------------------------------------------------


def test_server_selector_l1_by_hand() -> None:
    # [0.7, 0.2, 0.1] vs one-hot [1, 0, 0]: 0.3 + 0.2 + 0.1 = 0.6 = 2 (1 - 0.7)
    # uniform [1/3]*3: 2/3 + 1/3 + 1/3 = 4/3
    p = torch.tensor([[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3], [0.0, 1.0, 0.0]])
    assert torch.allclose(l1_to_one_hot(p), torch.tensor([0.6, 4 / 3, 0.0]))
    assert server_keep_mask(p, 0.5).tolist() == [False, False, True]
    assert server_keep_mask(p, 1.0).tolist() == [True, False, True]
    assert server_keep_mask(p, 2.0).tolist() == [True, True, True]  # tau = 2.0 disables it (Appendix B)
    # entropy reading: H = 0.8018186, ln 3 = 1.0986123, 0
    assert server_keep_mask(p, 1.0, measure="entropy").tolist() == [True, False, True]


def test_client_selector_quantile_threshold() -> None:
    # quantile 0.25 of [1, 2, 3, 4, 5] (linear): position 0.25 * 4 = 1 -> 2.0
    thr = client_threshold(torch.tensor([5.0, 1.0, 3.0, 2.0, 4.0]), 0.25)
    assert thr == 2.0
    assert client_keep_mask(torch.tensor([1.5, 2.0, 3.0]), thr).tolist() == [False, True, True]
    assert client_threshold(torch.tensor([1.0]), 0.7, mode="absolute") == 0.7
    with pytest.raises(ConfigError, match="tau_client"):
        client_threshold(torch.tensor([1.0]), 1.5)


def test_masked_mean_by_hand() -> None:
    # 3 clients, 2 samples. Sample 0 kept by clients 0 and 2 -> ([1,0] + [0.5,0.5]) / 2 = [0.75, 0.25]
    # sample 1 kept by nobody -> count 0
    z = torch.tensor([[[1.0, 0.0], [0.3, 0.7]], [[0.0, 1.0], [0.2, 0.8]], [[0.5, 0.5], [0.6, 0.4]]])
    keep = torch.tensor([[True, False], [False, False], [True, False]])
    mean, counts = masked_mean(z, keep)
    assert counts.tolist() == [2, 0]
    assert torch.allclose(mean[0], torch.tensor([0.75, 0.25]))


def test_kulsif_by_hand() -> None:
    # n = m = 1: denominator x = 0, numerator y = 1, width 1, lambda 1. k(0, 1) = e^-1/2.
    # (K_xx / n + lambda) alpha = -K_xy / (n m lambda): 2 alpha = -e^-1/2 -> alpha = -e^-1/2 / 2
    # w(1) = k(1, 0) alpha + k(1, 1) / lambda = -e^-1 / 2 + 1 = 0.8160603
    # w(0) = alpha + k(0, 1) = e^-1/2 / 2 = 0.3032653
    est = KuLSIF(numerator=torch.tensor([[1.0]]), denominator=torch.tensor([[0.0]]), width=1.0, lam=1.0)
    assert torch.allclose(est.ratio(torch.tensor([[1.0], [0.0]])), torch.tensor([0.8160603, 0.3032653], dtype=torch.float64), atol=1e-7)


def test_kulsif_scores_in_distribution_higher() -> None:
    g = torch.Generator().manual_seed(0)
    private = torch.randn(60, 2, generator=g) * 0.3 + torch.tensor([2.0, 2.0])
    reference = torch.rand(60, 2, generator=g) * 8 - 4  # uniform noise on [-4, 4]^2
    est = KuLSIF(private, reference, width=1.0, lam=0.1)
    scores = est.ratio(torch.tensor([[2.0, 2.0], [-3.0, -3.0]]))
    assert scores[0] > scores[1]
    thr = client_threshold(est.ratio(private[:20]), 0.0625)
    assert client_keep_mask(scores, thr).tolist() == [True, False]


def test_selective_options() -> None:
    opts = parse_options(SelectiveFDOptions, {}, "selective_fd")
    assert (opts.tau_client, opts.tau_server) == (0.0625, 2.0)  # SCARLET Table V, CIFAR-10
    with pytest.raises(ConfigError, match="selective_fd.server_measure"):
        parse_options(SelectiveFDOptions, {"server_measure": "gini"}, "selective_fd")


def test_comet_client_granularity_reads_the_named_block_and_refuses_a_downlink_without_one() -> None:
    """Each row holds every cluster's target (then the plain mean): the client reads the block the server named. A
    downlink without a name fell back on the plain mean in silence; the server always names one, so it is a bug."""
    from chillfl.distillation.methods.comet import COMETClient, COMETMethodOptions

    client = COMETClient(COMETMethodOptions(num_clusters=2, granularity="client"), 3, 0)
    rows = torch.arange(2 * 9, dtype=torch.float32).view(2, 9)  # blocks [0:3], [3:6], mean [6:9]
    own = lambda: pytest.fail("client granularity reads no own prediction")  # noqa: E731
    assert torch.equal(client.client_target(4, rows, own, hint=1), rows[:, 3:6])
    assert torch.equal(client.client_target(4, rows, own, hint=2), rows[:, 6:9])
    with pytest.raises(ValueError, match="COMET client 4: the downlink names no cluster block"):
        client.client_target(4, rows, own, hint=None)
