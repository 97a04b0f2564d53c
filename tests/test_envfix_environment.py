"""A changed environment is one line or works, never a traceback after the run folder was made (report-envdet):
a path with a non-UTF-8 byte (``--out``, ``data_dir``, a run folder given to ``report``), a stdout in ASCII or
Latin-1, a ``RAY_TMPDIR`` that is missing or not a folder, and matplotlib's warnings under ``-qq``."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import chillfl
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError

SRC = str(Path(chillfl.__file__).resolve().parents[1])
CONFIG = {
    "name": "t",
    "seed": 3,
    "threads": 1,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "partition": {"name": "dirichlet", "alpha": 0.5},
    "model": {"name": "mlp", "hidden": [8]},
    "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1},
    "client": {"epochs": 1, "batch_size": 64, "lr": 0.05},
    "eval": {"client_split_size": 20},
}


def write_config(folder: Path, **over: Any) -> Path:
    """``CONFIG`` (with ``over``) as a TOML file in ``folder``, its out_dir ``folder/out``."""
    table = {**CONFIG, **over}
    lines = [f'out_dir = "{folder / "out"}"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for key, sub in table.items():
        if isinstance(sub, dict):
            lines += [f"[{key}]", *(f"{k} = {json.dumps(v)}" for k, v in sub.items())]
    path = folder / "t.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def chillfl_process(*args: str | bytes, **env: str) -> subprocess.CompletedProcess[bytes]:
    """``python -m chillfl ARGS`` with this checkout's chillfl and ``env`` added to the environment (bytes out)."""
    environment = {**os.environ, "PYTHONPATH": SRC, **env}
    return subprocess.run([sys.executable, "-m", "chillfl", *args], env=environment, capture_output=True, timeout=120)


def latin1_folder(parent: Path) -> str:
    """``parent/café`` with the é as the one Latin-1 byte 0xE9 (not UTF-8), made on disk; as Python names it (``caf\\udce9``)."""
    folder = os.fsencode(parent) + b"/caf\xe9"
    os.mkdir(folder)
    return os.fsdecode(folder)


# 1. a non-UTF-8 path


@pytest.mark.parametrize("key", ["out_dir", "data_dir"])
def test_a_path_that_is_not_utf8_is_refused_naming_its_field(tmp_path: Path, key: str) -> None:
    folder = latin1_folder(tmp_path)
    assert "\udce9" in folder
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path), {key: folder})
    assert refused.value.field == key
    assert "UTF-8" in refused.value.message


def test_the_hint_for_a_path_that_is_not_utf8_fits_the_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """UTF-8 mode mends only Python reading paths in another encoding; a Latin-1 byte in a name needs renaming (rev107 2)."""
    folder = latin1_folder(tmp_path)
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path), {"out_dir": folder})
    assert "rename it" in refused.value.message and "PYTHONUTF8" not in refused.value.message
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: "ascii")
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path), {"out_dir": f"{tmp_path}/caf\udce9"})
    assert "Python reads paths as ascii here: set PYTHONUTF8=1" in refused.value.message


def test_a_name_holding_a_byte_that_is_not_utf8_is_refused_as_such(tmp_path: Path) -> None:
    """``name=caf\\xe9`` from argv arrives as ``caf\\udce9``: refused naming UTF-8 (it was called "control characters")."""
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path), {"name": "caf\udce9"})
    assert refused.value.field == "name"
    assert "UTF-8" in refused.value.message and "control" not in refused.value.message


def test_run_with_an_out_folder_that_is_not_utf8_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    out = os.fsencode(tmp_path) + b"/caf\xe9"  # not made: the run would make it
    done = chillfl_process("run", str(config), "-q", b"--out", out)
    lines = done.stderr.decode("utf-8", "backslashreplace").splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("chillfl: error: out_dir: "), lines
    assert not os.path.lexists(out)  # before: a UnicodeEncodeError traceback (exit 1) and out/t.partial left
    assert os.listdir(tmp_path) == ["t.toml"]


