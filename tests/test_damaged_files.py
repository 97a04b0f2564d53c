"""Files chillfl reads back from a run folder, damaged one at a time: exit 2 and one line naming the file, no traceback.

Config files are fuzzed in ``tests/test_hostile_input.py``; these are the other files: a checkpoint re-signed with
a tensor of another dtype (its checksum is no signature: anyone can write a valid one), a ``partition.json`` of
an unknown format version or one that is no regular file (``partition.from``).

A refused command leaves the folder as it was (:func:`_snapshot` before and after). Also: a checkpoint of an impossible
round (``status``), a client's own model that does not fit, a run file that is a directory or a FIFO, a comparison's
folder without its ``sweep.json``, and what a resumed comparison or ``reproduce --resume`` reads back of finished runs.
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.runner import CHECKPOINT, run_experiment
from chillfl.storage.checkpoint import read_checkpoint, write_state
from resume_cases import Crash, _CrashIn

TINY: dict[str, Any] = {
    "seed": 0,
    "threads": 1,
    "device": "cpu",
    "dataset.name": "digits",
    "model.name": "mlp",
    "model.hidden": [8],
    "federation.num_clients": 4,
    "federation.rounds": 2,
    "client.batch_size": 16,
    "eval.client_split_size": 20,
    "checkpoint.every": 1,
}


@pytest.fixture
def cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run stopped after round 1's checkpoint (as by kill -9 in round 2): its ``NAME.partial`` folder."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    with pytest.raises(Crash):
        run_experiment(load_config(None, {**TINY, "name": "cut", "out_dir": str(tmp_path)}), progress=False, callbacks=[_CrashIn(2)])
    return tmp_path / "cut.partial"


def _resign(path: Path, edit: Any) -> None:
    """Rewrite the checkpoint at ``path`` with ``edit(tree)`` applied and a valid checksum (what anyone can do)."""
    tree, run = read_checkpoint(path)
    edit(tree)
    write_state(path, tree, run)


def _one_line_error(capsys: pytest.CaptureFixture[str], *names: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for name in names:
        assert name in err, err
    return err


@contextmanager
def _fifo_in_place(path: Path, data: bytes) -> Iterator[threading.Event]:
    """``path`` replaced by a FIFO, with a thread standing ready to write ``data`` into it (the event: it did).

    Opened, a FIFO blocks until a writer comes (forever): with the thread, code that opens it reads ``data`` and the
    test fails on what it read rather than hangs."""
    path.unlink()
    os.mkfifo(path)
    stop, wrote = threading.Event(), threading.Event()

    def writer() -> None:
        while not stop.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader has it open
            except OSError:
                stop.wait(0.01)
                continue
            os.write(fd, data)
            os.close(fd)
            wrote.set()
            return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield wrote
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_a_checkpoint_tensor_of_another_dtype_is_refused_in_one_line(cut: Path, dtype: torch.dtype, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(tree: dict[str, Any]) -> None:
        model = tree["protocol"]["global"]
        model["hidden.0.weight"] = model["hidden.0.weight"].to(dtype)

    _resign(cut / CHECKPOINT, edit)
    before = (cut / CHECKPOINT).read_bytes()
    assert main(["resume", str(cut)]) == 2
    _one_line_error(capsys, "checkpoint", "hidden.0.weight", str(dtype))
    assert (cut / CHECKPOINT).read_bytes() == before and not (tmp_path / "cut").exists()


@pytest.fixture
def partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A finished run's ``partition.json`` (what ``partition.from`` reads)."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    run_experiment(load_config(None, {**TINY, "name": "done", "out_dir": str(tmp_path)}), progress=False)
    return tmp_path / "done" / "partition.json"


def _run_from(path: Path, tmp_path: Path) -> int:
    """``chillfl run`` of a config with ``[partition] from = path`` (the rest: the run that wrote the file)."""
    options = {k: v for k, v in TINY.items() if k != "checkpoint.every"} | {"name": "again", "out_dir": str(tmp_path / "again"), "partition.from": str(path)}
    config = tmp_path / "again.toml"
    config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items()))  # dotted keys: TOML tables
    return main(["run", "-q", str(config)])


def test_the_partition_file_read_back_is_accepted(partition: Path, tmp_path: Path) -> None:
    assert _run_from(partition, tmp_path) == 0


@pytest.mark.parametrize("version", [99, 3, "2", True, None])
def test_a_partition_file_of_an_unknown_version_is_refused(partition: Path, version: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A format this code does not know may give its indices another meaning: read as version 2, they were trained on."""
    doc = json.loads(partition.read_text())
    doc["version"] = version  # None: JSON null, not a missing key (a file without one is read as version 1)
    partition.write_text(json.dumps(doc))
    assert _run_from(partition, tmp_path) == 2
    _one_line_error(capsys, "partition.from", "version")
    assert not (tmp_path / "again").exists()


