"""``chillfl run CONFIG --variant L --seed N variants.L.KEY=VALUE``: the override sets the variant's own table, as under
``chillfl compare``, and the command still runs that one row (docs/usage.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from test_variant_flag import _config


@pytest.mark.parametrize(("label", "key", "named", "algorithm"), [
    ("plain", "variants.plain", "late-plain", 'name = "fedavg"'),
    ("prox (mu=0.1)", 'variants."prox (mu=0.1)"', "late-prox__mu0.1", "mu = 0.1"),
])
def test_a_variants_override_sets_the_rows_table_and_runs_one_run(tmp_path: Path, label: str, key: str, named: str, algorithm: str) -> None:
    """It wrote a comparison folder (late-compare/) instead of the one run: the override put [variants] back."""
    config = _config(tmp_path)
    out = tmp_path / "o"
    assert main(["run", config, "-q", "--variant", label, "--seed", "1", f"{key}.client.lr=0.3", "federation.rounds=1", "--out", str(out)]) == 0
    (folder,) = out.iterdir()
    assert folder.name == named  # the one run, named NAME-LABEL, not late-compare
    saved = (folder / "config.toml").read_text()
    assert "lr = 0.3" in saved and algorithm in saved and "[variants" not in saved
    assert (folder / "metrics.jsonl").is_file()


def test_a_variants_override_of_one_key_of_a_variants_table_keeps_its_other_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """SCARLET's row sets distillation.method = "scarlet": a beta override made a distillation table without it
    ("variants.SCARLET.distillation.method: is required")."""
    assert main(["run", "scarlet/fig7-digits-weak", "--variant", "SCARLET", "--seed", "0", "variants.SCARLET.distillation.beta=0.5",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert 'method = "scarlet"' in out and "beta = 0.5" in out and "[variants" not in out, out