def test_compare_with_a_data_dir_that_is_not_utf8_is_refused_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    code = main(["compare", str(config), "--seeds", "0,1", "-q", f"data_dir={tmp_path}/caf\udce9"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("chillfl: error: data_dir: "), err
    assert sorted(os.listdir(tmp_path)) == ["t.toml"]


def test_report_of_a_run_under_a_folder_that_is_not_utf8_is_written(tmp_path: Path) -> None:
    """The folder is only shown on the page: it is shown escaped, where writing the page raised UnicodeEncodeError."""
    from chillfl.report.html import write_report
    from chillfl.runner import run_experiment

    run_experiment(load_config(write_config(tmp_path)), progress=False)
    under = latin1_folder(tmp_path)
    os.rename(tmp_path / "out", f"{under}/out")
    page = write_report([f"{under}/out/t"], tmp_path / "r.html", models=False, partitions=False)
    assert "caf\\udce9" in page.read_text(encoding="utf-8")


# 2. stdout in an encoding without the table's characters


def test_list_options_prints_on_an_ascii_stdout() -> None:
    done = chillfl_process("list", "--options", PYTHONIOENCODING="ascii")
    assert done.returncode == 0, done.stderr  # before: UnicodeEncodeError at the first '\u2014'
    assert b"[federation] \\u2014 " in done.stdout


def test_the_stream_is_given_back_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process caller's Latin-1 stdout: escaped while the command prints, then its own error handler again."""
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="latin-1", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["list", "--options"]) == 0
    assert stdout.errors == "strict"
    assert b"[federation] \\u2014 " in raw.getvalue()


def test_a_path_byte_is_written_back_as_the_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path's escaped byte (``caf\\udce9``, as ``surrogateescape`` reads it) is printed as that byte, the rest escaped."""
    from chillfl.cli import _printable_output

    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="ascii", errors="surrogateescape", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    with _printable_output():
        print("caf\udce9 \u00b1 \u2020")
    assert raw.getvalue() == b"caf\xe9 \\xb1 \\u2020\n"
    assert stdout.errors == "surrogateescape"


# 3. RAY_TMPDIR


def test_a_missing_ray_tmpdir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.executors.ray_executor import check_local_ray_temp

    monkeypatch.chdir(tmp_path)  # relative: short enough for the socket paths under it
    monkeypatch.setenv("RAY_TMPDIR", "missing")
    with pytest.raises(ConfigError) as refused:
        check_local_ray_temp()
    assert refused.value.field == "RAY_TMPDIR" and "does not exist" in refused.value.message


def test_a_ray_tmpdir_that_is_a_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.executors.ray_executor import check_local_ray_temp

    (tmp_path / "file").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_TMPDIR", "file")
    with pytest.raises(ConfigError) as refused:
        check_local_ray_temp()
    assert refused.value.field == "RAY_TMPDIR" and "not a folder" in refused.value.message


def test_a_read_only_ray_tmpdir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder nobody can make folders in: a 0o555 folder, or, where the tests run as root (who writes there anyway),
    /proc, where mkdir fails for root too (the probe check_writable_dir makes)."""
    from chillfl.executors.ray_executor import check_local_ray_temp

    if os.geteuid() == 0:
        assert os.path.isdir("/proc/self"), "Linux's /proc is what makes a folder root cannot write into"
        read_only = "/proc/self"
    else:
        (tmp_path / "ro").mkdir(mode=0o555)
        monkeypatch.chdir(tmp_path)
        read_only = "ro"
    monkeypatch.setenv("RAY_TMPDIR", read_only)
    with pytest.raises(ConfigError) as refused:
        check_local_ray_temp()
    assert refused.value.field == "RAY_TMPDIR"


@pytest.mark.parametrize("value", [None, "", "folder"])
def test_a_usable_or_unset_ray_tmpdir_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    from chillfl.executors.ray_executor import check_local_ray_temp

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", ".")
    if value is not None:
        monkeypatch.setenv("RAY_TMPDIR", value)
        (tmp_path / "folder").mkdir()
    check_local_ray_temp()
    assert sorted(os.listdir(tmp_path)) == ([] if value is None else ["folder"])  # the probe left nothing


def test_a_ray_run_with_a_missing_ray_tmpdir_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_TMPDIR", "missing")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code = main(["run", str(write_config(tmp_path)), "-q", "executor=ray"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("chillfl: error: RAY_TMPDIR: "), err
    assert sorted(os.listdir(tmp_path)) == ["t.toml"]  # before: FileNotFoundError from mkdtemp, out/t.partial left


# 4. -qq and matplotlib's warnings


def test_errors_only_keeps_matplotlibs_config_warnings_off_stderr(tmp_path: Path) -> None:
    """A config folder matplotlib cannot make (a read-only HOME; here MPLCONFIGDIR under a file, which fails for root
    too) made it warn twice on stderr, ``-qq`` or not."""
    (tmp_path / "file").write_text("")
    env = {"MPLCONFIGDIR": str(tmp_path / "file" / "mpl")}
    config = str(write_config(tmp_path))
    done = chillfl_process("run", config, "-qq", **env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    assert (tmp_path / "out" / "t" / "accuracy_loss.png").is_file()  # it drew a figure, so it imported matplotlib


def test_errors_only_gives_the_matplotlib_logger_back(tmp_path: Path) -> None:
    library = logging.getLogger("matplotlib")
    before = library.level
    assert main(["run", str(write_config(tmp_path)), "-qq", "--dry-run"]) == 0
    assert library.level == before
