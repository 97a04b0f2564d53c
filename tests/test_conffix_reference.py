"""``[variants]``, ``[compare]`` and ``[tune]`` are in the options reference: ``chillfl list --options compare`` said
compare was no part, and docs/reference.md listed none of a comparison's options."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.config import COMPARE_KEYS


@pytest.mark.parametrize("table", ["compare", "tune", "[variants]"])
def test_list_options_shows_the_comparison_tables(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--options", table]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## [variants], [compare], [tune] — a comparison's tables\n")
    rows = [line.split("|")[1].strip().strip("`") for line in out.splitlines() if line.startswith("| `")]
    assert rows == list(COMPARE_KEYS)
    assert '| `select` | `str` | `"final"` | `final`, `best`, `local_final`, `local_best` |' in out
