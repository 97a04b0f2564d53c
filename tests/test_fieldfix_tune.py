"""A ``[tune]`` value refused by a part's options (``algorithm.beta``) names the tuning key the user wrote:
``tune.<key>`` (a shared key failing in variant L: "(for variant L)" after the message), and ``variants.L.tune.<key>``
for variant L's own grid.
The part's options were parsed only when the run was built, where the ``tune.`` part was lost (``algorithm.beta``,
or ``variants.B.algorithm.beta`` for a variant that sets no beta)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

BASE = ('name = "t"\n[federation]\nnum_clients = 3\nrounds = 1\n[client]\nepochs = 1\n[dataset]\nname = "digits"\n'
        '[model]\nname = "mlp"\n[algorithm]\nname = "fedavgm"\n[eval]\nvalidation = 0.2\n')


@pytest.mark.parametrize(("tables", "line"), [
    ('[tune]\n"algorithm.beta" = [2.0]\n', "tune.algorithm.beta: must be in [0, 1), got 2.0"),
    ('[tune]\n"partition.alpha" = [-1.0]\n', "tune.partition.alpha: must be > 0"),
    ('[variants.A]\nalgorithm = {name = "fedavgm"}\n[variants.B]\nalgorithm = {name = "fedavg"}\n[tune]\n"algorithm.beta" = [0.5]\n',
     "tune.algorithm.beta: unknown option"),
    ('[variants.A]\nalgorithm = {name = "fedavgm"}\n[variants.A.tune]\n"algorithm.beta" = [2.0]\n', "variants.A.tune.algorithm.beta: must be in [0, 1)"),
])
def test_a_refused_tuning_value_names_its_tune_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], tables: str, line: str) -> None:
    (tmp_path / "t.toml").write_text(BASE + tables)
    assert main(["run", str(tmp_path / "t.toml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {line}")
    assert ("(for variant B)" in err[0]) == ("[variants.B]" in tables)

