"""ECE, NLL and Brier on hand-computed examples; the one-pass accumulator agrees with the offline functions."""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.metrics.calibration import (
    CalibrationAccumulator,
    bin_edges,
    bin_index,
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
    reliability,
)

# Four predictions over 2 classes; labels 0, 0, 1, 1.
#   sample  p               conf  pred  correct
#   0       (0.9, 0.1)      0.9   0     yes
#   1       (0.6, 0.4)      0.6   0     yes
#   2       (0.8, 0.2)      0.8   0     no
#   3       (0.3, 0.7)      0.7   1     yes
PROBS = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.8, 0.2], [0.3, 0.7]], dtype=torch.float64)
LABELS = torch.tensor([0, 0, 1, 1])


def test_ece_two_bins_by_hand() -> None:
    # 2 equal-width bins: (0, 0.5] and (0.5, 1]. Every confidence is > 0.5, so all four fall in bin 2:
    # acc = 3/4 = 0.75, conf = (0.9 + 0.6 + 0.8 + 0.7)/4 = 0.75  ->  ECE = 0.
    assert expected_calibration_error(PROBS, LABELS, num_bins=2) == pytest.approx(0.0, abs=1e-12)
    # 4 equal-width bins: (0.5, 0.75] holds samples 1 (0.6, right) and 3 (0.7, right): acc 1, conf 0.65, gap 0.35;
    # (0.75, 1] holds samples 0 (0.9, right) and 2 (0.8, wrong): acc 0.5, conf 0.85, gap 0.35.
    # ECE = 2/4 * 0.35 + 2/4 * 0.35 = 0.35.
    assert expected_calibration_error(PROBS, LABELS, num_bins=4) == pytest.approx(0.35, abs=1e-12)


def test_ece_two_bins_split_by_hand() -> None:
    # Confidences 0.9 (right), 0.55 (wrong), 0.5 (wrong, on the edge: bin (0, 0.5]), 0.95 (right); labels 0,1,1,0.
    probs = torch.tensor([[0.9, 0.1], [0.55, 0.45], [0.5, 0.5], [0.95, 0.05]], dtype=torch.float64)
    labels = torch.tensor([0, 1, 1, 0])
    # argmax of (0.5, 0.5) is class 0 -> wrong for label 1.
    # bin (0, 0.5]: {0.5 wrong}: acc 0, conf 0.5, gap 0.5, weight 1/4
    # bin (0.5, 1]: {0.9 right, 0.55 wrong, 0.95 right}: acc 2/3, conf 2.4/3 = 0.8, gap 0.8 - 0.6667 = 0.1333, weight 3/4
    # ECE = 0.125 + 0.1 = 0.225
    rel = reliability(probs, labels, num_bins=2)
    assert rel.count == [1, 3]
    assert rel.accuracy == pytest.approx([0.0, 2 / 3])
    assert rel.confidence == pytest.approx([0.5, 0.8])
    assert rel.ece() == pytest.approx(0.225, abs=1e-12)
    assert rel.mce() == pytest.approx(0.5)


def test_bin_edges_are_right_closed() -> None:
    # With M = 15: 1/15 belongs to bin 0, just above it to bin 1; 1.0 to the last bin.
    conf = torch.tensor([1 / 15, 1 / 15 + 1e-9, 1.0, 0.0], dtype=torch.float64)
    assert bin_index(conf, 15).tolist() == [0, 1, 14, 0]


def test_brier_by_hand() -> None:
    # sample 0: (0.9-1)^2 + 0.1^2 = 0.02;  1: (0.6-1)^2 + 0.4^2 = 0.32
    # sample 2: 0.8^2 + (0.2-1)^2 = 1.28;  3: 0.3^2 + (0.7-1)^2 = 0.18  -> mean 1.8 / 4 = 0.45
    assert brier_score(PROBS, LABELS) == pytest.approx(0.45, abs=1e-12)


def test_nll_by_hand() -> None:
    # NLL = -(ln 0.9 + ln 0.6 + ln 0.2 + ln 0.7) / 4 = (0.10536 + 0.51083 + 1.60944 + 0.35667) / 4 = 0.645575
    logits = PROBS.log()  # softmax(log p) = p
    assert negative_log_likelihood(logits, LABELS) == pytest.approx(0.645575, abs=1e-5)
    # At T = 2 the probabilities become sqrt(p) renormalised: sample 0: sqrt(.9)/(sqrt(.9)+sqrt(.1)) = 0.75
    assert negative_log_likelihood(logits[:1], LABELS[:1], temperature=2.0) == pytest.approx(-math.log(0.75), abs=1e-12)


def test_equal_mass_binning() -> None:
    # 2 equal-mass bins over sorted confidences 0.6, 0.7 | 0.8, 0.9:
    # low bin {0.6 right, 0.7 right}: acc 1, conf 0.65; high {0.8 wrong, 0.9 right}: acc 0.5, conf 0.85 -> ECE 0.35
    rel = reliability(PROBS, LABELS, num_bins=2, binning="mass")
    assert rel.count == [2, 2]
    assert rel.ece() == pytest.approx(0.35)
    with pytest.raises(ValueError):
        reliability(PROBS, LABELS, binning="quantile")


