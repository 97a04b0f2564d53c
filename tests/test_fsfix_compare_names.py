"""A comparison's run has one folder name, the one ``resume``, ``status`` and ``report`` read: a file or FIFO at
``RUN`` or ``RUN.partial`` is refused in one line naming it (exit 2), not stepped around.

Before: the run was trained into ``RUN-2`` (a resume later ``RUN-3``, ...), which nothing read back: every resume
trained it again, and ``status`` called it "not started". (A separate run taking ``NAME-2`` over a file ``NAME`` is
documented behaviour and stays. A link there was refused already: a comparison's folder holds none.)"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

import pytest

from chillfl.cli import main

ARGS = ["--seeds", "0,1", "-q", "federation.num_clients=4", "federation.clients_per_round=2", "federation.rounds=2",
        "eval.clients=none", "name=cn", "model.name=mlp", "model.hidden=[8]", "threads=1"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-run comparison (seeds 0 and 1): ``cn-compare`` holding ``cn-s0`` and ``cn-s1``."""
    out = tmp_path_factory.mktemp("whole")
    config = out / "cn.toml"
    config.write_text("")
    assert main(["compare", str(config), *ARGS, f"out_dir={out}"]) == 0
    return out / "cn-compare"


@pytest.fixture
def stopped(finished: Path, tmp_path: Path) -> Path:
    """The comparison as stopped before its second run (``cn-s1``) began: its ``.partial`` without that run or a table."""
    partial = tmp_path / "cn-compare.partial"
    shutil.copytree(finished, partial, symlinks=True)
    (partial / "table.json").unlink()
    shutil.rmtree(partial / "cn-s1")
    return partial


def _file(path: Path) -> None:
    path.write_text("")


def _fifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("os.mkfifo: FIFOs are made on POSIX systems only")
    os.mkfifo(path)


CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("cn-s1", _file, "a file"),
    ("cn-s1", _fifo, "a FIFO"),
    ("cn-s1.partial", _file, "a file"),
]


@pytest.mark.parametrize(("name", "make", "what"), CASES, ids=[f"{n}-{m.__name__[1:]}" for n, m, _ in CASES])
def test_a_thing_at_a_comparison_runs_name_is_refused_not_stepped_around(stopped: Path, name: str, make: Callable[[Path], None], what: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    make(stopped / name)
    before = sorted(p.name for p in stopped.iterdir())
    assert main(["resume", "-q", str(stopped)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"chillfl: error: run_dir: {stopped / name} is {what}, where the comparison's run cn-s1 must have its folder "
                                    f"(nothing else is read back as that run); remove it, then chillfl resume {stopped}"), err
    assert "Traceback" not in err
    assert sorted(p.name for p in stopped.iterdir()) == before  # no cn-s1-2 trained beside it; the table not written


def test_once_it_is_removed_the_run_goes_to_its_own_name(stopped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (stopped / "cn-s1").write_text("")
    assert main(["resume", "-q", str(stopped)]) == 2
    (stopped / "cn-s1").unlink()
    assert main(["resume", "-q", str(stopped)]) == 0
    final = stopped.with_name("cn-compare")
    assert sorted(p.name for p in final.iterdir() if p.is_dir()) == ["cn-s0", "cn-s1"]
    capsys.readouterr()
    assert main(["status", str(final)]) == 0
    assert "2 runs: 2 finished" in capsys.readouterr().out
