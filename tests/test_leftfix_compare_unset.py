"""A comparison's own config.toml names the options it leaves unset (derived at run time), as its ``--dry-run`` and
each run folder's config.toml do; before, it had no such comment. One function writes it (storage.results.unset_comment),
and the comparison's file still reruns and resumes the same comparison (the comment is comment lines only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.storage.results import to_toml

UNSET_COMMENT = "# unset (derived at run time; TOML has no null): "
BASE = {"name": "g", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp"},
        "federation": {"num_clients": 2, "rounds": 1}, "variants": {"plain": {}, "mom": {"client.momentum": 0.5}}}


def _unset_lines(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.startswith("#") and not line.startswith("# compare") and not line.startswith("#     ")]
    start = next(i for i, line in enumerate(lines) if line.startswith(UNSET_COMMENT))
    return [lines[start], *(line for line in lines[start + 1:] if line.startswith("#   "))]


def test_a_comparisons_config_names_its_unset_options_as_its_dry_run_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cmp.toml"
    config.write_text(to_toml({**BASE, "out_dir": str(tmp_path / "D")}))
    assert main(["compare", str(config), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert dry.count(UNSET_COMMENT) == 1  # said once, as the folder's file will have it
    assert main(["compare", str(config), "-q"]) == 0
    capsys.readouterr()
    folder = tmp_path / "D" / "g-compare"
    saved = (folder / "config.toml").read_text()
    assert saved.startswith(UNSET_COMMENT) and "federation.clients_per_round" in saved.split("\n[")[0]
    assert _unset_lines(saved) == _unset_lines(dry)
    # the file, comment and all, plans the same comparison again
    assert main(["compare", str(folder / "config.toml"), "--dry-run"]) == 0
    assert _unset_lines(capsys.readouterr().out) == _unset_lines(saved)