def test_a_version_2_partition_file_without_its_rows_record_is_refused(partition: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Version 2 always records the rows; without the record the row-order check would be skipped as for version 1."""
    doc = json.loads(partition.read_text())
    del doc["rows"]
    partition.write_text(json.dumps(doc))
    assert _run_from(partition, tmp_path) == 2
    _one_line_error(capsys, "partition.from", "rows")


def test_a_partition_from_no_regular_file_is_refused(partition: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A device behind a link (/dev/zero fills the memory; a FIFO blocks forever) is no partition file: refused before it is opened.

    /dev/null stands for them here: read, it gives a JSON error, not the line naming what the path is."""
    link = tmp_path / "null.json"
    link.symlink_to(os.devnull)
    assert _run_from(link, tmp_path) == 2
    _one_line_error(capsys, "partition.from", "not a regular file")  # the path: shortened when long


@pytest.mark.parametrize("edit", ["missing", "extra"])
def test_a_checkpoint_model_with_other_tensor_names_is_refused_in_one_line(cut: Path, edit: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Missing: the run trained on with that tensor's initial value (other metrics, exit 0); extra: an AttributeError traceback."""
    def change(tree: dict[str, Any]) -> None:
        model = tree["protocol"]["global"]
        if edit == "missing":
            del model["head.bias"]
        else:
            model["bogus.weight"] = torch.zeros(2)

    _resign(cut / CHECKPOINT, change)
    assert main(["resume", str(cut)]) == 2
    _one_line_error(capsys, "checkpoint", "head.bias" if edit == "missing" else "bogus.weight")


def test_status_does_not_open_a_fifo_in_the_run_folder(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl status`` of a folder whose metrics.jsonl is a FIFO (a link to /dev/zero alike) reads no rounds from it.

    Opened, the FIFO blocks until a writer comes (forever); here a thread stands ready to write three lines, which
    a status that opens it counts as rounds, so the test fails rather than hangs."""
    with _fifo_in_place(cut / "metrics.jsonl", b"".join(b'{"round": %d}\n' % r for r in (1, 2, 3))) as wrote:
        assert main(["status", str(cut)]) == 0
    assert not wrote.is_set()
    assert "stopped" in capsys.readouterr().out


@pytest.mark.parametrize("summary", ["[]", '"x"', '{"rounds": "2", "final_global_acc": true}'])
def test_status_of_a_run_whose_summary_is_no_summary_shows_the_row_without_its_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summary: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A summary.json that is JSON but no object was an AttributeError traceback; wrong types printed as numbers."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    run_experiment(load_config(None, {**TINY, "name": "done", "out_dir": str(tmp_path)}), progress=False)
    (tmp_path / "done" / "summary.json").write_text(summary)
    assert main(["status", str(tmp_path / "done")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "| done |" in line)
    assert "finished" in row and "True" not in row and "100.00" not in row, row
    if summary.startswith("{"):  # an object with wrong types: its numbers are not shown
        assert "2/" not in row, row
    else:  # no object at all: said so, with the rounds metrics.jsonl holds
        assert "(its summary.json is unreadable) | 2/2 |" in row, row


@pytest.mark.parametrize("calibration", [{"bins": "x"}, {"reliability": 5}])
def test_a_report_of_a_summary_with_a_foreign_calibration_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calibration: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reliability diagram is drawn from summary.json's ``calibration``: another table there was a KeyError traceback."""
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    run_experiment(load_config(None, {**TINY, "name": "done", "out_dir": str(tmp_path)}), progress=False)
    path = tmp_path / "done" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "calibration": calibration}))
    assert main(["report", str(tmp_path / "done"), "-o", str(tmp_path / "r.html"), "--no-partitions"]) == 2
    _one_line_error(capsys, "summary.json", "calibration")
    assert not (tmp_path / "r.html").exists()


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder`` and its bytes (None: a folder): what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


