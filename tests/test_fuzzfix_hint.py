"""The divergence hint said "lower client.lr?" where client.weight_decay blew the loss up (report-fuzz finding 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_fuzzfix_options import run


def test_a_weight_decay_divergence_does_not_blame_the_lr_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(tmp_path, capsys, "client.weight_decay=1e38", dry=False)  # 1e308 is refused now (past float32)
    assert code == 3, err
    said = next(line for line in err if "diverged" in line)
    assert "(lower client.lr?)" not in said and "weight_decay" in said, said
