"""A flat key at a config's top level (review cliux, finding 2): ``method=`` pointed to the run's ``name`` ("[] is chosen
by name"), ``policy=`` was suggested ``privacy``, and a table given a name (``algorithm=fedavg``) said only "expected a
table"; each now names where it lives (:func:`chillfl.options.option_homes`, :func:`chillfl.options.table_chooser`)."""

from __future__ import annotations

import pytest

from chillfl.cli import main


def _code(argv: list[str]) -> int:
    """The exit status of ``chillfl ARGV``: what :func:`main` returns, or (a usage error, argparse's) its SystemExit's."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, which must be one line."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# ---------------------------------------------------------------- 2: a flat method= / policy= / algorithm=


@pytest.mark.parametrize(("override", "said"), [
    ("method=fedav", "method: unknown key or section (a run's method is algorithm.name, e.g. algorithm.name=fedav; a soft-label or prototype "
                     "method: distillation.method, prototypes.method); allowed: "),
    ("policy=fixed", "policy: unknown key or section (an option of [temperature]: temperature.policy); allowed: "),
    ("alpha=0.3", "alpha: unknown key or section (an option of [partition]: partition.alpha); allowed: "),
    ("algorithm=fedavg", "algorithm: expected a table, got 'fedavg': [algorithm] is chosen by its name, algorithm.name=fedavg"),
    ("temperature=fixed", "temperature: expected a table, got 'fixed': [temperature] is chosen by its policy, temperature.policy=fixed"),
    ("attack=label_flip", "attack: expected a table, got 'label_flip': [attack] is chosen by its kind, attack.kind=label_flip"),
    ("dataset=mnist", "dataset: expected a table, got 'mnist': [dataset] is chosen by its name, dataset.name=mnist"),
])
def test_a_flat_chooser_or_table_names_where_it_lives(override: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "demo", override, "--dry-run"]) == 2
    line = _error(capsys)
    assert line.startswith(f"chillfl: error: {said}"), line
    assert "[] is chosen" not in line
