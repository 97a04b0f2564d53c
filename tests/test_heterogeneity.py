"""Heterogeneity measures (FedChill Eq. 6, Table 11, A.5) on hand-computed count vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chillfl.errors import ConfigError
from chillfl.temperature.heterogeneity import MEASURES, heterogeneity, ratio_score

LN2, LN3, LN4 = math.log(2), math.log(3), math.log(4)


# ------------------------------------------------------------------ ratio score (Eq. 6)


def test_ratio_uniform_client_scores_zero() -> None:
    # p_n = p_g = 1/10 everywhere -> every |p_n/p_g - 1| = 0
    assert ratio_score([7] * 10) == pytest.approx(0.0, abs=1e-12)
    assert ratio_score([5, 5, 5]) == pytest.approx(0.0, abs=1e-12)


def test_ratio_one_class_client_scores_one() -> None:
    # C = 10: |1/0.1 - 1| + 9 * |0 - 1| = 9 + 9 = 18 = 2(C-1) = max -> 1
    assert ratio_score([0, 0, 0, 9, 0, 0, 0, 0, 0, 0]) == pytest.approx(1.0)
    assert ratio_score([0, 0, 0, 9, 0, 0, 0, 0, 0, 0], normalisation="none") == pytest.approx(18.0)
    # C = 3: |3 - 1| + 1 + 1 = 4 = 2(C-1) -> 1
    assert ratio_score([0, 0, 6]) == pytest.approx(1.0)


def test_ratio_two_class_client_by_hand() -> None:
    # C = 10, p_n = (0.5, 0.5, 0 x 8): 2 * |0.5/0.1 - 1| + 8 * 1 = 8 + 8 = 16; 16 / 18 = 0.888...
    assert ratio_score([5, 5] + [0] * 8) == pytest.approx(16 / 18)
    # C = 3, counts (3, 1, 0): p_n = (0.75, 0.25, 0), p_n / p_g = (2.25, 0.75, 0)
    # |1.25| + |-0.25| + |-1| = 2.5; max 2(C-1) = 4 -> 0.625
    assert ratio_score([3, 1, 0], normalisation="none") == pytest.approx(2.5)
    assert ratio_score([3, 1, 0]) == pytest.approx(0.625)


def test_ratio_non_uniform_reference() -> None:
    # p_g = (0.5, 0.25, 0.25): max = 1/p_min + C - 2 = 4 + 1 = 5
    p_g = [0.5, 0.25, 0.25]
    # all mass on a rarest class: |0 - 1| + |4 - 1| + |0 - 1| = 5 -> 1
    assert ratio_score([0, 4, 0], p_g) == pytest.approx(1.0)
    # all mass on the common class: |2 - 1| + 1 + 1 = 3 -> 3/5
    assert ratio_score([4, 0, 0], p_g) == pytest.approx(0.6)
    # the client matches p_g exactly -> 0
    assert ratio_score([2, 1, 1], p_g) == pytest.approx(0.0, abs=1e-12)
    # priors are normalised: (2, 1, 1) is the same reference
    assert ratio_score([4, 0, 0], [2, 1, 1]) == pytest.approx(0.6)


def test_ratio_minmax_over_federation() -> None:
    # raw (C = 3, uniform): (3,1,0) -> 2.5, (1,0,0) -> 4,
    # (2,1,1): p/p_g = (1.5, .75, .75) -> .5 + .25 + .25 = 1
    # minmax: (2.5-1)/3 = 0.5, 1, 0
    h = heterogeneity([[3, 1, 0], [1, 0, 0], [2, 1, 1]], "ratio", normalisation="minmax")
    np.testing.assert_allclose(h, [0.5, 1.0, 0.0])
    # identical clients: no spread -> all 0
    np.testing.assert_allclose(heterogeneity([[1, 2], [2, 4]], "ratio", normalisation="minmax"), [0.0, 0.0])


def test_ratio_score_rejects_minmax_and_unknown_normalisation() -> None:
    with pytest.raises(ConfigError, match="temperature.normalisation"):
        ratio_score([1, 2, 3], normalisation="minmax")
    with pytest.raises(ConfigError, match="allowed: max, minmax, none"):
        ratio_score([1, 2, 3], normalisation="zscore")


# ------------------------------------------------------------------ divergences (Table 11)


def test_kl_by_hand() -> None:
    # p_n = (.5, .5, 0, 0) vs uniform 1/4: 2 * 0.5 * ln(0.5/0.25) = ln 2; max ln(1/p_min) = ln 4 -> 0.5
    counts = [[2, 2, 0, 0]]
    assert heterogeneity(counts, "kl", normalisation="none")[0] == pytest.approx(LN2)
    assert heterogeneity(counts, "kl")[0] == pytest.approx(0.5)
    # p_n = (.5, .5) vs p_g = (.75, .25): .5 ln(2/3) + .5 ln 2 = 0.143841; max ln 4 = 1.386294 -> 0.103759
    assert heterogeneity([[1, 1]], "kl", [0.75, 0.25], "none")[0] == pytest.approx(0.5 * math.log(2 / 3) + 0.5 * LN2)
    assert heterogeneity([[1, 1]], "kl", [0.75, 0.25])[0] == pytest.approx(0.103759, abs=1e-6)


def test_js_by_hand() -> None:
    # C = 2, p = (1, 0), q = (.5, .5), m = (.75, .25)
    # KL(p||m) = ln(4/3) = 0.287682; KL(q||m) = .5 ln(2/3) + .5 ln 2 = 0.143841; JS = 0.215762
    one = heterogeneity([[3, 0]], "js", normalisation="none")[0]
    assert one == pytest.approx(0.5 * (math.log(4 / 3) + 0.5 * math.log(2 / 3) + 0.5 * LN2))
    assert one == pytest.approx(0.215762, abs=1e-6)
    assert heterogeneity([[3, 0]], "js")[0] == pytest.approx(1.0)  # a one-class client is the max
    # C = 4, p = (.5, .5, 0, 0), q = 1/4, m = (.375, .375, .125, .125)
    # KL(p||m) = ln(4/3); KL(q||m) = .5 ln(2/3) + .5 ln 2 -> JS = 0.215762 again
    # max at a vertex: .5 [ln(2/1.25) + .25 ln(.5/1.25) + .75 ln 2] = .5 * 0.760791 = 0.380396
    # normalised 0.215762 / 0.380396 = 0.567203
    assert heterogeneity([[2, 2, 0, 0]], "js")[0] == pytest.approx(0.567203, abs=1e-5)
    assert heterogeneity([[1, 1, 1, 1]], "js")[0] == pytest.approx(0.0, abs=1e-12)


def test_js_max_is_the_rarest_class_vertex() -> None:
    # JS(e_j || p_g), m = (e_j + p_g) / 2: 0.5 * KL(e_j || m) + 0.5 * KL(p_g || m)
    #   = 0.5 * -ln((1 + p)/2) + 0.5 * (p ln(2p/(1 + p)) + (1 - p) ln 2),  p = p_g(j)
    # p_g = (0.8, 0.2): class 0 -> 0.5 * 0.105361 + 0.5 * 0.044403 = 0.074882,
    #                   class 1 -> 0.5 * 0.510826 + 0.5 * 0.334795 = 0.422810 (the maximum, the rarer class)
    # so the one-class client of class 0 scores 0.074882 / 0.422810 = 0.177105, of class 1 exactly 1
    def vertex(p: float) -> float:
        return 0.5 * -math.log((1 + p) / 2) + 0.5 * (p * math.log(2 * p / (1 + p)) + (1 - p) * LN2)

    h = heterogeneity([[1, 0], [0, 1]], "js", p_g=[0.8, 0.2])
    assert h[0] == pytest.approx(vertex(0.8) / vertex(0.2), rel=1e-12) and h[0] == pytest.approx(0.177105, abs=1e-6)
    assert h[1] == pytest.approx(1.0, rel=1e-12)


def test_entropy_difference_max_when_the_reference_is_skewed() -> None:
    # p_g = (0.95, 0.05): H_g = -(0.95 ln 0.95 + 0.05 ln 0.05) = 0.048728 + 0.149787 = 0.198515 < ln 2 / 2,
    # so the largest |H_g - H_n| over H_n in [0, ln 2] is ln 2 - H_g = 0.494632 (a uniform client), not H_g.
    # one-class client: H_n = 0 -> 0.198515 / 0.494632 = 0.401339; uniform client: 0.494632 / 0.494632 = 1
    h_g = -(0.95 * math.log(0.95) + 0.05 * math.log(0.05))
    h = heterogeneity([[1, 0], [1, 1]], "entropy_diff", p_g=[0.95, 0.05])
    assert h[0] == pytest.approx(h_g / (LN2 - h_g), rel=1e-12) and h[0] == pytest.approx(0.401339, abs=1e-6)
    assert h[1] == pytest.approx(1.0, rel=1e-12)


def test_entropy_difference_by_hand() -> None:
    # uniform p_g, C = 4: |ln 4 - ln 2| = ln 2; max(ln 4, ln4 - ln4) = ln 4 -> 0.5
    assert heterogeneity([[2, 2, 0, 0]], "entropy_diff")[0] == pytest.approx(0.5)
    # p_g = (.5, .25, .25): H_g = .5 ln 2 + .5 ln 4 = 1.5 ln 2 = 1.039721
    # uniform client H = ln 3 = 1.098612 -> |diff| = 0.058892; max(H_g, ln3 - H_g) = H_g -> 0.056642
    p_g = [0.5, 0.25, 0.25]
    assert heterogeneity([[1, 1, 1]], "entropy_diff", p_g, "none")[0] == pytest.approx(LN3 - 1.5 * LN2)
    assert heterogeneity([[1, 1, 1]], "entropy_diff", p_g)[0] == pytest.approx(0.056642, abs=1e-6)


# ------------------------------------------------------------------ A.5 predictors


def test_gini_by_hand() -> None:
    # counts (3, 1, 0, 0): unordered |x_i - x_j| = 2 + 3 + 3 + 1 + 1 + 0 = 10, ordered 20
    # G = 20 / (2 * 4 * 4) = 0.625; max (C-1)/C = 0.75 -> 0.8333
    assert heterogeneity([[3, 1, 0, 0]], "gini", normalisation="none")[0] == pytest.approx(0.625)
    np.testing.assert_allclose(heterogeneity([[3, 1, 0, 0], [1, 1, 1, 1], [4, 0, 0, 0]], "gini"), [0.625 / 0.75, 0.0, 1.0])


def test_dominant_and_active_by_hand() -> None:
    # (3, 1, 0, 0): dominant 0.75 -> (0.75 - 0.25) / 0.75 = 2/3; active 2 -> (4 - 2) / 3 = 2/3
    assert heterogeneity([[3, 1, 0, 0]], "dominant", normalisation="none")[0] == pytest.approx(0.75)
    assert heterogeneity([[3, 1, 0, 0]], "dominant")[0] == pytest.approx(2 / 3)
    assert heterogeneity([[3, 1, 0, 0]], "active", normalisation="none")[0] == 2.0
    np.testing.assert_allclose(heterogeneity([[3, 1, 0, 0], [1, 1, 1, 1], [0, 0, 5, 0]], "active"), [2 / 3, 0.0, 1.0])


def test_size_and_entropy_by_hand() -> None:
    # sizes 4, 2, 1 -> 1 - n / 4 = 0, 0.5, 0.75
    np.testing.assert_allclose(heterogeneity([[2, 2], [1, 1], [1, 0]], "size"), [0.0, 0.5, 0.75])
    # H(3/4, 1/4) = .75 ln(4/3) + .25 ln 4 = 0.215762 + 0.346574 = 0.562335; 1 - H/ln 4 = 0.594361
    assert heterogeneity([[3, 1, 0, 0]], "entropy", normalisation="none")[0] == pytest.approx(0.562335, abs=1e-6)
    np.testing.assert_allclose(heterogeneity([[3, 1, 0, 0], [2, 2, 0, 0]], "entropy"), [0.594361, 0.5], atol=1e-6)


def test_uniform_clients_score_in_the_unit_interval_despite_rounding() -> None:
    # Eq. 6's score is "normalized to the range [0, 1]" (Sec. 3.2). A uniform client's entropy, summed as
    # C * (-(1/C) ln(1/C)), lands within a few ulps of ln C on either side (on this CPU above it for C = 5,
    # 12, 13, 18, ...), so 1 - H / ln C can come out as -1e-16 unless the score is clipped to [0, 1].
    for c in range(2, 41):
        for measure in ("entropy", "entropy_diff", "ratio", "kl", "js"):
            h = float(heterogeneity([[1] * c], measure)[0])
            assert 0.0 <= h <= 1e-12, (measure, c, h)


def test_minmax_flips_measures_where_large_means_less_heterogeneous() -> None:
    # entropies ln 4, ln 2, 0 -> (max - H) / (max - min) = 0, 0.5, 1
    counts = [[1, 1, 1, 1], [2, 2, 0, 0], [4, 0, 0, 0]]
    np.testing.assert_allclose(heterogeneity(counts, "entropy", normalisation="minmax"), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(heterogeneity(counts, "entropy", normalisation="none"), [LN4, LN2, 0.0])


def test_max_normalisation_stays_in_unit_interval_and_reaches_one() -> None:
    # property check of the vertex-maximum derivation on random clients and a random prior
    rng = np.random.default_rng(0)
    p_g = rng.dirichlet(np.ones(5))
    counts = rng.multinomial(50, rng.dirichlet(0.3 * np.ones(5)), size=40)
    counts[:, 0] += 1  # no empty client
    rarest = np.zeros((1, 5))
    rarest[0, int(np.argmin(p_g))] = 7.0
    for name in MEASURES:
        h = heterogeneity(counts, name, p_g)
        assert np.all((h >= 0) & (h <= 1)), name
    for name in ("ratio", "kl", "js", "gini", "dominant", "active"):
        assert heterogeneity(rarest, name, p_g)[0] == pytest.approx(1.0), name


# ------------------------------------------------------------------ errors


def test_unknown_measure_names_field_and_choices() -> None:
    with pytest.raises(ConfigError) as info:
        heterogeneity([[1, 2]], "wasserstein")
    assert info.value.field == "temperature.measure"
    assert "allowed:" in info.value.message and "ratio" in info.value.message and "js" in info.value.message


def test_bad_reference_and_empty_client() -> None:
    with pytest.raises(ConfigError, match="temperature.p_g"):
        heterogeneity([[1, 2, 3]], "ratio", [0.5, 0.5])
    with pytest.raises(ConfigError, match="temperature.p_g"):
        heterogeneity([[1, 2, 3]], "ratio", [0.5, 0.5, 0.0])
    with pytest.raises(ConfigError, match="no samples"):
        heterogeneity([[1, 2, 3], [0, 0, 0]], "ratio")
    with pytest.raises(ConfigError, match="temperature.normalisation"):
        heterogeneity([[1, 2, 3]], "ratio", normalisation="zscore")
