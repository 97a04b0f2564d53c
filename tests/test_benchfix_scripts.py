"""The benchmark scripts' bad options (task benchfix): exit 2 with one line, before any work, instead of a traceback or
a run of something else than asked; gpu_targets.py says when it judged no GPU run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch


import estimates  # noqa: E402
import gpu_targets  # noqa: E402
import many_clients  # noqa: E402
import op_count  # noqa: E402


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("argv, named", [
    (["--batched-conv", "gemmm"], "--batched-conv"), (["--clients", "0"], "--clients"), (["--batch-size", "0"], "--batch-size"),
    (["--model", "resnet"], "--model"), (["--device", "tpu"], "--device"),
])
def test_op_count_refuses_bad_options(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        op_count.main(argv)
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("op_count.py: ") and named in line


def test_op_count_device_cuda_without_a_gpu_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without a GPU, also where one is present
    with pytest.raises(SystemExit) as stop:
        op_count.main(["--device", "cuda", "--model", "mlp", "--batch-size", "2"])
    assert stop.value.code == 2 and "no CUDA GPU" in one_error_line(capsys)


def test_op_count_batched_conv_choices_are_the_configs() -> None:
    assert op_count.batched_conv_choices() == ("auto", "grouped", "gemm", "nhwc", "loop")


@pytest.mark.parametrize("argv, named", [
    (["--methods", "fedavg,fedavgg"], "'fedavgg'"), (["--methods", ","], "names no method"), (["--repeats", "0"], "--repeats"),
])
def test_estimates_refuses_unknown_methods_before_running(argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    def no_run(**_: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(estimates.chillfl, "run", no_run)
    with pytest.raises(SystemExit) as stop:
        estimates.main(argv)
    assert stop.value.code == 2 and named in one_error_line(capsys)


@pytest.mark.parametrize("argv, named", [
    (["--executor", "vectorised"], "executor"), (["--clients", "0"], "--clients"), (["--rounds", "1"], "--rounds"),
])
def test_many_clients_bad_options_are_one_line_and_write_no_data(argv: list[str], named: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    try:
        rc = many_clients.main([*argv, "--data-dir", str(data)])
    except SystemExit as stop:
        rc = stop.code
    assert rc == 2
    line = one_error_line(capsys)
    assert line.startswith("many_clients.py: ") and named in line
    assert not data.exists()  # the 614 MB of data are written only for a config that loads


def cpu_report(path: Path, device: str | None = "cpu") -> Path:
    ok = {"status": "ok", "s_per_round_median": 0.1, "s_per_round_min": 0.1}
    report = {"machine": {"torch": "2"}, "workloads": {"2": {"modes": {"chillfl[auto]": ok, "blazefl[serial]": ok}}}}
    if device:
        report["device"] = device
    path.write_text(json.dumps(report))
    return path


def test_gpu_targets_judges_no_cpu_run_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_targets.main([str(cpu_report(tmp_path / "cpu.json"))]) == 1
    captured = capsys.readouterr()
    assert "a --device cpu run: not judged" in captured.err and "judged no GPU run" in captured.err
    assert "W2 chillfl[auto] vs BlazeFL best" in captured.out and "1.000x" not in captured.out  # listed as not measured
    assert gpu_targets.main(["--any-device", str(cpu_report(tmp_path / "cpu.json"))]) == 0  # gpu-check.sh --smoke
    assert "1.000x" in capsys.readouterr().out
    assert gpu_targets.main([str(cpu_report(tmp_path / "gpu.json", "cuda"))]) == 0


def test_gpu_targets_exits_1_when_a_file_cannot_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "table.json").write_text("| workload | mode |\n")  # Markdown under a .json name
    (tmp_path / "list.json").write_text("[]")
    gpu = str(cpu_report(tmp_path / "gpu.json", "cuda"))
    for bad in ("missing.json", "table.json", "list.json"):
        assert gpu_targets.main([gpu, str(tmp_path / bad)]) == 1
        captured = capsys.readouterr()
        assert f"{bad}: " in captured.err and "1.000x" in captured.out  # what could be read is still judged
