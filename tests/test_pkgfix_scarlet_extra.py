"""``chillfl analyze scarlet-deficit`` without the ``datasets`` extra printed a header, an empty table and
"(interrupted: the tables above are incomplete)" on stdout before the missing-extra line: now the line alone, exit 2."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.data import datasets
from chillfl.errors import MissingExtra


def test_a_missing_extra_is_said_before_any_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def no_sklearn() -> object:  # as package_file / need say it where scikit-learn is not installed
        raise MissingExtra("the digits data", "scikit-learn", "datasets")

    monkeypatch.setattr(datasets, "_digits_arrays", no_sklearn)  # the default config's data (digits); cached a process
    assert main(["analyze", "scarlet-deficit", "-q", "--seeds", "0", "--rounds", "2", "--parts", "d"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip().splitlines() == ['chillfl: scikit-learn is needed for the digits data: pip install "chillfl[datasets]"']
