"""An override of the demo's ``[variants]`` is one line saying what works: the demo's variants are its temperature grid,
made after the overrides, so ``variants."T=1".client.momentum=0.5`` made a variant the grid then replaced without a
word, and ``chillfl run 'variants."T=1"...'`` was read as a config file's name. A bare ``variants.T=1.x=y`` on a config
without that variant names the quoted form."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

QUOTED = 'variants."T=1".client.momentum=0.5'


@pytest.mark.parametrize("argv", [
    ["run", QUOTED, "--dry-run"],
    ["run", "demo", QUOTED, "--dry-run"],
    ["run", "demo", "variants.T=1.client.momentum=0.5", "--dry-run"],
    ["run", QUOTED],
])
def test_the_demos_variants_are_not_overridden_silently(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: variants: the demo's variants are its temperatures"), err
    assert not any(tmp_path.iterdir())  # nothing ran, nothing written
    assert main(["run", "demo", "client.momentum=0.5", "--dry-run"]) == 0  # an override of every variant: fine
    assert "momentum = 0.5" in capsys.readouterr().out


def test_a_bare_variant_name_holding_an_equals_sign_names_the_quoted_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[variants."T=0.5".temperature]\npolicy = "fixed"\nvalue = 0.5\n')
    assert main(["compare", str(config), "variants.T=1.client.lr=0.1", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("chillfl: error: variants.T: must be a table of overrides, got '1.client.lr=0.1'; "
                   """a variant name holding '=' is quoted: 'variants."T=1".client.lr=0.1'"""), err
