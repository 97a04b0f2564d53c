"""Linear CKA on hand-computed examples, and its invariances."""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.metrics.cka import linear_cka

# A 3 x 2 example by hand.
#   X = [[1, 0],      Y = [[1],
#        [0, 1],           [2],
#        [2, 2]]           [0]]
# Column means: X (1, 1), Y 1 -> centred
#   Xc = [[0, -1], [-1, 0], [1, 1]],  Yc = [[0], [1], [-1]]
#   Yc^T Xc = [0*0 + 1*(-1) + (-1)*1,  0*(-1) + 1*0 + (-1)*1] = [-2, -1]   -> ||.||_F^2 = 5
#   Xc^T Xc = [[2, 1], [1, 2]]   -> ||.||_F = sqrt(4 + 1 + 1 + 4) = sqrt(10)
#   Yc^T Yc = [[2]]              -> ||.||_F = 2
#   CKA = 5 / (2 sqrt(10)) = 0.790569...
X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
Y = torch.tensor([[1.0], [2.0], [0.0]])


def test_three_by_two_by_hand() -> None:
    assert linear_cka(X, Y) == pytest.approx(5 / (2 * math.sqrt(10)), abs=1e-12)
    assert linear_cka(Y, X) == pytest.approx(5 / (2 * math.sqrt(10)), abs=1e-12)  # symmetric


def test_uncentred_eq6_by_hand() -> None:
    # Eq. 6 literally (no centring): Y^T X = [1 + 0 + 0, 0 + 2 + 0] = [1, 2] -> 5
    #   X^T X = [[5, 4], [4, 5]] -> sqrt(25 + 16 + 16 + 25) = sqrt(82);  Y^T Y = [[5]] -> 5
    #   CKA = 5 / (5 sqrt(82)) = 1 / sqrt(82)
    assert linear_cka(X, Y, center=False) == pytest.approx(1 / math.sqrt(82), abs=1e-12)


def test_self_similarity_is_one_and_invariances() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=gen)
    assert linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=torch.float64))  # orthogonal
    y = torch.randn(40, 5, generator=gen)
    base = linear_cka(x, y)
    assert linear_cka(x.double() @ q, y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(7.5 * x, 0.01 * y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(x.double() + 3.0, y) == pytest.approx(base, abs=1e-10)  # a constant shift is removed by the centring
    # not invariant to an anisotropic scaling: the test can tell
    assert linear_cka(x * torch.tensor([10.0, 1, 1, 1, 1, 1]), y) != pytest.approx(base, abs=1e-6)


def test_gram_and_feature_forms_agree() -> None:
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(5, 30, generator=gen), torch.randn(5, 20, generator=gen)  # n < features: Gram form
    xt, yt = torch.randn(60, 3, generator=gen), torch.randn(60, 2, generator=gen)  # n > features: feature form
    for a, b in ((x, y), (xt, yt)):
        ac, bc = a.double() - a.double().mean(0), b.double() - b.double().mean(0)
        direct = float((bc.T @ ac).pow(2).sum() / ((ac.T @ ac).norm() * (bc.T @ bc).norm()))
        assert linear_cka(a, b) == pytest.approx(direct, abs=1e-12)


def test_constant_features_and_bad_shapes() -> None:
    assert math.isnan(linear_cka(torch.ones(4, 3), torch.randn(4, 2)))
    with pytest.raises(ValueError):
        linear_cka(torch.ones(4, 3), torch.ones(5, 3))
