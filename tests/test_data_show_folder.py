"""``chillfl data show`` writes its heat map under ``results/`` (``<out_dir>/data-show/``), never into the current folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

pytest.importorskip("matplotlib")

TINY = ["federation.num_clients=4", "federation.clients_per_round=2"]


def test_data_show_writes_under_results_not_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["data", "show", "demo", *TINY]) == 0
    assert f"heat map: {Path('results', 'data-show', 'demo-partition.png')}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["results"]  # nothing else in the current folder
    assert (tmp_path / "results" / "data-show" / "demo-partition.png").is_file()


def test_data_show_follows_out_and_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["data", "show", "demo", *TINY, "--out", "elsewhere"]) == 0
    assert (tmp_path / "elsewhere" / "data-show" / "demo-partition.png").is_file()
    assert main(["data", "show", "demo", *TINY, "-o", "mine.png"]) == 0  # an explicit path is taken as given
    assert (tmp_path / "mine.png").is_file()


def test_data_show_names_the_file_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``-o heat`` wrote ``heat.png`` (matplotlib adds the suffix) and said ``heat map: heat``, a file that is not there;
    ``-o heat.txt`` printed the table and then a ValueError traceback (exit 1). The line names the file written, and a
    suffix that is no image format is one line on ``output`` (exit 2) before anything is drawn or printed."""
    monkeypatch.chdir(tmp_path)
    assert main(["data", "show", "demo", *TINY, "-o", "heat"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "heat map: heat.png" and (tmp_path / "heat.png").is_file()
    assert main(["data", "show", "demo", *TINY, "-o", "heat.txt"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("chillfl: error: output: 'heat.txt': no image format is written as '.txt'; give a .png path (or ") and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heat.png"]
    assert main(["data", "show", "demo", *TINY, "-o", "heat.svg"]) == 0  # another format matplotlib writes, by its suffix
    assert (tmp_path / "heat.svg").read_text().lstrip().startswith("<?xml")


VARIED = ('name = "vp"\n[dataset]\nname = "digits"\n[partition]\nname = "dirichlet"\nalpha = 0.1\n[federation]\nnum_clients = 4\n'
          'clients_per_round = 2\n[variants.iid]\npartition = { name = "iid" }\n[variants.same]\npartition = { name = "dirichlet", alpha = 0.1 }\n')


def test_data_show_shows_a_variants_partition_and_says_when_variants_differ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the base config's partition, with no word that a variant partitions otherwise, and no way to see the
    variant's; a result folder named as the config said only "is a folder"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vp.toml").write_text(VARIED)
    assert main(["data", "show", "vp.toml", "-o", "base.png"]) == 0
    base = capsys.readouterr()
    assert base.err.strip().splitlines() == ["chillfl: note: this is the base config's partition; the variant 'iid' partitions otherwise "
                                             "(`--variant LABEL` shows one)"]  # 'same' partitions as the base does
    assert main(["data", "show", "vp.toml", "--variant", "iid", "-o", "iid.png"]) == 0
    iid = capsys.readouterr()
    assert iid.err == "" and iid.out.splitlines()[0] != base.out.splitlines()[0]  # the sizes line: the iid split's
    assert main(["data", "show", "vp.toml", "--variant", "same", "-o", "same.png"]) == 0
    assert capsys.readouterr().out.splitlines()[:-1] == base.out.splitlines()[:-1]  # all but the file's line
    assert main(["data", "show", "vp.toml", "--variant", "nope"]) == 2
    assert capsys.readouterr().err.strip() == "chillfl: error: --variant: no variant 'nope' in vp; its variants: 'iid', 'same'"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.toml").write_text(VARIED)
    assert main(["data", "show", "run"]) == 2
    assert capsys.readouterr().err.strip() == f"chillfl: error: config: 'run' is a folder, not a config file; a result folder's config is {str(Path('run', 'config.toml'))!r}"
