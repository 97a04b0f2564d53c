"""A comparison whose finished name (``NAME-compare``) is taken when its ``.partial`` is renamed to it is one line on
``run_dir`` (exit 2) naming both and what to do, and nothing it wrote is lost: a resume, once the name is free, finishes.

Before: a raw ``OSError: [Errno 39] Directory not empty`` traceback (``partial.rename(folder)``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chillfl.cli import main
from test_fsfix_compare_names import finished, stopped  # noqa: F401  (fixtures: a finished comparison, and it stopped before cn-s1)


@pytest.mark.parametrize("what", ["a folder", "a file"])
def test_a_taken_finished_name_is_one_line_and_the_partial_is_kept(stopped: Path, finished: Path, what: str,  # noqa: F811
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    final = stopped.with_name("cn-compare")
    if what == "a folder":
        shutil.copytree(finished, final, symlinks=True)
    else:
        final.write_text("mine\n")
    there = sorted(p.name for p in final.iterdir()) if final.is_dir() else final.read_text()
    assert main(["resume", "-q", str(stopped)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"chillfl: error: run_dir: {stopped} cannot be renamed {final}, its finished name: {what} is there already; "
                                    f"its runs, tables and figures are kept in {stopped}: move {final} away, then chillfl resume {stopped} finishes it"), err
    assert "Traceback" not in err
    assert (sorted(p.name for p in final.iterdir()) if final.is_dir() else final.read_text()) == there  # theirs untouched
    assert {"cn-s0", "cn-s1", "table.json", "table.md"} <= {p.name for p in stopped.iterdir()}  # the run trained here, and the tables, kept
    if final.is_dir():
        shutil.rmtree(final)
    else:
        final.unlink()
    assert main(["resume", "-q", str(stopped)]) == 0
    assert not stopped.exists() and {"cn-s0", "cn-s1", "table.json"} <= {p.name for p in final.iterdir()}
    capsys.readouterr()


def test_an_empty_folder_at_the_finished_name_is_replaced(stopped: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """The control: the rename replaces an empty folder (nothing is in it to lose), as before."""
    final = stopped.with_name("cn-compare")
    final.mkdir()
    assert main(["resume", "-q", str(stopped)]) == 0
    assert not stopped.exists() and {"cn-s0", "cn-s1", "table.json"} <= {p.name for p in final.iterdir()}
    capsys.readouterr()
