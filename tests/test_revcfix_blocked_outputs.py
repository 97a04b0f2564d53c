"""A comparison begun by an older chillfl with a variant named like one of its own files (``curves.png``: its run's
folder ``curves.png/`` stands where the figure goes) is resumed as it was begun, and finishes: the blocked file is left
out, with one note naming the run folder and the file. It failed "Is a directory" every time, and advised the resume
that failed again."""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl.sweeps.plan as plan_module
import chillfl.sweeps.run as sweep_run
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.sweeps.run import run_compare


def begun_by_an_older_chillfl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *labels: str) -> Path:
    """The ``.partial`` folder an older chillfl left: its runs ran under their own labels (it kept no name for the
    comparison's files), and its tables were not written."""
    body = ('name = "old"\n[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n[dataset]\nname = "digits"\n'
            '[eval]\nclient_split_size = 10\n[compare]\ncontrols = false\n')
    body += "".join(f'[variants."{label}"]\nclient = {{ lr = {0.05 * (i + 1)} }}\n' for i, label in enumerate(labels))
    path = tmp_path / "c.toml"
    path.write_text(body, encoding="utf-8")
    with monkeypatch.context() as m:
        m.setattr(plan_module, "taken_name", lambda names: None)  # the older chillfl's names
        m.setattr(sweep_run, "write_tables", lambda *args, **kwargs: None)  # stopped before its tables
        run_compare(load_config(path, {"out_dir": str(tmp_path / "out")}), [], progress=False)
    [partial] = (tmp_path / "out").iterdir()
    assert partial.name.endswith(".partial") and all((partial / label).is_dir() for label in labels)
    return partial


@pytest.mark.parametrize("blocked", ["curves.png", "table.md"])
def test_a_resume_leaves_out_the_file_a_kept_run_folder_stands_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], blocked: str,
) -> None:
    partial = begun_by_an_older_chillfl(tmp_path, monkeypatch, "a", blocked)
    capsys.readouterr()
    assert main(["resume", str(partial)]) == 0
    err = capsys.readouterr().err
    folder = partial.with_name(partial.name.removesuffix(".partial"))
    assert folder.is_dir() and not partial.exists()
    assert (folder / blocked / "summary.json").is_file()  # the run is kept, whole
    note = f"the comparison's {blocked} is not written: its run folder {blocked}/"
    assert err.count(note) == 1 and "Is a directory" not in err and "chillfl resume" not in err
    written = {"table.md", "table.json", "curves.png", "accuracy_vs_bytes.png"} - {blocked}
    assert all((folder / name).is_file() for name in written)
    if blocked != "table.md":
        assert note in (folder / "table.md").read_text(encoding="utf-8")
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # the files were drawn aside: nothing is left of that


def test_a_run_folder_on_a_files_temporary_name_is_no_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``curves.png.tmp/``, the name the figure is written through: the figure is drawn aside and still written."""
    partial = begun_by_an_older_chillfl(tmp_path, monkeypatch, "a", "curves.png.tmp")
    assert main(["resume", str(partial)]) == 0
    folder = partial.with_name(partial.name.removesuffix(".partial"))
    assert (folder / "curves.png").is_file() and (folder / "curves.png.tmp" / "summary.json").is_file()
    assert "is not written" not in (folder / "table.md").read_text(encoding="utf-8")
