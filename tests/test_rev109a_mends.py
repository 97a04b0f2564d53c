"""Mends of report-rev109a: stale claim folders, the pool's first round and the stall clock, the hub rows' listing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from chillfl.data import download
from chillfl.errors import ConfigError
from chillfl.executors import processes
from chillfl.executors.processes import ProcessExecutor, WorkerPool
from chillfl.metrics.records import run_folders
from chillfl.paths import CLAIM
from chillfl.report.html import find_runs
from chillfl.storage.results import ResultWriter
from chillfl.training.local import LocalSpec

from test_datalist_download import HF_FEMNIST, _put
from test_executors import _jobs, _mlp
from test_hfdl_download import _listing


def _claim_left(parent: Path, name: str, age_s: float) -> Path:
    """A claim folder as a claimer killed before its rename leaves it (its metrics.jsonl made), ``age_s`` old."""
    folder = parent / f"{CLAIM}{name}"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_bytes(b"")
    (folder / "config.toml").write_text('name = "x"\n')
    then = time.time() - age_s
    os.utime(folder, (then, then))
    return folder


def test_a_stale_claim_folder_goes_when_the_next_run_claims_and_a_fresh_one_stays(tmp_path: Path) -> None:
    stale = _claim_left(tmp_path, "1-dead", 3600.0)
    fresh = _claim_left(tmp_path, "2-young", 0.0)  # could be another process's, between its mkdir and its lock
    writer = ResultWriter(tmp_path, "run")
    try:
        assert not stale.exists()
        assert fresh.exists()
        assert writer.path == tmp_path / "run.partial"
    finally:
        writer._close()


def test_the_tables_and_the_report_skip_a_left_claim_folder(tmp_path: Path) -> None:
    compare = tmp_path / "x-compare"
    run = _put(compare / "a-s0", {"metrics.jsonl": b"", "config.toml": b'name = "a"\n', "summary.json": b"{}"})
    _claim_left(compare, "3-dead", 3600.0)
    assert run_folders(compare) == [run]
    assert find_runs([compare]) == [run]


def test_a_pools_first_round_its_start_up_sets_no_stall_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first round waits for the workers' imports (seconds; a cluster's file system: tens): twice that was the next
    round's first stall notice. Now the first round is not counted, so the next one's first notice comes at STALL_S."""
    model = _mlp()
    jobs = _jobs(model, [9, 7], (3, 4))
    monkeypatch.setattr(processes, "STALL_S", 0.001)
    with WorkerPool(workers=1) as pool:
        ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8), pool=pool).run(jobs)  # the workers' imports: well over 1 ms
        pool._stall.start_round()
        assert pool._stall._first == 0.001


def test_an_unreadable_hub_folder_is_its_rows_state_not_the_end_of_the_listing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    (data / "flwrlabs" / "femnist").mkdir(parents=True)

    def unreadable(root: Path) -> list[Path]:
        raise ConfigError("data_dir", f"cannot read {root}: Permission denied")

    monkeypatch.setattr(download, "table_files", unreadable)
    rows = _listing(data, capsys)
    assert rows["flwr_femnist"][1].startswith("missing (cannot read flwrlabs/femnist/: cannot read ")
    assert rows["flwr_femnist"][1].endswith(HF_FEMNIST.format(data=data))
    assert "mnist" in rows  # the rest of the listing is there


def test_a_hub_folder_in_the_current_folder_is_present_as_the_loader_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _put(tmp_path / "here" / "flwrlabs" / "shakespeare", {"shakespeare.csv": b'character_id,x,y\nA,"to be or not to b",e\n'})
    assert _listing(tmp_path / "data", capsys, cwd=tmp_path / "here")["flwr_shakespeare"][1] == "present"
    (tmp_path / "here" / "flwrlabs" / "shakespeare" / "shakespeare.csv").unlink()
    assert _listing(tmp_path / "data", capsys, cwd=tmp_path / "here")["flwr_shakespeare"][1].startswith(
        "missing (no .parquet or .csv files in ./flwrlabs/shakespeare/ (the current folder)): ")


# ---------------------------------------------------------------- report-rev109c


def test_the_html_reports_not_included_line_skips_a_left_claim_folder(tmp_path: Path) -> None:
    from chillfl.report.html import skipped_folders

    _put(tmp_path / "a", {"metrics.jsonl": b"", "config.toml": b'name = "a"\n', "summary.json": b"{}"})
    claim = tmp_path / f"{CLAIM}9-dead"
    _put(claim, {"metrics.jsonl": b""})  # no config.toml: was "incomplete run folders: .claim-9-dead (...)"
    assert [s.folder for s in skipped_folders([tmp_path])] == []


def test_a_new_executor_on_a_lent_pool_starts_its_stall_clock_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A comparison lends its pool to each run: a slow run's last round set the next run's first threshold."""
    model = _mlp()
    jobs = _jobs(model, [9, 7], (3, 4))
    monkeypatch.setattr(processes, "STALL_S", 0.001)
    with WorkerPool(workers=1) as pool:
        ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8), pool=pool).run(jobs)
        pool._stall.result(600.0)  # as if its last round had waited 10 minutes for a client
        pool._stall.end_round()
        ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8), pool=pool)  # the next run's executor
        pool._stall.start_round()
        assert pool._stall._first == 0.001


@pytest.mark.parametrize("tensor", [torch.eye(3).to_sparse(), torch.empty(3, device="meta")], ids=["sparse", "meta"])
def test_a_tensor_with_no_dense_bytes_is_unstorable_state(tensor: torch.Tensor, tmp_path: Path) -> None:
    """Was a StorageError advising checkpoint.every = 0 (exit 1): the part's state is at fault, and the run names its field."""
    from chillfl.storage.checkpoint import UnstorableState, write_state

    with pytest.raises(UnstorableState, match=r"cannot checkpoint a (sparse_coo|meta) tensor at protocol\.x"):
        write_state(tmp_path / "c.safetensors", {"protocol": {"x": tensor}})
