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


def test_the_eta_is_paced_from_the_end_of_the_first_round_not_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first round's time holds the start-up (workers importing torch, a checkpoint restored): a run of 72 s
    said "ETA 1h36m" on its first line. The first line gives no ETA; later ones the pace since that round."""
    said = _said(monkeypatch)
    clock = iter([0.0, 100.0, 101.0, 102.0])  # start; round 1 ends after 100 s of start-up; then 1 s a round
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    lines = progress.Lines(total=10, initial=0, desc="tiny", every_s=0.5)
    lines.update()
    lines.update()
    lines.update()
    assert said[0] == "tiny round 1/10 (1m40s)"
    assert said[1:] == ["tiny round 2/10 (1m41s, ETA 8s)", "tiny round 3/10 (1m42s, ETA 7s)"]
