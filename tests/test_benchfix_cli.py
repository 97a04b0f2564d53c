"""The benchmark scripts' command lines (task benchfix): --help that helps, options refused in one line, nothing written
that was not asked for. Nothing here measures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


import executor_sizes  # noqa: E402
import gpu_targets  # noqa: E402
import run  # noqa: E402
from peers import ensure_peers  # noqa: E402

README = (Path(__file__).resolve().parents[1] / "benchmarks" / "README.md").read_text()


@pytest.mark.parametrize("key", ["2", "3", "4"])
def test_scale_without_workload_1_exits_2_with_one_line(key: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:  # it was ignored: the run measured the full workload
        run.parse_args(["--workload", key, "--scale", "0.5"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("run.py: --scale: workload 1 only")
    assert run.parse_args(["--workload", "1", "--scale", "0.5"]).scale == run.parse_args(["--scale", "0.5"]).scale == 0.5


def test_no_install_makes_no_results_folder(tmp_path: Path) -> None:
    # run.py --no-install made benchmarks/results/ in the checkout (for the install log) even with --out elsewhere
    status = ensure_peers(tmp_path / ".venv-peers", install=False)
    assert not status["blazefl"]["ok"] and "does not exist" in status["blazefl"]["detail"]
    assert list(tmp_path.iterdir()) == []
    assert "writes nothing outside `--out`" in README and "<timestamp>.md" in README  # and run.py's table beside every JSON


def test_gpu_targets_help_and_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:  # --help was read as a result file
        gpu_targets.main(["--help"])
    assert stop.value.code == 0 and "RESULT.json" in capsys.readouterr().out
    for argv in ([], ["--bogus", "x.json"]):
        with pytest.raises(SystemExit) as stop:
            gpu_targets.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("gpu_targets.py: ")


def test_gpu_targets_without_a_gpu_report_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"device": "cpu", "machine": {"torch": "2"}, "workloads": {}}))
    assert gpu_targets.main([str(cpu)]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "issue 39 targets: no GPU report given"  # was "on no GPU named (torch ?)"
    assert gpu_targets.main(["--any-device", str(cpu)]) == 1  # gpu-check.sh --smoke: judged, but said to be a CPU's
    assert capsys.readouterr().out.splitlines()[0] == "issue 39 targets: no GPU report given"  # (no workload in it)
    cpu.write_text(json.dumps({"device": "cpu", "machine": {"torch": "2"}, "workloads": {"2": {"modes": {}}}}))
    assert gpu_targets.main(["--any-device", str(cpu)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "issue 39 targets on the CPU (torch 2; --any-device: not a GPU's timings)"


def test_executor_sizes_help_runs_nothing(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(executor_sizes, "MODELS", {})  # were --help to run the benchmark, it would run nothing here
    with pytest.raises(SystemExit) as stop:  # --help started the minute-long benchmark
        executor_sizes.main(["--help"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("usage: executor_sizes.py [-h]")
    with pytest.raises(SystemExit) as stop:
        executor_sizes.main(["--models", "mlp"])
    assert stop.value.code == 2 and capsys.readouterr().err.strip() == "executor_sizes.py: unrecognized arguments: --models mlp"
