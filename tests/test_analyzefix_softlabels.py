"""`chillfl analyze soft-label-entropy` (analyzecheck findings 2, 3, 6): one name per file, rows that are not
probabilities refused, ``--seed`` checked as cache-ratio checks it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from chillfl.cli import main
from test_analyze_fixes import _one_line


def _save(path: Path, rows: list[list[float]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.array(rows))
    return str(path)


def test_soft_label_files_of_one_stem_are_both_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """a/x.npy and b/x.npy were both ``x``: only b's was printed. Entropies by hand (nats):
    [0.9, 0.05, 0.05]: 0.9 ln(1/0.9) + 0.1 ln 20 = 0.0948 + 0.2996 = 0.394; [0.34, 0.33, 0.33]: 0.3668 + 0.7317 = 1.099."""
    a = _save(tmp_path / "a" / "x.npy", [[0.9, 0.05, 0.05]])
    b = _save(tmp_path / "b" / "x.npy", [[0.34, 0.33, 0.33]])
    assert main(["analyze", "soft-label-entropy", "--soft-labels", a, "--soft-labels", b, "-o", str(tmp_path / "sx"), "--temps", "1", "--betas", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "a/x:" in out and "b/x:" in out
    assert out.index("b=1: 0.394") < out.index("b/x:") < out.index("b=1: 1.099")


@pytest.mark.parametrize("rows, where, total", [([[5.0, 3.0, 2.0], [0.3, 0.3, 0.4]], "row 0", "10"),
                                                ([[0.3, 0.3, 0.4], [0.0, 0.0, 0.0]], "row 1", "0"),
                                                ([[0.5, 0.5], [0.5, 0.502]], "row 1", "1.002")])
def test_soft_label_rows_must_sum_to_one(tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[list[float]], where: str, total: str) -> None:
    """Counts (sum 10) gave a negative "entropy" -5.82 at beta = 1 and an all-zero row NaN; 1.002 is past 1e-3."""
    path = _save(tmp_path / "bad.npy", rows)
    assert main(["analyze", "soft-label-entropy", "--soft-labels", path, "-o", str(tmp_path / "sx"), "--temps", "1", "--betas", "1,2"]) == 2
    line = _one_line(capsys, "--soft-labels")
    assert f"{where} sums to {total};" in line and "within 0.001" in line


def test_soft_label_rows_within_the_tolerance_are_renormalised(tmp_path: Path) -> None:
    """A float32 softmax of 1000 classes (rounded: sums off 1 by up to ~1e-5) is accepted; [K, n, C] names (k, i); an
    accepted row is divided by its sum, so beta = 1 (returned unnormalised) reads an exact entropy."""
    from chillfl.analysis.cache_ratio import load_soft_labels

    soft = torch.softmax(10 * torch.randn(64, 1000, generator=torch.Generator().manual_seed(0)), dim=-1).numpy()
    np.save(tmp_path / "f32.npy", soft)
    loaded = load_soft_labels(str(tmp_path / "f32.npy"))
    assert torch.allclose(loaded.sum(-1), torch.ones(64, dtype=torch.float64), rtol=0, atol=1e-15)
    np.save(tmp_path / "near.npy", np.array([[0.5005, 0.5]]))
    assert load_soft_labels(str(tmp_path / "near.npy")).tolist() == [[0.5005 / 1.0005, 0.5 / 1.0005]]
    np.save(tmp_path / "k.npy", np.array([[[0.5, 0.5]], [[1.0, 1.0]]]))
    with pytest.raises(Exception, match=r"row \(1, 0\) sums to 2;"):
        load_soft_labels(str(tmp_path / "k.npy"))


@pytest.mark.parametrize("seed", ["18446744073709551615", "99999999999999999999", "-1", str(2**63)])
def test_soft_label_entropy_seed_is_checked_as_cache_ratio_checks_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: str) -> None:
    """A seed past torch's generator (or seed + 1, the second example's) was a traceback; -1 ran, where cache-ratio refuses it."""
    assert main(["analyze", "soft-label-entropy", "--seed", seed, "-o", str(tmp_path / "sx")]) == 2
    assert f"must be in [0, 2**63), got {seed}" in _one_line(capsys, "--seed")


def test_soft_label_entropy_takes_the_largest_seed(tmp_path: Path) -> None:
    """2**63 - 1: its second example's seed is 2**63, still one the generator takes."""
    assert main(["analyze", "soft-label-entropy", "--seed", str(2**63 - 1), "-o", str(tmp_path / "sx"), "--temps", "1", "--betas", "1"]) == 0


@pytest.mark.parametrize("dtype, classes", [(torch.bfloat16, 128), (torch.bfloat16, 1000), (torch.float16, 1024)])
def test_a_low_precision_all_zero_or_far_off_row_is_refused(tmp_path: Path, dtype: torch.dtype, classes: int) -> None:
    """The tolerance grew with the class count (``classes * eps``): 1 or more for bfloat16 from 128 classes, float16 from
    1024, so an all-zero row passed and every entropy was NaN, and a row summing to 0.3 was quietly rescaled. A stored
    row is off its computed sum by at most eps / 2 (plus half a subnormal an entry, rev111 4): ``2 * eps`` (1.6e-2, 2e-3) now."""
    from chillfl.analysis.cache_ratio import load_soft_labels

    good = torch.softmax(torch.randn(3, classes, generator=torch.Generator().manual_seed(1)), dim=-1).to(dtype)
    torch.save(good, tmp_path / "good.pt")
    assert load_soft_labels(str(tmp_path / "good.pt")).shape == (3, classes)  # rounding alone: accepted
    zero = good.clone()
    zero[1] = 0
    torch.save(zero, tmp_path / "zero.pt")
    with pytest.raises(Exception, match=r"row 1 sums to 0;"):
        load_soft_labels(str(tmp_path / "zero.pt"))
    far = good.clone()
    far[2] = (good[2].to(torch.float64) * 0.3).to(dtype)
    torch.save(far, tmp_path / "far.pt")
    with pytest.raises(Exception, match=r"row 2 sums to 0\.\d+;"):
        load_soft_labels(str(tmp_path / "far.pt"))