def test_a_refused_resume_leaves_the_metrics_past_the_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Round 2's line is written after round 1's checkpoint (a kill in round 2, after its line): a resume refused for
    a checkpoint that does not fit the run cut metrics.jsonl back to round 1 before it said so."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    with pytest.raises(Crash):  # 3 rounds, killed in round 2 after its metrics line: checkpoint of round 1, 2 lines
        run_experiment(load_config(None, {**TINY, "federation.rounds": 3, "name": "cut", "out_dir": str(tmp_path)}), progress=False, callbacks=[_CrashIn(2)])
    cut = tmp_path / "cut.partial"

    def edit(tree: dict[str, Any]) -> None:
        model = tree["protocol"]["global"]
        model["head.weight"] = model["head.weight"].to(torch.float64)

    _resign(cut / CHECKPOINT, edit)
    before = _snapshot(cut)
    assert len(before["metrics.jsonl"].splitlines()) == 2  # type: ignore[union-attr]
    assert main(["resume", str(cut)]) == 2
    _one_line_error(capsys, "checkpoint", "head.weight")
    assert _snapshot(cut) == before


def test_a_refused_forced_resume_of_a_diverged_run_keeps_its_failure(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``resume --force`` of a ``NAME.failed`` whose checkpoint does not fit removed its failure.json before refusing:
    the folder then no longer said it diverged (``chillfl status``), nor why."""
    failed = cut.rename(cut.with_name("cut.failed"))
    (failed / "failure.json").write_text(json.dumps({"round": 2, "client": 0, "what": "loss", "last_checkpoint": 1}))
    _resign(failed / CHECKPOINT, lambda tree: tree["protocol"]["global"].pop("head.bias"))
    before = _snapshot(failed)
    assert main(["resume", "--force", str(failed)]) == 2
    _one_line_error(capsys, "checkpoint", "head.bias")
    assert _snapshot(failed) == before


@pytest.mark.parametrize("claimed", [99, -1])
def test_status_of_a_checkpoint_of_an_impossible_round_says_it_is_inconsistent(cut: Path, claimed: int, capsys: pytest.CaptureFixture[str]) -> None:
    """A re-signed checkpoint of round 99 of a 2-round run was shown as "resumes after round 99": resume refuses it."""
    _resign(cut / CHECKPOINT, lambda tree: tree.update(round=claimed))
    assert main(["status", str(cut)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "| cut |" in line)
    assert "inconsistent" in row and "resumes after" not in row, row
    assert main(["resume", str(cut)]) == 2
    _one_line_error(capsys, "checkpoint" if claimed < 0 else "federation.rounds")


@pytest.mark.parametrize("name", ["partition.json", "metrics.jsonl", "checkpoint.safetensors", "model.safetensors"])
def test_a_run_file_that_is_a_directory_is_refused_in_one_line_naming_it(cut: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """partition.json a directory: every round ran, then the resume failed as a storage error (exit 1) that named no fix;
    a checkpoint one was "no checkpoint.safetensors"; model.safetensors one (written at the end) the same exit 1."""
    (cut / name).unlink(missing_ok=True)
    (cut / name).mkdir()
    before = _snapshot(cut)
    assert main(["resume", str(cut)]) == 2
    _one_line_error(capsys, f"{cut / name} is a directory")
    assert _snapshot(cut) == before


def test_a_resume_does_not_open_a_fifo_metrics_file(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO ``metrics.jsonl`` blocked ``chillfl resume`` forever (it read it whole)."""
    with _fifo_in_place(cut / "metrics.jsonl", b"{}\n") as wrote:
        assert main(["resume", str(cut)]) == 2
    assert not wrote.is_set()
    _one_line_error(capsys, f"{cut / 'metrics.jsonl'} is a FIFO")


def test_a_long_partition_from_path_keeps_its_file_name_in_the_line(partition: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The path was cut at 80 characters from its start: the line named a folder, not which file was refused."""
    deep = tmp_path / ("a" * 60) / ("b" * 60)
    deep.mkdir(parents=True)
    doc = json.loads(partition.read_text())
    doc["version"] = 99
    (deep / "theirs.json").write_text(json.dumps(doc))
    assert _run_from(deep / "theirs.json", tmp_path) == 2
    _one_line_error(capsys, "partition.from", "theirs.json'", "version 99")
    assert _run_from(deep / "absent.json", tmp_path) == 2
    assert _one_line_error(capsys, "partition.from", "absent.json'", "No such file").count("absent.json") == 1  # not again in the OSError's text


@pytest.mark.parametrize(("path", "end"), [("/" + "d" * 100 + "/p.json", "/p.json'"), ("short.json", "'short.json'"), ("p" * 300, "..."), ("q" * 100, "...")])
def test_short_path_keeps_the_file_name(path: str, end: str) -> None:
    """Cut in the middle, not at the end; a "name" longer than any file name is text, cut at its end."""
    from chillfl.options import short_path

    shown = short_path(path)
    assert len(shown) <= 80 and shown.endswith(end), shown


@pytest.mark.parametrize("finished", [False, True])
def test_a_comparison_folder_without_its_sweep_json_is_not_read_as_one_run(cut: Path, tmp_path: Path, finished: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """Without sweep.json a comparison's folder was one run "stopped (early, by a callback)" to ``status`` (finished or
    not), and to ``resume`` a run "stopped before its first checkpoint"."""
    folder = tmp_path / ("x-compare" if finished else "x-compare.partial")
    folder.mkdir()
    (folder / "config.toml").write_bytes((cut / "config.toml").read_bytes())
    cut.rename(folder / "a-s0.partial")
    if finished:
        (folder / "table.json").write_text("[]")
    before = _snapshot(folder)
    for command in ("status", "resume"):
        assert main([command, str(folder)]) == 2
        _one_line_error(capsys, "sweep.json", str(folder), "finished comparison" if finished else "a-s0.partial")
    assert _snapshot(folder) == before
    (folder / "sweep.json").write_text("")
    with _fifo_in_place(folder / "sweep.json", b"{}") as wrote:  # one that is there, but no file: said so
        assert main(["status", str(folder)]) == 2
    assert not wrote.is_set()
    _one_line_error(capsys, "whose sweep.json is not a regular file")


@pytest.mark.parametrize("edit", ["dtype", "shape", "missing", "extra"])
def test_a_checkpointed_client_model_that_does_not_fit_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Only the global model was checked: Ditto's v_k of another dtype or shape was a RuntimeError traceback in the
    resumed round, one missing or one more a run that finished (exit 0) on a state no round produced."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    with pytest.raises(Crash):
        run_experiment(load_config(None, {**TINY, "algorithm.name": "ditto", "name": "cut", "out_dir": str(tmp_path)}), progress=False, callbacks=[_CrashIn(2)])
    cut = tmp_path / "cut.partial"

    def change(tree: dict[str, Any]) -> None:
        own = tree["protocol"]["clients"]["1"]
        key = "ditto.v.head.weight"
        if edit == "dtype":
            own[key] = own[key].to(torch.float64)
        elif edit == "shape":
            own[key] = torch.zeros(3, 3)
        elif edit == "missing":
            del own[key]
        else:
            own["ditto.v.bogus"] = torch.zeros(2)

    _resign(cut / CHECKPOINT, change)
    before = _snapshot(cut)
    assert main(["resume", str(cut)]) == 2
    _one_line_error(capsys, str(cut / CHECKPOINT), "client 1", "bogus" if edit == "extra" else "head.weight")
    assert _snapshot(cut) == before


@pytest.mark.parametrize("edit", ["entry", "state"])
def test_a_checkpoint_whose_client_lacks_an_entry_its_method_keeps_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str,
                                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """FedPer's client 1 finished round 1 and keeps its own head: a checkpoint without its head.weight (or without its
    state) resumed with exit 0, the client starting round 2 from the global head, as if it had never trained one."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    with pytest.raises(Crash):
        run_experiment(load_config(None, {**TINY, "algorithm.name": "fedper", "name": "cut", "out_dir": str(tmp_path)}), progress=False, callbacks=[_CrashIn(2)])
    cut = tmp_path / "cut.partial"

    def change(tree: dict[str, Any]) -> None:
        assert 1 in tree["protocol"]["finished"] and sorted(tree["protocol"]["clients"]["1"]) == ["fedper.head.head.bias", "fedper.head.head.weight"]
        if edit == "entry":
            del tree["protocol"]["clients"]["1"]["fedper.head.head.weight"]
        else:
            del tree["protocol"]["clients"]["1"]

    _resign(cut / CHECKPOINT, change)
    before = _snapshot(cut)
    assert main(["resume", str(cut)]) == 2
    _one_line_error(capsys, str(cut / CHECKPOINT), "client 1 finished a round", "head.weight" if edit == "entry" else "head.bias")
    assert _snapshot(cut) == before


