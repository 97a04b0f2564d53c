"""``--``, the usual end of a command's options, before overrides: ``chillfl run demo --dry-run -- federation.rounds=2``
was refused as "unrecognized arguments: --" (argparse leaves it among the unknown arguments; rev103a)."""

from __future__ import annotations

import pytest

from chillfl.cli import main


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_double_dash_before_the_overrides_is_the_end_of_the_options(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "demo", "--dry-run", "-q", "--", "federation.rounds=2"]) == 0
    assert "rounds = 2" in capsys.readouterr().out


def test_a_flag_after_it_is_an_argument_not_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "demo", "-q", "--", "--dry-run"]) == 2  # an override, refused as one; nothing runs
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dry-run: overrides look like section.option=value" in err, err
