"""``chillfl data show demo --variant LABEL`` takes the demo's temperature rows as its variants, as ``chillfl run demo
--variant LABEL`` does (it said "demo defines no [variants] to choose from"); a label it lacks names the ones it has."""

from __future__ import annotations

import pytest

from chillfl.cli import main


def test_data_show_of_a_demo_variant_is_that_rows_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "show", "demo", "--variant", "T=0.25", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert 'name = "demo-T0.25"' in out and "value = 0.25" in out  # the row's run: its name and fixed temperature


def test_a_label_the_demo_lacks_is_one_line_naming_its_variants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "show", "demo", "--variant", "T=2", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: --variant: no variant 'T=2' in demo")
    assert err[0].endswith("its variants: 'T=1', 'T=0.25', 'T=0.05'")