def test_a_finished_run_of_a_stopped_comparison_with_a_fifo_metrics_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed comparison reads its finished runs back: a FIFO ``metrics.jsonl`` in one blocked the resume forever."""
    from chillfl.errors import ConfigError
    from chillfl.sweeps.resume import finished_run

    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    run_experiment(load_config(None, {**TINY, "name": "a-s0", "out_dir": str(tmp_path)}), progress=False)
    with _fifo_in_place(tmp_path / "a-s0" / "metrics.jsonl", b'{"round": 1}\n') as wrote:
        with pytest.raises(ConfigError, match="metrics.jsonl is unreadable .*not a regular file.*; remove .*a-s0 and it runs again"):
            finished_run(tmp_path, "a-s0")
    assert not wrote.is_set()


def _any_plan() -> Any:
    """A comparison's plan for :func:`~chillfl.sweeps.record.read_compare`, whose damaged table is refused before its runs are counted."""
    import chillfl
    from chillfl.sweeps.plan import plan_runs

    return plan_runs(chillfl.make_config({"dataset": {"name": "digits"}, "model": {"name": "mlp"}}), ["client.lr=0.1"])


@pytest.mark.parametrize("rows", ["{}", "[1]", "[{}]", '[{"variant": 1}]'])
def test_a_finished_comparisons_table_that_is_no_table_is_one_line(tmp_path: Path, rows: str) -> None:
    """``reproduce --resume`` reads a finished comparison's table.json back: rows that are no rows were a TypeError or
    KeyError traceback where the claim's rows are looked up, ``{}`` a line saying its variants are "not in" nothing."""
    from chillfl.errors import ConfigError
    from chillfl.sweeps.record import read_compare

    (tmp_path / "table.json").write_text(rows)
    (tmp_path / "table.md").write_text("| variant |\n")
    with pytest.raises(ConfigError, match="table.json is not a comparison's table"):
        read_compare(tmp_path, _any_plan())