def test_accumulator_matches_offline_in_batches() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(100, 5, generator=gen)
    labels = torch.randint(0, 5, (100,), generator=gen)
    acc = CalibrationAccumulator(15)
    for i in range(0, 100, 32):  # uneven batches
        acc(logits[i : i + 32], labels[i : i + 32])
    out = acc.result()
    probs = torch.softmax(logits.double(), dim=1)
    assert out["ece"] == pytest.approx(expected_calibration_error(probs, labels, 15), abs=1e-12)
    assert out["brier"] == pytest.approx(brier_score(probs, labels), abs=1e-12)
    assert out["nll"] == pytest.approx(negative_log_likelihood(logits, labels), abs=1e-12)
    assert math.isnan(CalibrationAccumulator().result()["ece"])


def test_accumulator_bins_by_hand() -> None:
    # PROBS in 4 equal-width bins (see test_ece_two_bins_by_hand): (0.5, 0.75] holds samples 1 and 3 (both right,
    # conf 0.65), (0.75, 1] samples 0 and 2 (one right, conf 0.85); the two lower bins are empty (reported as 0).
    acc = CalibrationAccumulator(4)
    acc(PROBS[:3].log(), LABELS[:3])  # log p: softmax gives p back
    acc(PROBS[3:].log(), LABELS[3:])
    rel = acc.reliability()
    assert rel.edges == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert rel.count == [0, 0, 2, 2]
    assert rel.accuracy == pytest.approx([0.0, 0.0, 1.0, 0.5], abs=1e-12)
    assert rel.confidence == pytest.approx([0.0, 0.0, 0.65, 0.85], abs=1e-12)
    assert rel.ece() == pytest.approx(acc.result()["ece"], abs=1e-12) and rel.ece() == pytest.approx(0.35, abs=1e-12)
    assert CalibrationAccumulator(3).reliability().count == [0, 0, 0]


def test_perfectly_confident_and_right_is_calibrated() -> None:
    logits = torch.tensor([[50.0, 0.0], [0.0, 50.0]])
    labels = torch.tensor([0, 1])
    acc = CalibrationAccumulator(10)
    acc(logits, labels)
    out = acc.result()
    assert out["ece"] == pytest.approx(0.0, abs=1e-12)
    assert out["brier"] == pytest.approx(0.0, abs=1e-12)
    # and confidently wrong is maximally miscalibrated: ECE -> 1, Brier -> 2
    acc = CalibrationAccumulator(10)
    acc(logits, labels.flip(0))
    out = acc.result()
    assert out["ece"] == pytest.approx(1.0, abs=1e-12)
    assert out["brier"] == pytest.approx(2.0, abs=1e-12)


def test_bin_index_compares_with_the_edges() -> None:
    # ceil(conf * M) - 1 rounds the product: 7/25 * 25 = 7.000000000000001 put 0.28 in (0.28, 0.32], and the
    # double just above 11/15 times 15 = 11.0 put it in (10/15, 11/15]. Guo et al. bin by lower < conf <= upper.
    above = math.nextafter(11 / 15, 1.0)
    assert bin_index(torch.tensor([7 / 25], dtype=torch.float64), 25).tolist() == [6]
    assert bin_index(torch.tensor([11 / 15, above], dtype=torch.float64), 15).tolist() == [10, 11]
    edges = bin_edges(25)
    conf = torch.tensor(edges[1:], dtype=torch.float64)  # every upper edge falls in its own bin
    assert bin_index(conf, 25).tolist() == list(range(25))
    probs = torch.tensor([[above, 1 - above]], dtype=torch.float64)
    assert [i for i, n in enumerate(reliability(probs, torch.tensor([0]), 15).count) if n] == [11]


def test_reliability_diagram_of_a_model_with_non_finite_outputs(tmp_path) -> None:
    """A run that finished with a global model whose logits overflow keeps null (NaN) bins in summary.json;
    its diagram is still drawn (`chillfl report` of the demo at federation.rounds=1 stopped with a TypeError)."""
    import json

    from chillfl.analysis.calibration import calibration_of, plot_reliability
    from chillfl.storage.results import strict

    logits = torch.tensor([[math.inf, 0.0], [0.0, 2.0], [1.0, 0.0]], dtype=torch.float64)
    saved = json.loads(json.dumps(strict(calibration_of(logits, torch.tensor([0, 1, 1]), bins=4)), allow_nan=False))
    assert saved["ece"] is None and None in saved["reliability"]["confidence"]  # what summary.json holds
    plot_reliability({"runs": {"run": saved}}, tmp_path / "reliability.png")
    assert (tmp_path / "reliability.png").stat().st_size > 0
