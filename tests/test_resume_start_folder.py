"""``chillfl resume`` typed in another folder reads a run's relative ``data_dir`` from the folder the run was started in.

A run records that folder (its checkpoint's ``run`` metadata; a comparison's ``sweep.json``), and a resume reads
the relative paths of its config from there (:meth:`chillfl.config.RunConfig.paths_from`), in memory only: the
saved ``config.toml`` is untouched. Before, ``data`` was read from the folder the resume was typed in: the dataset
was "not found" there, or, worse, another dataset of the same name was trained on. Here the folder the resume is
typed in holds such another dataset (other pixels, same on-disk MNIST format), so a resume that read it would
not give the uninterrupted run's metrics.jsonl, byte for byte.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chillfl.sweeps.run as sweep  # where a comparison's runs start
from chillfl import runner
from chillfl.cli import main
from chillfl.config import RunConfig, load_config
from chillfl.errors import ConfigError, DataAbsent
from chillfl.experiment import build_experiment
from chillfl.runner import CHECKPOINT, resume_experiment, run_experiment
from chillfl.storage.checkpoint import read_checkpoint, write_state
from chillfl.storage.run_folder import STARTED_IN
from fake_datasets import idx_bytes
from resume_cases import Crash, SigintAfter, _CrashIn

TINY: dict[str, Any] = {
    "seed": 3,
    "threads": 1,
    "device": "cpu",
    "dataset.name": "mnist",
    "model.name": "mlp",
    "model.hidden": [8],
    "federation.num_clients": 4,
    "federation.clients_per_round": 2,
    "federation.rounds": 3,
    "client.batch_size": 16,
    "eval.clients": "none",
    "data_dir": "data",
    "out_dir": "results",
}


def write_mnist(data_dir: Path, seed: int) -> None:
    """MNIST's four idx files (uncompressed, as the publisher's unpacked) under ``data_dir/mnist``: 80 training and
    20 test images of random pixels and labels, drawn from ``seed`` (another seed: another dataset of the same name)."""
    rng = np.random.default_rng(seed)
    root = data_dir / "mnist"
    root.mkdir(parents=True)
    for prefix, n in (("train", 80), ("t10k", 20)):
        (root / f"{prefix}-images-idx3-ubyte").write_bytes(idx_bytes(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)))
        (root / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(rng.integers(0, 10, n, dtype=np.uint8)))


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(A, B): A holds the run's dataset under ``data``, B another dataset under the same name; the test starts in A."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)  # figures are no results, and matplotlib costs seconds
    a, b = tmp_path / "A", tmp_path / "B"
    write_mnist(a / "data", seed=0)
    write_mnist(b / "data", seed=1)
    monkeypatch.chdir(a)
    return a, b


def _config(name: str, every: int, **extra: Any) -> RunConfig:
    return load_config(None, {**TINY, "name": name, "checkpoint.every": every, **extra})


def _cut_run(a: Path, **extra: Any) -> tuple[bytes, Path]:
    """The uninterrupted run's metrics.jsonl, and the folder of the same run cut in round 2 (checkpoint of round 1), both started in A."""
    reference = run_experiment(_config("ref", 0, **extra), progress=False).folder
    assert reference is not None
    with pytest.raises(Crash):
        run_experiment(_config("cut", 1, **extra), progress=False, callbacks=[_CrashIn(2)])
    out = Path(extra.get("out_dir", "results"))
    return (reference / "metrics.jsonl").read_bytes(), (out if out.is_absolute() else a / out) / "cut.partial"


