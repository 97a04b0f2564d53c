"""A temperature policy that both sends the server what it reads of the clients' data (``reports``) and reads a client's
labels into every sample's loss (``private_steps``) under a per-sample-step mechanism (dp-sgd) is refused in one line
whose advice resolves both: each was refused alone, and following the first's advice (another normalisation) ran into
the second, whose advice (dp-fedavg, local) runs into the first."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

pytest.importorskip("opacus")

SETTINGS = ["temperature.policy=fedchill", "privacy.mechanism=dp-sgd", "temperature.normalisation=minmax"]


def base(tmp_path: Path) -> list[str]:
    config = tmp_path / "base.toml"
    config.write_text('name = "b"\nseed = 0\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\nhidden = [16]\n[federation]\nnum_clients = 4\n'
                      'clients_per_round = 2\nrounds = 1\n[eval]\nclient_split_size = 10\n', encoding="utf-8")
    return ["run", str(config), *SETTINGS, "--out", str(tmp_path / "out")]


def test_one_line_names_both_and_the_settings_that_read_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(base(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("chillfl: error: privacy.mechanism: 'dp-sgd'") and "Traceback" not in err
    assert "per-sample clipping does not bound" in err  # private_steps' declaration
    assert "without noise and outside epsilon" in err and "rescales h_n over every client's label counts" in err  # reports'
    assert err.endswith("use a temperature policy that reads no client's data (this one reads none with temperature.init = false or temperature.s = 0)")
    assert "dp-fedavg" not in err and "ignores" not in err  # no mechanism resolves the reports; the settings tried say nothing


@pytest.mark.parametrize("setting", ["temperature.init=false", "temperature.s=0"])
def test_each_setting_the_line_names_runs(tmp_path: Path, setting: str) -> None:
    assert main([*base(tmp_path), setting]) == 0
