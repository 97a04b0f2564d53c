"""The flag hints of cli._stray_flags_hint (rev102b #3, #4): the override after a mistyped switch was read as its value
(``--deterministic federation.rounds=2`` suggested ``deterministic='federation.rounds=2'``), ``--temperature 2`` was sent
to ``temperature.policy=2`` (itself refused), a switch alone to ``compile=VALUE``, a negative value was lost
(``client.lr=VALUE``), and ``report --outfile`` was asked about ``--title``."""

from __future__ import annotations

import pytest

from test_clifix_flat_keys import _code, _error


@pytest.mark.parametrize(("argv", "said"), [
    (["run", "demo", "--deterministic", "federation.rounds=2"], "(config options are overrides: deterministic=true)"),
    (["run", "demo", "--temperature", "2"], "(config options are overrides: temperature.policy=fixed temperature.value=2)"),
    (["run", "demo", "--compile"], "(config options are overrides: compile=true)"),
    (["run", "demo", "--lr", "-0.1"], "(config options are overrides: client.lr=-0.1)"),
    (["report", "x", "--outfile", "r.html"], "(did you mean '--output'?)"),
])
def test_the_hint_takes_the_flags_own_value(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _code(argv) == 2
    assert said in _error(capsys)
