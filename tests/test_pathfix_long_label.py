"""A variant label too long for a run folder name with its tuning point and seed is cut, not the ``-lr0.01-s0`` suffix:
the whole was cut from the right, so every point and seed of the variant got one folder, refused as "labels that differ"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from chillfl.run_names import folder_clash, run_name


@dataclass(frozen=True)
class _Variant:
    label: str
    short: str | None = None
    tune: Mapping[str, Sequence[Any]] = field(default_factory=dict)


def test_a_long_label_keeps_its_runs_suffix_whole() -> None:
    long = _Variant("L" * 240)
    names = [run_name(long, {"client.lr": lr}, seed) for lr in (0.01, 0.05) for seed in (0, 1)]
    assert names == ["L" * (200 - len(end)) + end for end in ("-lr0.01-s0", "-lr0.01-s1", "-lr0.05-s0", "-lr0.05-s1")]
    assert folder_clash(names) is None
    full = run_name(long, {"client.lr": 0.01}, 1, long=True)
    assert full == "L" * (200 - len("_client.lr0.01_seed1")) + "_client.lr0.01_seed1"
    wide = run_name(_Variant("é" * 150), {}, 3)  # 2 bytes a letter: cut by bytes, the suffix whole
    assert wide == "é" * 98 + "-s3" and len(wide.encode()) == 199


def test_a_label_that_fits_is_named_as_before() -> None:
    assert run_name(_Variant("FedChill*"), {"client.lr": 0.01}, 0) == "FedChill_star-lr0.01-s0"
    assert run_name(_Variant("T=0.5"), {}, None) == "T0.5"
    assert run_name(_Variant("a b"), {"client.lr": 0.01}, 2, long=True) == "a_b_client.lr0.01_seed2"
