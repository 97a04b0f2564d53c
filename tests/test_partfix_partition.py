"""Partition audit fixes: what the notes and errors say of a split, and splits at the edges of their options.

* clients the partition gave no training rows are counted on their own in the empty-splits note, not blamed on
  too few test rows;
* a Dirichlet concentration past 1e100 is refused (near 1e308 numpy's draw overflows to zeros, which became one-hot);
* ``dirichlet_balanced`` with a class absent from the training rows splits as before, without numpy's warnings;
* ``data show`` says when the seed it draws is none of the comparison's, and a default ``min_size`` says it is one.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.data.partition import PARTITIONERS, _balanced_by_class, partition
from chillfl.errors import ConfigError
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


CONCENTRATIONS = [
    ("dirichlet", "alpha", {}),
    ("dirichlet", "alpha", {"scheme": "client"}),
    ("dirichlet_balanced", "alpha", {}),
    ("quantity_skew", "h", {}),
    ("quantity_skew", "label_alpha", {"h": 1e3}),
    ("flexchill_dirichlet", "alpha", {}),
    ("scarlet_dirichlet", "alpha", {}),
]


@pytest.mark.parametrize("name, key, extra", CONCENTRATIONS)
def test_an_overflowing_concentration_is_refused_on_its_field(name: str, key: str, extra: dict[str, Any]) -> None:
    labels = np.repeat(np.arange(4), 25)
    with pytest.raises(ConfigError) as err:
        partition(name, labels, 5, np.random.default_rng(0), {**extra, key: 1e308})
    assert err.value.field == f"partition.{key}" and "1e+100" in err.value.message and "\n" not in err.value.message


@pytest.mark.parametrize("name, key, extra", [c for c in CONCENTRATIONS if c[0] not in ("flexchill_dirichlet", "scarlet_dirichlet")])
def test_the_largest_concentration_taken_is_near_iid(name: str, key: str, extra: dict[str, Any]) -> None:
    """At the bound every client holds every class (1e308 gave whole classes to single clients)."""
    labels = np.repeat(np.arange(4), 50)
    part = partition(name, labels, 4, np.random.default_rng(0), {**extra, key: 1e100})
    for ix in part.client_indices:
        assert set(labels[ix]) == {0, 1, 2, 3}


def test_the_cli_refuses_an_overflowing_alpha_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text('name = "big"\n[dataset]\nname = "digits"\n[partition]\nname = "dirichlet"\nalpha = 1e308\n')
    assert main(["data", "show", str(config), "-q", "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("chillfl: error: partition.alpha:") and "\n" not in err


class _Data:
    """What a partitioner reads of a dataset: here one more class than the labels hold (a class absent from the train set)."""

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.train_groups = None
        self.name = "t"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.05, 0.5, 1e6])
def test_a_trailing_empty_class_changes_no_split_and_warns_nothing(seed: int, alpha: float) -> None:
    """Every client reaches N / K before the absent classes: the fallback divided 0 by 0 (two RuntimeWarnings)."""
    labels = np.random.default_rng(seed + 100).integers(0, 3, 120)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        base = _balanced_by_class(labels, 4, 3, np.random.default_rng(seed), alpha).client_indices
        more = _balanced_by_class(labels, 4, 5, np.random.default_rng(seed), alpha).client_indices
        full = partition("dirichlet_balanced", labels, 4, np.random.default_rng(seed), {"alpha": alpha, "min_size": 0}, dataset=_Data(5))
    for a, b in zip(base, more):
        assert np.array_equal(a, b)
    assert sum(len(ix) for ix in full.client_indices) == len(labels)


def test_every_client_at_n_over_k_before_an_absent_class_warns_nothing() -> None:
    """The finding's case: a large alpha fills every client to exactly N / K, and the last class has no training rows."""
    labels = np.repeat(np.arange(3), 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        part = partition("dirichlet_balanced", labels, 3, np.random.default_rng(2), {"alpha": 1e6, "min_size": 0}, dataset=_Data(4))
    assert sorted(len(ix) for ix in part.client_indices) == [4, 4, 4]


def test_dirichlet_summary_names_the_floor_rule_not_hsu() -> None:
    summary = PARTITIONERS["dirichlet"].summary
    assert "Hsu" not in summary and "floor" in summary and "unused" in summary


def test_a_default_min_size_says_it_is_the_default() -> None:
    labels = np.repeat(np.arange(4), 25)
    for scheme in ("class", "client"):
        with pytest.raises(ConfigError) as err:
            partition("dirichlet_balanced", labels, 20, np.random.default_rng(0), {"scheme": scheme})
        assert err.value.field == "partition.min_size" and "10 is the default" in err.value.message
        with pytest.raises(ConfigError) as err:
            partition("dirichlet_balanced", labels, 20, np.random.default_rng(0), {"scheme": scheme, "min_size": 9})
        assert "default" not in err.value.message  # the user's own value: nothing to explain


def test_quantity_skew_says_its_default_min_size_too() -> None:
    labels = np.arange(200) % 10
    with pytest.raises(ConfigError) as err:  # redraw: no draw gives every client a row
        partition("quantity_skew", labels, 50, np.random.default_rng(0), {"h": 0.01, "min_rule": "redraw", "max_retries": 50})
    assert err.value.field == "partition.min_size" and "1 is the default" in err.value.message


COMPARED = 'name = "cmp"\n[dataset]\nname = "digits"\n[partition]\nname = "dirichlet"\nalpha = 0.3\n[compare]\nseeds = [5, 6]\n'


@pytest.mark.parametrize("extra, noted", [([], True), (["--seed", "5"], False), (["seed=0"], False)])
def test_data_show_says_when_its_seed_is_none_of_the_comparisons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], noted: bool
) -> None:
    config = tmp_path / "cmp.toml"
    config.write_text(COMPARED)
    assert main(["data", "show", str(config), *extra, "-o", str(tmp_path / "heat.png")]) == 0
    err = capsys.readouterr().err
    assert ("seed 0's partition, not among the [compare] seeds (5, 6); `--seed 5` shows one" in err) is noted


def test_data_show_of_one_variant_says_when_its_seed_is_none_of_the_comparisons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--variant LABEL`` showed the variant's one run, whose config drops [compare]: the note on the seeds never came."""
    config = tmp_path / "cmp.toml"
    config.write_text(COMPARED + '[variants.sharp]\npartition = { name = "dirichlet", alpha = 0.1 }\n')
    assert main(["data", "show", str(config), "--variant", "sharp", "-o", str(tmp_path / "heat.png")]) == 0
    assert "seed 0's partition, not among the [compare] seeds (5, 6); `--seed 5` shows one" in capsys.readouterr().err
    assert main(["data", "show", str(config), "--variant", "sharp", "--seed", "6", "-o", str(tmp_path / "heat.png")]) == 0
    assert "not among the [compare] seeds" not in capsys.readouterr().err
