"""A sweep keeps going past a diverged or failed run (issue 25): marked in every table, exit 3 only when
nothing was compared (every run failed, or no variant besides the baseline finished where it did) or with
--strict, overall progress, readable folder names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.errors import DIVERGED_EXIT

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=2", "model.name=mlp", "eval.client_split_size=20"]


def config(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(f'out_dir = "{tmp_path / "out"}"\n', encoding="utf-8")
    return path


def test_a_diverging_lr_does_not_lose_the_other_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(config(tmp_path)), *TINY, "--grid", "algorithm.name=fedavg,fedprox", "--grid", "client.lr=0.05,1e30"]) == 0
    captured = capsys.readouterr()
    assert "| algorithm.name=fedavg, client.lr=1e+30 (diverged at round 1) | - |" in captured.out
    assert "| algorithm.name=fedavg, client.lr=0.05 | " in captured.out
    folder = tmp_path / "out" / "sweep-compare"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
        "fedavg-lr0.05", "fedavg-lr1e30.failed", "fedprox-lr0.05", "fedprox-lr1e30.failed",
    ]
    rows = json.loads((folder / "table.json").read_text())
    assert [r.get("failed") for r in rows] == [None, "diverged at round 1", None, "diverged at round 1"]
    assert "run 4 of 4: fedprox-lr1e30, ETA" in captured.err  # overall progress
    assert "2 of 4 runs did not finish" in captured.err


def test_over_seeds_every_table_names_the_failed_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", str(config(tmp_path)), "-q", *TINY, "--grid", "client.lr=0.05,1e30", "--seeds", "0,1"]
    assert main(argv) == DIVERGED_EXIT  # only the baseline (lr 0.05) finished: nothing compared (the tables are still written)
    out = capsys.readouterr().out
    assert "| client.lr=1e+30 (seed 0: diverged at round 1; seed 1: diverged at round 1) |" in out
    folder = tmp_path / "out" / "sweep-compare"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["lr0.05-s0", "lr0.05-s1", "lr1e30-s0.failed", "lr1e30-s1.failed"]
    assert main([*argv, "--strict"]) == DIVERGED_EXIT  # --strict: any failed run is an error


def test_exit_3_when_every_run_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(config(tmp_path)), "-q", *TINY, "--grid", "client.lr=1e30,1e31"]) == DIVERGED_EXIT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("chillfl: every run failed (2 of 2") and err[-1].endswith("sweep-compare.failed")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["sweep-compare.failed"]


def test_every_run_failed_again_takes_the_next_free_failed_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second comparison of that name whose runs all fail too is not left as ``.partial`` beside the first ``.failed``."""
    argv = ["compare", str(config(tmp_path)), "-q", *TINY, "--grid", "client.lr=1e30,1e31"]
    assert main(argv) == DIVERGED_EXIT and main(argv) == DIVERGED_EXIT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("chillfl: every run failed (2 of 2") and err[-1].endswith("sweep-compare.failed-2")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["sweep-compare.failed", "sweep-compare.failed-2"]
    assert (tmp_path / "out" / "sweep-compare.failed-2" / "sweep.json").is_file()


def test_a_run_that_crashes_is_marked_failed_and_the_rest_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import chillfl.sweeps.run as sweep  # where the comparison's runs start

    real = sweep.run_experiment

    def flaky(cfg, **kwargs):  # type: ignore[no-untyped-def]
        if cfg.name.startswith("fedprox"):
            raise RuntimeError("CUDA out of memory")
        return real(cfg, **kwargs)

    monkeypatch.setattr(sweep, "run_experiment", flaky)
    assert main(["compare", str(config(tmp_path)), "-q", *TINY, "--grid", "algorithm.name=fedavg,fedprox"]) == DIVERGED_EXIT  # only the baseline finished
    captured = capsys.readouterr()
    assert "| algorithm.name=fedprox (failed: RuntimeError) | - |" in captured.out
    assert "fedprox failed (RuntimeError: CUDA out of memory)" in captured.err
