"""What the docs say of a one-row batch, of norm bounding's clipped updates at max_norm 0.5, and of batch-norm
statistics under model attacks, against what the code does."""

from __future__ import annotations

from pathlib import Path

import torch

from chillfl.experiments import resolve_config
from chillfl.training.local import batch_order

ROOT = Path(__file__).resolve().parents[1]


def _flat(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def test_batch_size_1_is_not_per_sample_sgd_and_choices_md_says_so() -> None:
    g = torch.Generator().manual_seed(0)
    assert [len(b) for b in batch_order(2, 1, 1, g)] == [2]  # a 2-row client: 1 step of 2 rows, not 2 steps of 1
    assert [len(b) for b in batch_order(5, 1, 2, g)] == [1, 1, 1, 2] * 2  # n - 1 steps an epoch, the last of 2 rows
    assert [len(b) for b in batch_order(1, 1, 1, g)] == [1]  # one row alone is one batch
    choices = _flat(ROOT / "docs" / "choices.md")
    assert "`client.batch_size = 1` is not per-sample SGD" in choices and "1 step of 2 rows, not 2 steps of 1" in choices


def test_norm_bound_clips_per_round_as_the_page_and_the_config_say() -> None:
    page = _flat(ROOT / "docs" / "attacks.md")
    config = _flat(resolve_config("attacks/aggregators-digits"))
    assert "51 of its 100 updates, 3 in round 1, all 40 in rounds 2-5, 8 in round 6 and none from round 7" in page
    assert "51 of the run's 100 updates: 3 in round 1, all 40 in rounds 2-5, 8 in round 6, none from round 7" in config


def test_the_attacks_page_says_scaling_and_sign_flip_rewrite_running_var_too() -> None:
    page = _flat(ROOT / "docs" / "attacks.md")
    assert "not only `gaussian` but `scaling` and `sign_flip`" in page and "negative `running_var`" in page
