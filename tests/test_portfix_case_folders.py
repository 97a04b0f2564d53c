"""Run folder names that differ only in case are one folder on macOS's default APFS (and on Windows): a resumed
comparison read the finished run of variant "T" for variant "t" and printed T's numbers for t, silently. A comparison
now names such runs by their full labels, or, when those too differ only in case, refuses with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.run_names import RecordedVariant, folder_key, run_labels
from chillfl.sweeps.plan import CompareOptions, Variant, plan_runs

CASE = """name = "case"
[variants."T"]
temperature = { policy = "fixed", value = 1.0 }
[variants."t"]
temperature = { policy = "fixed", value = 0.25 }
"""


def test_labels_differing_only_in_case_are_refused_on_variants_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "case.toml"
    config.write_text(CASE, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        plan_runs(load_config(config), [], CompareOptions(seeds=[0]))
    assert err.value.field == "variants" and "'T', 't'" in str(err.value) and "case" in err.value.message
    capsys.readouterr()
    assert main(["compare", str(config), "--dry-run"]) == 2
    err_text = capsys.readouterr().err.strip()
    assert len(err_text.splitlines()) == 1 and err_text.startswith("chillfl: error: variants: 'T', 't'") and "Traceback" not in err_text


def test_short_names_differing_only_in_case_fall_back_to_the_full_labels(tmp_path: Path) -> None:
    """Two variants whose short names are "x" and "X" but whose labels differ: every run is named by its full label,
    and the names read back from the comparison's record (:func:`run_labels`) are those same names."""
    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n', encoding="utf-8")
    variants = [Variant("Alpha", {"client.lr": 0.05}, short="x"), Variant("Beta", {"client.lr": 0.1}, short="X")]
    plan = plan_runs(load_config(config), [], CompareOptions(seeds=[0]), variants=variants)
    names = [c.config.name for c in plan.cells]
    assert names == ["Alpha", "Beta"]
    assert len({folder_key(n) for n in names}) == len(names)
    recorded = [RecordedVariant(v.label, v.short, v.tune) for v in variants]
    assert run_labels(recorded, {}, [0]) == {"Alpha": "Alpha", "Beta": "Beta"}


def test_folder_key_ignores_case_and_unicode_normalisation() -> None:
    assert folder_key("FedAvg") == folder_key("fedavg")
    assert folder_key("caf\u00e9") == folder_key("cafe\u0301")  # NFC and NFD: one name on APFS
    assert folder_key("T0.5") != folder_key("T0.25")
