"""Run folder names are compared case-insensitively one character at a time: ``str.casefold`` made ``Straße`` and
``strasse`` one folder name (ß -> ss), which Windows' NTFS does not (it upcases a character at a time), and a
comparison of the two labels was refused as naming "their runs' folders alike but for case"."""

from __future__ import annotations

from pathlib import Path

from chillfl.config import load_config
from chillfl.run_names import folder_key
from chillfl.sweeps.plan import CompareOptions, Variant, plan_runs


def test_labels_differing_in_a_letter_that_folds_into_two_are_two_folders(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n', encoding="utf-8")
    variants = [Variant("Straße", {"client.lr": 0.05}), Variant("strasse", {"client.lr": 0.1})]
    plan = plan_runs(load_config(config), [], CompareOptions(seeds=[0]), variants=variants)
    assert [c.config.name for c in plan.cells] == ["Straße", "strasse"]


def test_folder_key_folds_one_character_at_a_time() -> None:
    assert folder_key("Straße") != folder_key("strasse")  # str.casefold: "strasse" for both
    assert folder_key("\ufb01le") != folder_key("file")  # the ligature fi: no file system splits it
    assert folder_key("\u0130") != folder_key("i")  # İ lowers to two characters (i + combining dot): kept
    assert folder_key("\u01c5") == folder_key("\u01c6") == folder_key("\u01c4")  # ǅ ǆ Ǆ: one letter in three cases
    assert folder_key("\u03c2") == folder_key("\u03c3")  # ς σ: both upcase to Σ (NTFS's table)
    assert folder_key("\u1e9e") == folder_key("\u00df")  # ẞ ß
    assert folder_key("T0.5") == folder_key("t0.5") and folder_key("caf\u00e9") == folder_key("cafe\u0301")