@pytest.mark.parametrize("field, value", [("cumulative_mb", "x"), ("cumulative_mb", {"per_seed": [1.0, "x"]}), ("delta_acc", [0.1]),
                                          ("rounds_to_target", 2.5), ("tuned", [1]), ("seeds", 3)])
def test_a_finished_comparisons_row_of_no_numbers_is_one_line(tmp_path: Path, field: str, value: Any) -> None:
    """``reproduce --resume`` reads a finished comparison's rows back from table.json: a row of no numbers where a
    verdict reads them (a string byte count, a list for a difference) was a TypeError or AttributeError traceback."""
    from chillfl.errors import ConfigError
    from chillfl.report.compare import CompareResult
    from chillfl.reproduce import Claim, _key, run_claim

    claim = Claim("flexchill", "a claim", "demo", "T=0.05", "T=1", metric="bytes" if field == "cumulative_mb" else "accuracy",
                  paper_speedup=2.0)
    base = {"variant": "T=1", "delta_acc": None, "cumulative_mb": 2.0, "rounds_to_target": 3}
    row = {**base, "variant": "T=0.05", "delta_acc": 0.01, "cumulative_mb": 1.0, field: value}
    whole = run_claim(claim, [0], cache={_key(claim): CompareResult(tmp_path, [{**row, field: base.get(field)}, base], "")})
    assert whole.verdict  # the same rows with readable numbers give a verdict
    with pytest.raises(ConfigError, match=f"table.json: row 'T=0.05' has no readable '{field}'; remove .* runs again"):
        run_claim(claim, [0], cache={_key(claim): CompareResult(tmp_path, [row, base], "")})


