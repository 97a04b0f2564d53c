"""Calibration of a classifier: expected calibration error (ECE), negative log-likelihood, Brier score.

A model trained at a low softmax temperature T learns logits scaled for
``softmax(z / T)``: read at T = 1 they are too small, and the model is typically
strongly *under*-confident (docs/analysis.md's example: ECE 0.81); read at its
training T it is close to calibrated. These measures say how far the predicted
probabilities are from the observed frequencies.

Definitions (n samples, K classes, p = softmax(z / T_eval), T_eval = 1 in the
per-round metrics)::

    confidence_i = max_k p_ik,   prediction_i = argmax_k p_ik
    ECE   = sum_b |B_b| / n * | acc(B_b) - conf(B_b) |          (Guo et al., 2017)
    NLL   = -1/n sum_i log p_{i, y_i}                           (= the cross-entropy at T = 1)
    Brier = 1/n sum_i sum_k (p_ik - 1[k = y_i])^2               (Brier, 1950; multi-class, in [0, 2])

ECE bins: ``num_bins`` equal-width bins over the confidence, bin b is the
half-open interval ((b - 1)/M, b/M] (bin 1 also holds confidence 0, which a
softmax never gives). ``acc(B_b)`` is the fraction of correct predictions in
the bin, ``conf(B_b)`` the mean confidence; empty bins contribute 0.
``binning = "mass"`` instead puts (as nearly as possible) the same number of
samples in every bin, sorted by confidence (the "adaptive" ECE); it needs all
confidences at once, so only the offline functions offer it.

Checked against Guo et al. 2017 (Sec. 2, "Expected Calibration Error": M
equal-width bins I_m = ((m-1)/M, m/M], each weighted by |B_m| / n) and
gpleiss/temperature_scaling ``temperature_scaling.py`` (``_ECELoss``:
``conf > bin_lower`` and ``conf <= bin_upper`` over ``linspace(0, 1, M + 1)``),
2026-12-02. The bin is found by comparing with the edges as there (it was
ceil(conf * M) - 1, whose rounded product put a confidence on or just above
an edge one bin off). The reference compares in float32; chillfl computes
confidences and edges in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

DEFAULT_BINS = 15
BINNINGS = ("width", "mass")


def bin_edges(num_bins: int) -> list[float]:
    """The equal-width edges 0, 1/M, ..., 1 (each b/M the nearest double, as Python's ``b / M``)."""
    return [b / num_bins for b in range(num_bins + 1)]


def bin_index(confidence: torch.Tensor, num_bins: int) -> torch.Tensor:
    """Equal-width bin of each confidence: b with (b/M, (b+1)/M] holding it (0-based; 0 also holds 0).

    Found by comparing with the edges (as Guo et al.'s ``lower < conf <= upper``), not as ceil(conf * M) - 1:
    the product rounds, so a confidence on an edge (0.28 = 7/25) or just above one (the double after 11/15)
    would land one bin off.
    """
    conf = confidence.double()
    # b / M made on the device (no host copy per batch); IEEE division gives the same doubles as bin_edges
    edges = torch.arange(num_bins + 1, dtype=torch.float64, device=conf.device) / num_bins
    idx = torch.searchsorted(edges, conf.contiguous(), right=False) - 1
    return idx.clamp_(0, num_bins - 1)


@dataclass
class Reliability:
    """Per-bin counts, mean confidence and accuracy: the data of a reliability diagram."""

    edges: list[float]
    count: list[int]
    confidence: list[float]
    accuracy: list[float]

    def ece(self) -> float:
        n = sum(self.count)
        return sum(c / n * abs(a - f) for c, a, f in zip(self.count, self.accuracy, self.confidence) if c) if n else float("nan")

    def mce(self) -> float:
        """Maximum calibration error: the largest |acc - conf| over non-empty bins."""
        gaps = [abs(a - f) for c, a, f in zip(self.count, self.accuracy, self.confidence) if c]
        return max(gaps) if gaps else float("nan")


def reliability(probs: torch.Tensor, labels: torch.Tensor, num_bins: int = DEFAULT_BINS, binning: str = "width") -> Reliability:
    """Bin the predictions of ``probs`` ([n, K], rows summing to 1) by confidence (see module docstring)."""
    if binning not in BINNINGS:
        raise ValueError(f"binning must be one of {BINNINGS}, got {binning!r}")
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    conf, pred = probs.double().max(dim=1)
    correct = (pred == labels).double()
    if binning == "width":
        idx = bin_index(conf, num_bins)
        edges = bin_edges(num_bins)
    else:
        order = torch.argsort(conf, stable=True)
        idx = torch.empty_like(order)
        idx[order] = torch.div(torch.arange(len(conf)) * num_bins, max(len(conf), 1), rounding_mode="floor")
        chunks = [conf[order][idx[order] == b] for b in range(num_bins)]
        edges = [0.0] + [float(c.max()) if len(c) else float("nan") for c in chunks]
    count = torch.bincount(idx, minlength=num_bins)
    conf_sum = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, idx, conf)
    acc_sum = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, idx, correct)
    safe = count.clamp(min=1).double()
    return Reliability(edges, count.tolist(), (conf_sum / safe).tolist(), (acc_sum / safe).tolist())


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, num_bins: int = DEFAULT_BINS, binning: str = "width") -> float:
    """ECE of ``probs`` against ``labels`` (see module docstring)."""
    return reliability(probs, labels, num_bins, binning).ece()


