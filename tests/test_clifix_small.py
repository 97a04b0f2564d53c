"""Small hints of the command line (review cliux, finding 6): ``--reference`` misspelt, ``-q -v`` together, and the
help of ``status``, ``report`` and ``data``."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

from test_clifix_flat_keys import _code, _error


# ---------------------------------------------------------------- 6: small ones


def test_a_misspelt_reference_is_suggested_the_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[federation]\nnum_clients = 4\nrounds = 1\n')
    assert main(["compare", str(config), "--grid", "temperature=0.1,1", "--reference", "t=1", "--dry-run"]) == 2
    assert _error(capsys) == "chillfl: error: --reference: unknown variant 't=1' (did you mean 'T=1'?); allowed: T=0.1, T=1"
    assert main(["compare", str(config), "--grid", "temperature=0.1,1", "compare.baseline=t=0.1", "--dry-run"]) == 2
    assert "unknown variant 't=0.1' (did you mean 'T=0.1'?)" in _error(capsys)


@pytest.mark.parametrize("argv", [["run", "nope.toml", "-q", "-v"], ["compare", "nope.toml", "-v", "-qq"], ["list", "-v", "-q"],
                                  ["data", "show", "nope.toml", "-q", "-v"], ["resume", "x.partial", "-v", "-q"]])
def test_quiet_and_verbose_together_are_refused_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """They cancelled out: ``-q -v`` printed a progress line every round though ``-q`` says "no progress"."""
    assert _code(argv) == 2
    line = _error(capsys)
    assert line.endswith("error: -q/--quiet and -v/--verbose: give one (-q: fewer lines, -v: more), not both"), line


@pytest.mark.parametrize(("argv", "said"), [
    (["status", "--help"], "Say where each run or comparison stands, read from its folder"),
    (["report", "--help"], "Write one self-contained HTML page (-o, report.html by default"),
    (["data", "--help"], "Inspect a config's federated partition"),
])
def test_status_report_and_data_help_say_what_they_read_and_write(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    assert said in " ".join(capsys.readouterr().out.split())