def test_a_fifo_table_or_sweep_json_is_never_opened(tmp_path: Path) -> None:
    """``reproduce --resume`` looks for its comparisons' folders (their sweep.json) and reads a finished one's table.md:
    a FIFO in either blocked it forever."""
    from chillfl.errors import ConfigError
    from chillfl.sweeps.record import find_sweep, read_compare

    folder = tmp_path / "n-compare"
    folder.mkdir()
    (folder / "table.json").write_text('[{"variant": "a"}]')
    (folder / "table.md").write_text("")
    with _fifo_in_place(folder / "table.md", b"| a |\n") as wrote:
        with pytest.raises(ConfigError, match="table.md is not a regular file"):
            read_compare(folder, _any_plan())
    assert not wrote.is_set()
    (folder / "sweep.json").write_text("")
    with _fifo_in_place(folder / "sweep.json", b"{}") as wrote:
        assert find_sweep(tmp_path, "n-compare", {}) is None  # type: ignore[typeddict-item]
    assert not wrote.is_set()


def test_a_finished_run_of_a_stopped_comparison_without_its_summary_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its summary.json removed (or a FIFO), a finished run was taken for one not started: run again into ``NAME-2``,
    beside the damaged ``NAME`` that ``status`` and the next resume then read."""
    from chillfl.errors import ConfigError
    from chillfl.sweeps.resume import finished_run

    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    run_experiment(load_config(None, {**TINY, "name": "a-s0", "out_dir": str(tmp_path)}), progress=False)
    (tmp_path / "a-s0" / "summary.json").unlink()
    with pytest.raises(ConfigError, match="a-s0 is a finished run's folder without its summary.json.*; remove .*a-s0 and it runs again"):
        finished_run(tmp_path, "a-s0")
    assert finished_run(tmp_path, "b-s0") is None  # no folder: it runs


def test_a_client_model_of_another_architecture_is_refused_and_one_of_its_own_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Per-client architectures (``[[model.groups]]``): each client's model is checked against its own architecture."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    mixed = {"model": {"name": "mlp", "hidden": [8], "groups": [{"clients": "2-3", "name": "mlp", "hidden": [16]}]}, "distillation": {"method": "individual"}}
    options = {k: v for k, v in TINY.items() if not k.startswith("model.")}
    for name in ("mixed", "swapped"):
        with pytest.raises(Crash):
            run_experiment(load_config(None, {**options, "name": name, "out_dir": str(tmp_path)}).with_overrides(mixed), progress=False, callbacks=[_CrashIn(2)])
    assert main(["resume", "-q", str(tmp_path / "mixed.partial")]) == 0  # its clients' models fit their architectures
    swapped = tmp_path / "swapped.partial"
    _resign(swapped / CHECKPOINT, lambda tree: tree["protocol"]["clients"].update({"2": tree["protocol"]["clients"]["1"]}))  # an mlp [8] where one of [16] is
    capsys.readouterr()
    assert main(["resume", str(swapped)]) == 2
    _one_line_error(capsys, str(swapped / CHECKPOINT), "client 2's model's hidden.0.weight has shape (8, 64), config.toml's (16, 64)")
