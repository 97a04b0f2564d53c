"""An older chillfl's comparison whose labels fold alike only under today's per-character fold (``lr-ı`` and ``lr-i``:
``str.casefold`` kept them apart, :func:`~chillfl.run_names.folder_key` upcases ``ı`` to ``I``) is read by ``chillfl
status`` and finished by ``chillfl resume`` with the names whose folders it holds; a new comparison keeps the strict fold."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

import chillfl.run_names as run_names
import chillfl.sweeps.run as sweep_run
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.run_names import folder_clash
from chillfl.sweeps.plan import CompareOptions, plan_runs
from chillfl.sweeps.run import run_compare

LABELS = ("lr-\u0131", "lr-i")  # dotless i, i


def comparison_config(tmp_path: Path) -> Path:
    body = ('name = "old"\n[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n[dataset]\nname = "digits"\n'
            '[eval]\nclient_split_size = 10\n[compare]\ncontrols = false\n')
    body += "".join(f'[variants."{label}"]\nclient = {{ lr = {0.05 * (i + 1)} }}\n' for i, label in enumerate(LABELS))
    path = tmp_path / "c.toml"
    path.write_text(body, encoding="utf-8")
    return path


def begun_by_an_older_chillfl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ``.partial`` folder an older chillfl left (its fold: ``str.casefold``), both runs ended, its tables not written."""
    with monkeypatch.context() as m:
        m.setattr(run_names, "folder_key", lambda name: unicodedata.normalize("NFC", name).casefold())
        m.setattr(sweep_run, "write_tables", lambda *args, **kwargs: None)  # stopped before its tables
        run_compare(load_config(comparison_config(tmp_path), {"out_dir": str(tmp_path / "out")}), [], progress=False)
    [partial] = (tmp_path / "out").iterdir()
    assert sorted(p.name for p in partial.iterdir() if p.is_dir()) == sorted(LABELS)
    return partial


def test_status_and_resume_read_an_older_comparisons_folded_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    partial = begun_by_an_older_chillfl(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main(["status", str(partial)]) == 0
    out = capsys.readouterr().out
    assert all(f"| {label} | finished |" in out for label in LABELS)
    assert main(["resume", str(partial)]) == 0
    assert "but for case" not in capsys.readouterr().err
    folder = partial.with_name(partial.name.removesuffix(".partial"))
    assert (folder / "table.md").is_file() and all((folder / label / "summary.json").is_file() for label in LABELS)


def test_a_new_comparison_of_the_labels_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="but for case"):
        plan_runs(load_config(comparison_config(tmp_path)), [], CompareOptions(seeds=[0]))
    folder = tmp_path / "empty"  # a folder holding neither run: no names stand apart on disk
    folder.mkdir()
    with pytest.raises(ConfigError, match="but for case"):
        plan_runs(load_config(comparison_config(tmp_path)), [], CompareOptions(seeds=[0]), existing=folder)


def test_only_names_whose_folders_both_stand_apart_are_no_clash() -> None:
    assert folder_clash(LABELS) == LABELS
    assert folder_clash(LABELS, apart=LABELS) is None
    assert folder_clash(LABELS, apart={LABELS[0]}) == LABELS  # one of the two not on disk: it may land in the other's
    assert folder_clash(["a", "a"], apart={"a"}) == ("a", "a")  # one name twice is one folder
    assert folder_clash([*LABELS, "LR-I"], apart=LABELS) == (LABELS[0], "LR-I")  # a third not on disk folds with them
