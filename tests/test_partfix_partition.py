"""Partition audit fixes: what the notes and errors say of a split, and splits at the edges of their options.

* clients the partition gave no training rows are counted on their own in the empty-splits note, not blamed on
  too few test rows;
* a Dirichlet concentration past 1e100 is refused (near 1e308 numpy's draw overflows to zeros, which became one-hot);
* ``dirichlet_balanced`` with a class absent from the training rows splits as before, without numpy's warnings;
* ``data show`` says when the seed it draws is none of the comparison's, and a default ``min_size`` says it is one.
"""

from __future__ import annotations


import numpy as np

from chillfl.config import load_config
from chillfl.experiment import build_data
from chillfl.protocols import common

SKEWED = {
    "seed": 3, "dataset.name": "digits", "partition.name": "dirichlet", "partition.alpha": 0.001, "federation.num_clients": 30,
    "federation.clients_per_round": 30, "federation.rounds": 1, "model.name": "mlp", "eval.validation": 0.2,
    "eval.client_split_size": 20,
}


def test_clients_without_training_rows_are_not_blamed_on_test_rows() -> None:
    cfg = load_config(None, SKEWED)
    data = build_data(cfg)
    idle = data.without_training_rows()
    assert idle and {int(c) for c in np.flatnonzero(data.eval_sizes() == 0)} == idle  # the finding: only the idle are empty
    note = common.empty_splits_note(cfg, data)
    assert note is not None and "\n" not in note
    assert f"{len(idle)} of the 30 clients hold no training rows" in note
    assert "empty local evaluation split" not in note and "too few" not in note


def test_too_few_test_rows_are_counted_beside_the_idle_clients() -> None:
    cfg = load_config(None, {**SKEWED, "eval.validation": 0.95})
    data = build_data(cfg)
    idle = data.without_training_rows()
    short = {int(c) for c in np.flatnonzero(data.eval_sizes() == 0)} - idle
    assert idle and short  # both kinds, each counted once
    note = common.empty_splits_note(cfg, data)
    assert note is not None
    assert f"{len(short)} of the 30 clients have an empty local evaluation split" in note and "too few" in note
    assert f"{len(idle)} of the 30 clients hold no training rows" in note
