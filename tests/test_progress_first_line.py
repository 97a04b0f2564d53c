"""Plain progress lines (stderr not a terminal) said nothing for the first 30 s: a log showed neither the pace nor an
ETA until then. The first round trained in this process now has its line at once; later ones keep the 30 s rhythm."""

from __future__ import annotations

import pytest

from chillfl import progress
from chillfl.analysis.counting import ItemLines


def _said(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(progress, "say", said.append)
    return said


def test_the_first_round_and_the_last_are_said_and_none_between(monkeypatch: pytest.MonkeyPatch) -> None:
    said = _said(monkeypatch)
    lines = progress.Lines(total=5, initial=0, desc="tiny", every_s=1e9)
    for _ in range(5):
        lines.update()
    assert [line.split(" (")[0] for line in said] == ["tiny round 1/5", "tiny round 5/5"]


def test_a_resumed_run_says_its_first_round_trained_here(monkeypatch: pytest.MonkeyPatch) -> None:
    said = _said(monkeypatch)
    lines = progress.Lines(total=10, initial=3, desc="tiny", every_s=1e9)
    lines.update()
    lines.update()
    assert [line.split(" (")[0] for line in said] == ["tiny round 4/10"]


def test_items_of_an_analysis_follow_the_same_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    said = _said(monkeypatch)
    lines = ItemLines(total=3, desc="temperature sweep", unit="client")
    lines.every_s = 1e9
    for _ in range(3):
        lines.update()
    assert [line.split(" (")[0] for line in said] == ["temperature sweep: client 1/3", "temperature sweep: client 3/3"]
