"""NumPy values inside lists, tuples and dicts become Python values, and ``tune`` takes a NumPy array of values as
``grid`` does (apifix2, pyapi #4): ``plain`` converted only a top-level NumPy value, so ``list(np.arange(1, 3))`` (a
list of NumPy scalars) reached the TOML writer, which raised a raw TypeError; ``tune={"client.lr": np.logspace(...)}``
was refused as not a list."""

from __future__ import annotations

import numpy as np
import tomli_w

from chillfl.options import plain
from chillfl.tune import parse_tune


def test_plain_converts_numpy_values_inside_lists_tuples_and_dicts() -> None:
    value = {"a": list(np.arange(1, 3)), "b": (np.float32(0.5), "x"), "c": {"d": [np.int64(3), np.array([1, 2])]}, "e": np.bool_(True)}
    out = plain(value)
    assert out == {"a": [1, 2], "b": (0.5, "x"), "c": {"d": [3, [1, 2]]}, "e": True}
    assert type(out["a"][0]) is int and type(out["b"]) is tuple and type(out["b"][0]) is float and type(out["e"]) is bool
    tomli_w.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in out.items()})  # a list of np.int64 raised TypeError
    already = {"a": [1, 2], "b": (0.5,)}
    assert plain(already) is already and plain(already["a"]) is already["a"]


def test_tune_takes_a_numpy_array_of_values() -> None:
    points = parse_tune({"client.lr": np.logspace(-2, -1, 2), "client.epochs": list(np.arange(1, 3))})
    assert points == [{"client.lr": 0.01, "client.epochs": 1}, {"client.lr": 0.01, "client.epochs": 2},
                      {"client.lr": 0.1, "client.epochs": 1}, {"client.lr": 0.1, "client.epochs": 2}]
    assert all(type(p["client.epochs"]) is int for p in points)
