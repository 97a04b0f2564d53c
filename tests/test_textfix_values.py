"""``[dataset.augment] normalize = false`` gives integer features back exactly, and the index refusal prints the value it saw.

Undone in float32 (``x * std + mean``), integer token ids of an ``hf`` dataset came back 1 ulp off (4.9999995 for 5);
``char_lstm`` then refused them as "real-valued features", and the line printed the value with ``:g``, as "hold 5".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_index_inputs import _config, _indices

import chillfl
from chillfl.data import load_dataset
from chillfl.data.augment import unstandardise
from chillfl.data.datasets import standardise_with_stats
from chillfl.errors import ConfigError

datasets = pytest.importorskip("datasets")


def _tokens() -> np.ndarray:
    """60 rows of 12 token ids in 0..19 (seeded): the shape of the finding's dataset."""
    return np.random.default_rng(0).integers(0, 20, (60, 12))


def test_integer_features_come_back_exactly_with_normalize_false(tmp_path: Path) -> None:
    tokens = _tokens()
    f = tmp_path / "tokens.parquet"
    datasets.Dataset.from_dict({"tokens": tokens.tolist(), "label": [i % 3 for i in range(60)]}).to_parquet(str(f))
    ds = load_dataset("hf", {"path": str(f), "feature_columns": ["tokens"], "test_fraction": 0.25, "augment": {"normalize": False}})
    x = torch.cat([ds.x_train, ds.x_test])
    assert torch.equal(x, x.round())  # every value a whole number: before, some were 4.9999995 or 11.999999
    assert sorted(map(tuple, x.to(torch.int64).tolist())) == sorted(map(tuple, tokens.tolist()))  # the stored rows, each exactly


def test_unstandardise_gives_back_every_stored_whole_number() -> None:
    raw = np.random.default_rng(1).integers(0, 70000, (500, 12)).astype(np.float32)  # large ids too: float32 undo erred by 2e-3
    x, _, mean, std = standardise_with_stats(raw, raw[:1])
    assert torch.equal(unstandardise(x, torch.tensor(mean).view(1, -1), torch.tensor(std).view(1, -1)), torch.from_numpy(raw))


def test_the_refusal_prints_the_value_it_saw_exactly() -> None:
    x = _indices().x_train.clone()
    x[3, 2] = float(np.float32(4.9999995))  # 4.999999523162842 in float32; ":g" printed it as "5"
    with pytest.raises(ConfigError, match="integer indices") as err:
        chillfl.run(data=_indices(x_train=x), config=_config(), write=False, progress=False)
    assert "hold 4.999999523162842: real-valued" in str(err.value)


def test_a_stored_zero_comes_back_as_zero_not_minus_zero() -> None:
    raw = torch.tensor([[0.0, 1.0, 0.0, 7.0]])
    mean, std = torch.tensor([[3.0]]), torch.tensor([[2.5]])
    back = unstandardise((raw - mean) / std, mean, std)
    assert torch.equal(back, raw) and not torch.signbit(back).any()
