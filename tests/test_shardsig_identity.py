"""A shard joins its comparison however ``--out`` and ``--data-dir`` spell its folders (cluster finding 2): they were
compared as typed (in the comparison's config.toml), so ``--out ./res``, ``res/`` or the absolute path, needed by a
shard started in another folder, was refused as "another comparison"; a refusal now names the field that differs
(chillfl.sweeps.record.sweep_difference)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.sweeps.record import same_sweep

from test_sweep_shard import _config  # the shard tests' comparison: 2 variants x 2 seeds, 2 rounds


def _shard(config: str, out: str, shard: str, *extra: str) -> int:
    return main(["run", config, "-q", "--out", out, "--shard", shard, *extra])


def test_a_shard_joins_when_its_out_and_data_dir_are_spelt_otherwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    (tmp_path / "data").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    assert _shard(config, "res", "1/2", "--data-dir", "data") == 0
    partial = tmp_path / "res" / "sh-compare.partial"
    assert partial.is_dir()
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)  # another job's folder: it has to spell both absolute
    assert _shard(config, str(tmp_path / "res") + "/", "2/2", "--data-dir", str(tmp_path / "data")) == 0, capsys.readouterr().err
    assert (tmp_path / "res" / "sh-compare" / "table.md").is_file() and not partial.exists()


def test_a_refused_shard_names_the_field_that_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    for name in ("data", "staged"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    assert _shard(config, "./res", "1/2", "--data-dir", "data") == 0
    capsys.readouterr()
    assert _shard(config, "res", "2/2", "--data-dir", "staged") == 2  # another folder of data: its files may differ (hf's path)
    err = capsys.readouterr().err.strip().splitlines()
    partial = Path("res") / "sh-compare.partial"
    assert err == [f"chillfl: error: shard: {partial} holds another comparison (its sweep.json differs: data_dir: {str(tmp_path / 'data')!r} there, "
                   f"{str(tmp_path / 'staged')!r} here); every shard must run the same command with the same code, or give each comparison "
                   "its own out_dir"], err
    assert _shard(config, "res", "2/2", "federation.rounds=3") == 2
    assert "(its sweep.json differs: federation.rounds: 2 there, 3 here)" in capsys.readouterr().err


def test_the_same_comparison_otherwise_is_not_matched() -> None:
    """What is compared still counts: a record that is no object, another field, another option."""
    record = {"format": 1, "config_sha256": "a", "config_toml": 'out_dir = "x"\n[client]\nlr = 0.1\n', "started_in": "/a"}
    assert same_sweep({**record, "config_sha256": "b", "config_toml": 'out_dir = "/a/x"\n[client]\nlr = 0.1\n', "started_in": "/b"}, record)  # type: ignore[arg-type]
    assert not same_sweep({**record, "config_toml": 'out_dir = "x"\n[client]\nlr = 0.2\n'}, record)  # type: ignore[arg-type]
    assert not same_sweep({**record, "format": 2}, record)  # type: ignore[arg-type]
    assert not same_sweep([], record)  # type: ignore[arg-type]
