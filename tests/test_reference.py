"""docs/reference.md is generated from the options dataclasses and must be current."""

from pathlib import Path

import pytest

from chillfl.report.reference import render_reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


def test_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == render_reference(), "regenerate: chillfl list --options > docs/reference.md"


def test_reference_lists_every_registered_part():
    text = render_reference()
    for heading in ("## [dataset]", "## [partition]", "## [model]", "## [temperature]", "## [algorithm]"):
        assert heading in text
    assert "### `fedchill`" in text and "| `value` | `float` | `0.05` |" in text


def test_reference_lists_every_loss_term_with_its_options():
    """The ``[objective] terms`` entries were missing: FedNTD's ``beta``/``tau`` and proximal's ``mu`` were documented nowhere generated."""
    from chillfl.training.terms import registered_terms

    text = render_reference()
    terms = text[text.index("## [objective] terms = [...]"):]
    for name in registered_terms():
        assert f"### `{name}`" in terms
    assert "| `tau_squared` | `bool` | `true` |" in terms and "| `mu` | `float` | `0.01` |" in terms


@pytest.mark.parametrize("only", [None, ["fedavg"], ["partition"], ["model"]])
def test_prose_lines_wrap_at_100(only: list[str] | None) -> None:
    """`chillfl list --options fedavg` printed the 57 algorithm names as one line of 602 characters (the partition's
    "Or `from = ...`" note 168, the models' shared options 184). Headings and table rows stay whole: markdown needs them so."""
    long = [line for line in render_reference(only=only).splitlines() if len(line) > 100 and not line.startswith(("#", "|"))]
    assert long == []


def _headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_list_options_with_names_prints_only_those(capsys):
    """`chillfl list --options ditto` printed the whole reference (its names only added plugins): a user asking for
    one method's options had to search 1,000 lines. Names keep their entries (with their part's shared options), a
    table's name keeps the table, and the full listing is unchanged."""
    from chillfl.cli import main

    assert main(["list", "--options", "ditto", "dp-sgd", "[client]", "proximal"]) == 0
    out = capsys.readouterr().out
    assert _headings(out) == [
        "## [client] — " + out.split("## [client] — ", 1)[1].split("\n", 1)[0],
        "## [algorithm] name = ...", "### `ditto` — " + out.split("### `ditto` — ", 1)[1].split("\n", 1)[0],
        "## [privacy] mechanism = ...", "### Shared options (every mechanism)",
        "### `dp-sgd` — " + out.split("### `dp-sgd` — ", 1)[1].split("\n", 1)[0],
        "## [objective] terms = [...]", "### `proximal` — " + out.split("### `proximal` — ", 1)[1].split("\n", 1)[0],
    ], _headings(out)
    assert "| `lam` | `float` | `1.0` |" in out and "| `divide_by` | `str` | `\"batch\"` |" in out and "| `sam_rho` |" in out
    assert "fedprox" not in out.split("## [algorithm]", 1)[1].split("### ", 1)[1]  # ditto's entry alone, not its neighbours'

    assert main(["list", "--options", "attack"]) == 0  # a part's table: every kind
    out = capsys.readouterr().out
    assert {"### `gaussian`", "### `lie`"} <= {h.split(" — ")[0] for h in _headings(out)} and "## [algorithm] name = ..." not in out

    assert main(["list", "--options", "dittoo"]) == 2  # unknown: one line, as before
    assert "did you mean 'ditto'" in capsys.readouterr().err
    assert render_reference(only=None) == render_reference()
