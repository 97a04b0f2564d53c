"""``chillfl list datasets|models|partitioners`` say what each entry is (its spec's summary), and the reference keeps
the line its options' docstring gave the heading before, under it."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.data import dataset_names, partitioner_names
from chillfl.data.datasets import dataset_spec
from chillfl.data.partition import partitioner_spec
from chillfl.models import model_names
from chillfl.models.registry import model_spec
from chillfl.report.reference import render_reference

BUILT_IN = [
    *(("datasets", name, dataset_spec(name).summary) for name in dataset_names()),
    *(("partitioners", name, partitioner_spec(name).summary) for name in partitioner_names()),
    *(("models", name, model_spec(name).summary) for name in model_names()),
]


@pytest.mark.parametrize(("what", "name", "summary"), BUILT_IN, ids=[f"{w}-{n}" for w, n, _ in BUILT_IN])
def test_every_built_in_entry_says_what_it_is_in_one_short_line(what: str, name: str, summary: str) -> None:
    assert summary and "\n" not in summary and len(summary) <= 80, summary
    assert not summary.startswith("``")  # what it is, not its options' line (``alpha``: ...): that is the reference's paragraph


@pytest.mark.parametrize("what", ["datasets", "partitioners", "models"])
def test_the_listing_prints_each_summary_whole(capsys: pytest.CaptureFixture[str], what: str) -> None:
    assert main(["list", what]) == 0
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert rows == {name: summary for w, name, summary in BUILT_IN if w == what}  # none cut to "..."


def test_the_reference_keeps_the_options_line_under_the_summary() -> None:
    text = render_reference(only=["cifar100", "cifar10", "dnc"])
    cifar100 = text.split("### `cifar100`")[1].split("###")[0]
    assert cifar100.startswith(" — CIFAR-100: 50,000 + 10,000 32x32 colour images, 100 or 20 classes (download)\n\n")
    assert '``labels``: "fine" (100 classes) or "coarse" (20 superclasses).' in cifar100  # the options' line, whole
    cifar10 = text.split("### `cifar10`")[1].split("###")[0]
    assert "A dataset without options" not in cifar10 and "No options." in cifar10  # nothing to explain: no paragraph
    dnc = " ".join(text.split("### `dnc`")[1].split("###")[0].split())
    assert "``c``: filtering fraction (floor(c f) removed); ``subsample``:" in dnc  # a first paragraph wrapping over lines: whole


@pytest.mark.parametrize(("argv", "example"), [(["list", "datasets", "--options"], "NAME"), (["list", "experiments", "--options", "fedavg"], "fedavg")])
def test_options_with_a_kind_of_part_is_one_line_not_ignored(capsys: pytest.CaptureFixture[str], argv: list[str], example: str) -> None:
    """``list datasets --options`` printed every part's options (the kind ignored); ``list experiments --options fedavg``
    printed the catalogue (the flag ignored)."""
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.strip().splitlines() == [
        f"chillfl: error: --options: lists options by part name, not with a kind of part ({argv[1]!r}): `chillfl list --options {example}` for one "
        f"part's, `chillfl list --options` for all, `chillfl list {argv[1]}` for the names"]
