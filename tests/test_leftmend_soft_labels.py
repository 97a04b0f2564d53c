"""``chillfl analyze soft-label-entropy``'s names for its files: one rule for every file of a call (stems, or whole
names where stems would mislead), each file under a label of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from chillfl.analysis.cache_ratio import soft_label_names
from chillfl.cli import main


@pytest.mark.parametrize("paths, labels", [
    (["a/x.npy"], ["x"]),
    (["a/x.npy", "b/x.npy"], ["a/x", "b/x"]),  # stems told apart by their folders, as before
    (["a/x.npy", "a/x.pt"], ["x.npy", "x.pt"]),
    (["a/x.npy", "a/x"], ["x.npy", "x"]),
    # before: x.npy, x.pt and x (b/x.npy under its stem, beside the others' whole names)
    (["a/x.npy", "a/x.pt", "b/x.npy"], ["a/x.npy", "x.pt", "b/x.npy"]),
    # before: a/x.npy was x and b/x.npy.pt was x.npy: the label x.npy named another file than x.npy
    (["a/x.npy", "b/x.npy.pt"], ["x.npy", "x.npy.pt"]),
])
def test_soft_label_files_are_named_by_one_rule(paths: list[str], labels: list[str], tmp_path: Path) -> None:
    named = soft_label_names([str(tmp_path / p) for p in paths])
    assert list(named) == labels and list(named.values()) == [str(tmp_path / p) for p in paths]


def test_a_stem_equal_to_another_files_path_leaves_no_file_out(tmp_path: Path) -> None:
    """a/x.npy.pt's stem is a/x.npy, which was a/x.npy's key (x.npy and x.pt share the stem a/x): a/x.npy was dropped."""
    paths = [str(tmp_path / "a" / name) for name in ("x.npy", "x.pt", "x.npy.pt")]
    assert soft_label_names(paths) == {"x.npy": paths[0], "x.pt": paths[1], "x.npy.pt": paths[2]}


def test_the_command_prints_each_file_under_its_whole_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """x.npy, x.pt and x.npy.pt side by side: three sets printed. Entropies at beta = 1 by hand (nats): [0.5, 0.5]: ln 2
    = 0.693; [1, 0]: 0; [0.9, 0.1]: 0.9 ln(1/0.9) + 0.1 ln 10 = 0.0948 + 0.2303 = 0.325."""
    folder = tmp_path / "a"
    folder.mkdir()
    np.save(folder / "x.npy", np.array([[0.5, 0.5]]))
    torch.save(torch.tensor([[1.0, 0.0]], dtype=torch.float64), folder / "x.pt")
    torch.save(torch.tensor([[0.9, 0.1]], dtype=torch.float64), folder / "x.npy.pt")
    files = [str(folder / name) for name in ("x.npy", "x.pt", "x.npy.pt")]
    argv = ["analyze", "soft-label-entropy", *(a for f in files for a in ("--soft-labels", f)), "-o", str(tmp_path / "out"), "--temps", "1", "--betas", "1"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0::3][:3] == ["x.npy:", "x.pt:", "x.npy.pt:"]
    assert [line.split("b=1: ")[1] for line in lines[2:9:3]] == ["0.693", "0.000", "0.325"]
