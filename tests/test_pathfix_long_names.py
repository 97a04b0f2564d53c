"""An output file name over 255 bytes, with the suffixes chillfl adds (``.png``, ``.tmp``), is one line on its option,
exit 2, before any work and with no folder made: it was a traceback (Python 3.11's ``is_dir()`` raises ENAMETOOLONG), or a
failure after the work naming the temp file."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.errors import ConfigError

from received_folder import make_run

TOML = ('name = "tiny"\nseed = 0\n[federation]\nnum_clients = 2\nrounds = 1\nclients_per_round = 2\n[client]\nepochs = 1\n'
        '[dataset]\nname = "digits"\n[model]\nname = "mlp"\n')


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("pathfix"), rounds=1)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_the_last_component_is_counted_with_what_chillfl_adds() -> None:
    from chillfl.paths import check_name_lengths

    check_name_lengths("d/" + "z" * 247, "output", ".png.tmp")  # 255 bytes in all: fine
    with pytest.raises(ConfigError, match=r"^output: a path component is longer than 255 bytes \(with the \.png\.tmp chillfl adds\)"):
        check_name_lengths("d/" + "z" * 248, "output", ".png.tmp")
    with pytest.raises(ConfigError, match=r"^--out: a path component is longer than 255 bytes: "):
        check_name_lengths("z" * 256 + "/x", "--out")
    check_name_lengths("é" * 127, "--out")  # 254 bytes: bytes are counted, not characters
    with pytest.raises(ConfigError):
        check_name_lengths("é" * 128, "--out")


def test_data_show_refuses_a_long_figure_name_before_making_its_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.toml").write_text(TOML)
    for out in ("z" * 253, "nd3/" + "z" * 248):  # 253 + .png: a traceback; nd3/…: failed late on its .png.tmp, left nd3/
        assert main(["data", "show", "t.toml", "-o", out]) == 2
        assert _one_line(capsys).startswith("chillfl: error: output: a path component is longer than 255 bytes (with the .png.tmp chillfl adds)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.toml"]


def test_report_and_analyze_refuse_a_long_output_name(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for out in ("z" * 256 + ".html", "z" * 252):  # a traceback; a page rendered, then 'cannot write zzz….tmp'
        assert main(["report", str(run_dir), "-o", str(tmp_path / out)]) == 2
        assert _one_line(capsys).startswith("chillfl: error: --output: a path component is longer than 255 bytes (with the .tmp chillfl adds)")
    assert main(["analyze", "calibration", str(run_dir), "-q", "-o", str(tmp_path / ("z" * 256))]) == 2
    assert _one_line(capsys).startswith("chillfl: error: --out: a path component is longer than 255 bytes: ")
    assert list(tmp_path.iterdir()) == []
