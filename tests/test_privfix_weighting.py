"""Under a mechanism whose aggregator hook hands the server's weighted mean its own client weights (``dp-fedavg``,
``local``), ``algorithm.weighting`` is never read: it was recorded in config.toml and ignored (samples and uniform gave
byte-identical metrics). A non-default value is now one line naming it; the default still runs, a rule that takes no
weights (``local`` around the geometric median, which reads its own weighting) is not refused, and neither is ``dp-sgd``
(no aggregator hook: the weighted mean is the algorithm's own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from test_accountant_limits import RUN

pytest.importorskip("opacus")


def dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], mechanism: str, algorithm: str) -> tuple[int, list[str]]:
    path = tmp_path / "run.toml"
    path.write_text(RUN.format(out=tmp_path / "out", rounds=1, privacy="noise_multiplier = 0.5", mechanism=mechanism) + algorithm, encoding="utf-8")
    code = main(["run", str(path), "--dry-run", "--quiet"])
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("mechanism", ["dp-fedavg", "local"])
def test_a_weighting_the_mechanism_overrides_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], mechanism: str) -> None:
    code, err = dry_run(tmp_path, capsys, mechanism, '[algorithm]\nname = "fedavg"\nweighting = "uniform"\n')
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("chillfl: error: algorithm.weighting: ") and f"'{mechanism}'" in err[0] and "default 'samples'" in err[0]


@pytest.mark.parametrize(("mechanism", "algorithm"), [
    ("dp-fedavg", '[algorithm]\nname = "fedavg"\nweighting = "samples"\n'),  # the default, as every resolved config.toml writes it
    ("local", '[algorithm]\nname = "fedprox"\n'),
    ("local", '[algorithm]\nname = "geomed"\nweighting = "uniform"\n'),  # a rule without weights reads its own weighting
    ("dp-sgd", '[algorithm]\nname = "fedavg"\nweighting = "uniform"\n'),  # no aggregator hook: FedAvg's own mean
], ids=["dp-fedavg-default", "local-fedprox", "local-geomed-uniform", "dp-sgd-uniform"])
def test_a_weighting_the_run_reads_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str], mechanism: str, algorithm: str) -> None:
    code, err = dry_run(tmp_path, capsys, mechanism, algorithm)
    assert code == 0, err


def test_the_default_weighting_runs_under_dp_fedavg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.toml"
    path.write_text(RUN.format(out=tmp_path / "out", rounds=1, privacy="noise_multiplier = 0.5", mechanism="dp-fedavg"), encoding="utf-8")
    assert main(["run", str(path), "--quiet"]) == 0, capsys.readouterr().err
    assert 'weighting = "samples"' in (tmp_path / "out" / "limits" / "config.toml").read_text(encoding="utf-8")