def brier_score(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean over samples of the squared distance between ``probs`` and the one-hot label (range [0, 2])."""
    onehot = F.one_hot(labels, probs.shape[1]).double()
    return float(((probs.double() - onehot) ** 2).sum(dim=1).mean())


def negative_log_likelihood(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> float:
    """Mean -log softmax(z / T)_y (log-softmax: stable for large logits)."""
    return float(F.cross_entropy(logits.double() / temperature, labels))


class CalibrationAccumulator:
    """Sums over batches of logits (equal-width ECE and Brier): one pass, tensors on the device, one host sync.

    Used inside the global evaluation, so calibration costs no second pass
    over the test set.
    """

    def __init__(self, num_bins: int = DEFAULT_BINS, temperature: float = 1.0) -> None:
        self.num_bins = num_bins
        self.temperature = temperature
        self.n = 0
        self._sums: torch.Tensor | None = None  # [count per bin | confidence per bin | correct per bin | Brier | NLL], float64

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """Add one batch (the ``observe`` hook of :func:`chillfl.training.local.evaluate`)."""
        m = self.num_bins
        logp = torch.log_softmax(logits.double() / self.temperature, dim=1)
        p = logp.exp()
        conf, pred = p.max(dim=1)
        idx = bin_index(conf, m)
        if self._sums is None:
            self._sums = torch.zeros(3 * m + 2, dtype=torch.float64, device=logits.device)
        sums = self._sums
        # Per-bin sums as a one-hot matmul, not index_add_: atomics on a GPU would add in a varying
        # order, and the run's metrics must be bitwise reproducible on every device.
        onehot = F.one_hot(idx, m).double()
        per_bin = onehot.T @ torch.stack([torch.ones_like(conf), conf, (pred == labels).double()], dim=1)  # [m, 3]
        sums[: 3 * m] += per_bin.T.reshape(-1)
        py = p.gather(1, labels[:, None]).squeeze(1)
        sums[3 * m] += ((p * p).sum(dim=1) - 2 * py + 1).sum()
        sums[3 * m + 1] -= logp.gather(1, labels[:, None]).sum()
        self.n += len(labels)

    def result(self) -> dict[str, float]:
        """``{"ece", "nll", "brier"}`` over everything added (NaN when nothing was)."""
        if self._sums is None or self.n == 0:
            return {"ece": float("nan"), "nll": float("nan"), "brier": float("nan")}
        m, sums = self.num_bins, self._sums
        gaps = (sums[2 * m : 3 * m] - sums[m : 2 * m]).abs().sum()  # sum_b |sum correct - sum conf| = sum_b |B_b| |acc - conf|
        values = torch.stack([gaps, sums[3 * m + 1], sums[3 * m]]).cpu().tolist()  # one host sync
        return {"ece": values[0] / self.n, "nll": values[1] / self.n, "brier": values[2] / self.n}

    def reliability(self) -> Reliability:
        """The equal-width bins of everything added: what a reliability diagram draws (one host sync)."""
        m = self.num_bins
        sums = torch.zeros(3 * m + 2, dtype=torch.float64) if self._sums is None else self._sums.cpu()
        count = sums[:m]
        safe = count.clamp(min=1)
        return Reliability(bin_edges(m), [int(c) for c in count.tolist()], (sums[m : 2 * m] / safe).tolist(), (sums[2 * m : 3 * m] / safe).tolist())
