"""The CLI surface fixes of clifix2: `compare demo` is the demo, 0-column terminals, flags before the command, empty
paths, `report` of a moved or missing folder."""

from pathlib import Path

import pytest

from chillfl.cli import main


def test_compare_demo_plans_the_runs_of_run_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "demo", "--dry-run"]) == 0
    ran = capsys.readouterr().out
    assert main(["compare", "demo", "--dry-run"]) == 0
    compared = capsys.readouterr().out
    assert "27 runs: 3 variants" in ran
    assert compared == ran


def test_compare_demo_takes_a_temperature_variant(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "demo", "--variant", "T=0.25", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "9 runs: 1 variant" in out and "T0.25-lr0.2-s2" in out


def test_a_terminal_of_zero_columns_gets_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import os

    from chillfl import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

        def fileno(self) -> int:
            return 2

    sizes = {"cols": 0}
    monkeypatch.setattr(progress.os, "get_terminal_size", lambda fd: os.terminal_size((sizes["cols"], 0)))
    assert progress.mode_for(False, Terminal()) == "lines"
    sizes["cols"] = 100
    assert progress.mode_for(False, Terminal()) == "bar"


@pytest.mark.parametrize("argv, line", [
    (["-q", "list"], "chillfl: error: -q is an option of `chillfl list`: it goes after the command (`chillfl list -q`)"),
    (["--versio", "list"], "chillfl: error: unrecognized argument before the command: --versio (did you mean '--version'?); "
                           "`chillfl --help` shows the usage"),
    (["--verison"], "chillfl: error: unrecognized argument before the command: --verison (did you mean '--version'?); "
                    "`chillfl --help` shows the usage"),
])
def test_a_flag_before_the_command_is_named_there(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize("argv, field", [
    (["run", ""], "config"), (["compare", ""], "config"), (["status", ""], "run_dir"), (["resume", ""], "run_dir"),
    (["report", "", "-o", "x.html"], "RUN_DIR"), (["report", "RUNS", "-o", ""], "--output"),
])
def test_an_empty_path_is_refused_naming_its_argument(argv: list[str], field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "RUNS").mkdir()
    assert main(argv) == 2
    assert capsys.readouterr().err == f"chillfl: error: {field}: must be a non-empty path, got ''\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RUNS"]


def test_report_of_a_moved_partial_or_a_missing_path_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c" / "demo-compare").mkdir(parents=True)
    assert main(["report", "c/demo-compare.partial", "-o", "x.html"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chillfl: error: RUN_DIR: c/demo-compare.partial does not exist: it ended, and its folder is "
                          "c/demo-compare; `chillfl report ") and err.count("\n") == 1
    assert main(["report", "nope", "-o", "x.html"]) == 2
    assert capsys.readouterr().err == "chillfl: error: RUN_DIR: nope does not exist (give a run's or a comparison's result folder)\n"
    assert not (tmp_path / "x.html").exists()


def test_an_empty_path_among_others_is_its_one_line_and_the_others_are_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # status's rule: a folder that cannot be read is one line, the others still shown (rev117e 6)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "RUNS").mkdir()
    assert main(["status", "", "RUNS"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "chillfl: error: run_dir: must be a non-empty path, got ''" and len(err) == 2 and "RUNS" in err[1]


def test_compare_demos_replaced_override_names_its_variants_not_a_grid_never_typed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "demo", "temperature.policy=fixed", "temperature.value=0.5", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "(the variants 'T=1', 'T=0.25', 'T=0.05')" in err and "--grid" not in err  # rev117e 3