def test_a_run_resumed_in_another_folder_reads_the_data_it_started_on(folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = folders
    expected, partial = _cut_run(a)
    _, run = read_checkpoint(partial / CHECKPOINT)
    saved = (partial / "config.toml").read_bytes()
    monkeypatch.chdir(b)  # `cd B && chillfl resume /abs/A/results/cut.partial`: B/data is another dataset named mnist
    resumed = resume_experiment(partial, progress=False).folder
    assert resumed == a / "results" / "cut"
    assert (resumed / "metrics.jsonl").read_bytes() == expected
    assert (resumed / "config.toml").read_bytes() == saved  # data_dir = "data" as written: resolved in memory only
    assert run.get(STARTED_IN) == str(a)  # what the checkpoint recorded


def test_an_older_run_folder_without_the_record_falls_back_to_its_relative_out_dir(folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint of an older chillfl records no start folder: the one its relative ``out_dir`` tells (A/results/cut.partial -> A) is read from."""
    a, b = folders
    expected, partial = _cut_run(a)
    state, run = read_checkpoint(partial / CHECKPOINT)
    write_state(partial / CHECKPOINT, state, {k: v for k, v in run.items() if k != STARTED_IN})  # as an older chillfl wrote it
    monkeypatch.chdir(b)
    resumed = resume_experiment(partial, progress=False).folder
    assert resumed is not None and (resumed / "metrics.jsonl").read_bytes() == expected


def test_without_record_or_relative_out_dir_the_current_folder_is_read_as_before(folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No record and an absolute ``out_dir``: nothing tells where the run started, so ``data`` is read from the current
    folder, as before; a folder without it is the loader's one line on ``data_dir``."""
    a, _ = folders
    _, partial = _cut_run(a, out_dir=str(tmp_path / "out"))
    state, run = read_checkpoint(partial / CHECKPOINT)
    write_state(partial / CHECKPOINT, state, {k: v for k, v in run.items() if k != STARTED_IN})
    elsewhere = tmp_path / "C"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError) as caught:
        resume_experiment(partial, progress=False)
    assert caught.value.field == "data_dir" and "data/mnist" in caught.value.message and str(a) not in caught.value.message


def test_data_gone_from_the_start_folder_and_absent_here_names_both(folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The start folder lost ``data`` (moved away): the current folder's is read, as before; absent there too, the loader's one
    line on ``data_dir`` says the start folder has none either."""
    a, _ = folders
    _, partial = _cut_run(a)
    shutil.rmtree(a / "data")
    elsewhere = tmp_path / "C"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError) as caught:
        resume_experiment(partial, progress=False)
    assert caught.value.field == "data_dir"
    assert "not found at data/mnist" in caught.value.message and caught.value.message.endswith(f"the folder the run was started in has no {a / 'data'} either")
    assert (partial / CHECKPOINT).is_file()  # nothing was lost: it resumes once the data are back


def test_an_offline_hub_gets_no_start_folder_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``dataset.path`` the hub would serve, with the hub offline: the loader's own line (DataAbsent, which a dry run
    reads as the files absent), not "the folder the run was started in has no ... either": no folder is at fault."""
    start, here = tmp_path / "A", tmp_path / "C"
    start.mkdir()
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = load_config(None, {"dataset.name": "flwr_femnist", "dataset.path": "someone/ds", "data_dir": "data"})
    with pytest.raises(DataAbsent) as caught:
        runner.from_start_folder(config, start, build_experiment)
    assert caught.value.field == "dataset.path" and "the hub is offline" in caught.value.message and "started in" not in caught.value.message


def test_paths_from_moves_a_relative_path_only_where_the_start_folder_holds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start, here = tmp_path / "start", tmp_path / "here"
    (start / "data").mkdir(parents=True)
    (start / "split.json").write_text("{}")
    here.mkdir()
    monkeypatch.chdir(here)
    config = load_config(None, {"data_dir": "data", "partition.from": "split.json"})
    moved = config.paths_from(start)
    assert (moved.data_dir, moved.partition) == (str(start / "data"), {"name": "file", "from": str(start / "split.json")})
    assert (config.data_dir, config.partition["from"]) == ("data", "split.json")  # the config itself is left as it is
    assert config.paths_from(None) is config and config.paths_from(here) is config  # nothing recorded, or started here
    (start / "data").rmdir()
    assert config.paths_from(start).data_dir == "data"  # the start folder lost it: read from the current folder, as before
    absolute = load_config(None, {"data_dir": str(here / "data")})
    assert absolute.paths_from(start) is absolute
    assert load_config(None, {"data_dir": "../data"}).paths_from(start).data_dir == "../data"  # start/../data is not there


def _compare(a: Path, out: str) -> int:
    """A 3-run comparison (temperatures 1, 0.5, 0.25) started in A into ``A/out``, ``data_dir = "data"``."""
    config = a / "cmp.toml"
    config.write_text("")
    overrides = [f"{k}={v}" for k, v in TINY.items() if k not in ("out_dir", "model.hidden")]
    return main(["compare", str(config), "--grid", "temperature=1,0.5,0.25", "-q", *overrides, "model.hidden=[8]", "name=sw", f"out_dir={out}"])


def _files(folder: Path) -> dict[str, bytes]:
    """The comparison's table and every run's metrics, by relative path; every run's config.toml keeps ``data_dir`` as written."""
    out = {name: (folder / name).read_bytes() for name in ("table.md", "table.json")}
    for run in sorted(p for p in folder.iterdir() if p.is_dir()):
        out[f"{run.name}/metrics.jsonl"] = (run / "metrics.jsonl").read_bytes()
        assert load_config(run / "config.toml").data_dir == "data"
    return out


def test_a_comparison_resumed_in_another_folder_reads_the_data_it_started_on(folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Its stopped run resumes, and its run not started yet runs, on A's data: the table and every run's metrics are the
    uninterrupted comparison's, and every run's config.toml keeps ``data_dir = "data"``."""
    a, b = folders
    assert _compare(a, "whole") == 0
    expected = _files(a / "whole" / "sw-compare")
    real_run, calls = sweep.run_experiment, [0]

    def run_experiment(cfg: Any, **kw: Any) -> Any:  # the second run stops after round 1, checkpointed
        calls[0] += 1
        if calls[0] == 2:
            kw["callbacks"] = [SigintAfter(1)]
        return real_run(cfg, **kw)

    monkeypatch.setattr(sweep, "run_experiment", run_experiment)
    assert _compare(a, "cut") == 130
    partial = a / "cut" / "sw-compare.partial"
    assert sorted(p.name.endswith(".partial") for p in partial.iterdir() if p.is_dir()) == [False, True]  # one finished, one stopped, one to run
    monkeypatch.chdir(b)
    assert main(["resume", str(partial), "-q"]) == 0
    assert _files(a / "cut" / "sw-compare") == expected


def test_a_resume_typed_with_a_relative_path_names_its_results_absolute(folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl resume results/cut.partial`` said ``results: results/cut`` (the path as typed); ``chillfl run`` names the
    folder absolute, and a resume's line now does too."""
    a, _ = folders
    _cut_run(a)
    capsys.readouterr()
    assert main(["resume", "results/cut.partial", "-q"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"results: {a / 'results' / 'cut'}"
