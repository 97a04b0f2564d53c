"""benchmarks/: a stopped run.py says which listed modes have fewer repeats than asked; Ctrl-C while the peers are set
up is one line and exit 130; every script's bad option is one line and exit 2 (bench_cli.OneLineParser)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

import run


def _mode(repeats: int) -> dict[str, Any]:
    """A measured mode's entry as summarize() writes it, over ``repeats`` runs (stubbed numbers)."""
    return {"status": "ok", "s_per_round_min": 0.1, "s_per_round_median": 0.2, "peak_mb": 300.0, "first_round_end_s_median": 1.5,
            "runs": [{"rc": 0}] * repeats}


def test_the_stopped_note_names_the_modes_with_fewer_repeats_than_asked() -> None:
    """The repeats go round the modes: stopped in repeat 2 of 3, every mode is listed with 1 or 2 of its 3 repeats, and
    the note said only "the modes not listed were not measured". A failed mode says why in its own row."""
    report = {"repeats": 3, "workloads": {"1": {"modes": {"compute_bound": _mode(3), "chillfl[auto]": _mode(2), "blazefl[serial]": {"status": "rc 1"}}},
                                          "2": {"modes": {"compute_bound": _mode(1)}}}}
    assert run.measured_note(report) == ("the modes not listed were not measured, and these finished fewer repeats than --repeats 3 "
                                         "(their numbers are over those): workload 1 chillfl[auto] (2 of 3), workload 2 compute_bound (1 of 3)")
    report["workloads"] = {"1": {"modes": {"compute_bound": _mode(3)}}}
    assert run.measured_note(report) == "the modes not listed were not measured"


def test_a_run_stopped_part_way_through_its_repeats_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    def fake(w: Any, modes: Any, peers: Any, args: Any, work: Path, sink: dict[str, Any]) -> dict[str, Any]:
        sink.update(workload=w.to_dict(), rounds_per_run=2, flops_per_round=0, modes={"chillfl[auto]": _mode(1)})
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "run_workload", fake)
    out = tmp_path / "r.json"
    assert run.main(["--workload", "2", "--repeats", "3", "--no-peers", "--no-bound", "--modes", "chillfl[auto]",
                     "--data-dir", str(tmp_path / "d"), "--out", str(out)]) == 130
    assert json.loads(out.read_text())["stopped"].endswith("fewer repeats than --repeats 3 (their numbers are over those): "
                                                           "workload 2 chillfl[auto] (1 of 3)")
    assert "workload 2 chillfl[auto] (1 of 3)" in capsys.readouterr().err


def test_ctrl_c_while_the_peers_are_set_up_is_one_line_and_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """It was a KeyboardInterrupt traceback (ensure_peers ran before the try that turns Ctrl-C into 130)."""
    def interrupted(*_: Any, **__: Any) -> dict[str, Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "ensure_peers", interrupted)
    out = tmp_path / "r.json"
    try:
        rc = run.main(["--workload", "2", "--no-bound", "--modes", "blazefl", "--data-dir", str(tmp_path / "d"), "--out", str(out)])
    except KeyboardInterrupt:  # caught here: escaping, it would stop the whole test session
        pytest.fail("Ctrl-C escaped run.main during the peers' set-up")
    assert rc == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("run.py: stopped by Ctrl-C while setting up the peers") and err[0].endswith("nothing was measured or written")
    assert not out.exists()


@pytest.mark.parametrize("script", ["profile_round", "profile_startup", "compile_step", "conv_kernels", "conv_layouts", "host_time", "w1_curves"])
def test_a_bad_option_is_one_line_and_exit_2(script: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """profile_round.py and profile_startup.py (and these others) printed argparse's usage block before the message."""
    module = importlib.import_module(script)
    with pytest.raises(SystemExit) as stop:
        module.main(["--out", str(tmp_path), "--no-such-option"])
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()  # host_time.py has no --out: it is among the unrecognized arguments there
    assert out == "" and len(lines) == 1 and lines[0].startswith(f"{script}.py: unrecognized arguments: ") and lines[0].endswith(" --no-such-option")


def test_fuzz_config_bad_option_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("hypothesis")
    fuzz_config = importlib.import_module("fuzz_config")
    monkeypatch.setattr("sys.argv", ["fuzz_config.py", "-n", "many"])
    with pytest.raises(SystemExit) as stop:
        fuzz_config.main_cli()
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == ["fuzz_config.py: argument -n: invalid int value: 'many'"]
