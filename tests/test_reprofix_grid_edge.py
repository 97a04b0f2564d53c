"""A tuned claim's grid-edge caveat reaches its measured cell (and ``reproduce-PAPER.md``) whatever the verdict: it was
only said on the path where a "reproduces" became a likely step-size artefact, so "does not at this scale" beside a
baseline at its grid's top lr said nothing of it."""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl.reproduce as reproduce
from chillfl.reproduce import CLAIMS
from test_reprofix_claims import _outcome, _row

FLEX_TUNED = CLAIMS[1]


@pytest.mark.parametrize("diffs, verdict", [([0.01, -0.01, 0.0], "does not at this scale"), ([-0.05, -0.06, -0.04], "opposite")])
def test_a_tuned_claims_grid_edge_caveat_is_carried_whatever_its_verdict(tmp_path: Path, diffs: list[float], verdict: str) -> None:
    rows = [_row("T=1", None, [1] * 3, {"client.lr": 0.2}), _row("T=0.05", diffs, [1] * 3, {"client.lr": 0.01})]
    o = _outcome(FLEX_TUNED, rows, [0, 1, 2])
    assert o.verdict == verdict
    assert ("grid-edge caveat: 'T=0.05' chose client.lr = 0.01, the smallest of its grid; 'T=1' chose client.lr = 0.2, "
            "the largest of its grid") in o.measured
    folder = tmp_path / "demo-compare"
    folder.mkdir()
    path = reproduce.write_verdicts("flexchill", [reproduce.Outcome(o.claim, o.seeds, o.measured, o.verdict, None, folder, ())])
    assert path is not None and "grid-edge caveat" in path.read_text()


def test_a_tuned_claim_inside_its_grid_has_no_grid_edge_caveat() -> None:
    rows = [_row("T=1", None, [1] * 3, {"client.lr": 0.05}), _row("T=0.05", [0.01, -0.01, 0.0], [1] * 3, {"client.lr": 0.05})]
    assert "grid-edge" not in _outcome(FLEX_TUNED, rows, [0, 1, 2]).measured
