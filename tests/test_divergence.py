"""A diverging run stops at once: one line naming round and client, exit 3, the folder marked failed, strict JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from chillfl.cli import main
from chillfl.errors import DIVERGED_EXIT, Diverged
from chillfl.protocols.common import check_finite_loss, check_finite_state

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=5", "model.name=mlp", "client.batch_size=32", "checkpoint.every=1"]


def test_a_huge_learning_rate_ends_with_exit_3_and_a_failed_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'name = "boom"\nout_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", *TINY, "client.lr=1e30"]) == DIVERGED_EXIT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: diverged: round 1, client ")
    assert "training loss is nan" in err[0] or "training loss is inf" in err[0]
    assert err[0].endswith(f"partial results in {tmp_path / 'out' / 'boom.failed'}")
    folders = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert folders == ["boom.failed"]
    failure = json.loads((tmp_path / "out" / "boom.failed" / "failure.json").read_text())
    assert failure["round"] == 1 and isinstance(failure["client"], int)
    assert (tmp_path / "out" / "boom.failed" / "metrics.jsonl").read_text() == ""


def test_the_checks_name_what_turned_non_finite() -> None:
    check_finite_loss(0, 1, "training loss", 0.5)
    with pytest.raises(Diverged, match=r"round 3, client 7: training loss is inf"):
        check_finite_loss(2, 7, "training loss", float("inf"))
    check_finite_state(0, {"w": torch.ones(2), "steps": torch.tensor(3)})
    with pytest.raises(Diverged, match=r"round 2: global model parameter 'b' is not finite"):
        check_finite_state(1, {"a": torch.ones(2), "b": torch.tensor([1.0, float("nan")])})


def test_result_files_are_strict_json(tmp_path: Path) -> None:
    from chillfl.storage.results import ResultWriter

    writer = ResultWriter(tmp_path, "r")
    writer.append({"round": 1, "x": float("nan"), "nested": {"y": float("-inf")}, "ok": 0.5})
    writer.write_json("summary.json", {"z": [float("inf"), 1.0]})
    folder = writer.finish()
    line = (folder / "metrics.jsonl").read_text()
    # a non-finite value is null plus its spelling under "nonfinite", shaped as the record (read back as the float)
    assert json.loads(line) == {"round": 1, "x": None, "nested": {"y": None}, "ok": 0.5, "nonfinite": {"nested": {"y": "-inf"}, "x": "nan"}}
    assert "NaN" not in line
    assert json.loads((folder / "summary.json").read_text()) == {"z": [None, 1.0]}


@pytest.mark.parametrize("executor", ["sequential", "processes", "vectorized"])
def test_a_personal_training_that_turns_non_finite_stops_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], executor: str) -> None:
    """Ditto's v_k trained at lr x lam = 5e4 blows up while the global update is healthy. Before, only the first training's
    loss was checked: the run ended with exit 0 (even with --strict), ``local_loss`` null and ``final_local_loss`` an earlier
    round's. The client tells the server (its reply's ``nonfinite``), which stops the run: the same line whatever the executor
    (a raise in a worker process was a crash, exit 1)."""
    config = tmp_path / "c.toml"
    config.write_text(f'name = "ditto"\nout_dir = "{tmp_path / "out"}"\n')
    args = ["run", str(config), "-q", *TINY, "client.lr=0.05", "algorithm.name=ditto", "algorithm.lam=1e6", f"executor={executor}"]
    assert main(args) == DIVERGED_EXIT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("chillfl: diverged: round 1, client ") and any(f"the loss of DittoClient's training 2 is {v} " in err[-1] for v in ("nan", "inf")), err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ditto.failed"]
