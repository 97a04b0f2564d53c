"""A comparison holds no finished run's trained models but those it returns (report-longrun finding 3).

``Sweep.run`` kept every finished run's ``RunOutput`` whole until the table was written: its global model and, with
``checkpoint.client_models = true``, every client's, though the sweep reads only records and summaries. A written
run's models are now dropped once it has finished; the runs :attr:`CompareResult.outputs` returns get theirs back
from their folders at the end, on the device they were on, equal to what the run returned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl import runner
from chillfl.config import config_from_dict
from chillfl.report.compare import CompareResult
from chillfl.runner import RunOutput
from chillfl.sweeps import run as sweeps_run
from chillfl.sweeps.plan import CompareOptions
from chillfl.sweeps.run import Sweep, run_compare

CONFIG: dict[str, Any] = {
    "name": "mem", "algorithm": {"name": "fedper"}, "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]}, "federation": {"num_clients": 4, "rounds": 2},
    "eval": {"client_split_size": 20, "validation": 0.2}, "checkpoint": {"client_models": True},
}
OPTIONS = CompareOptions(seeds=[0], tune={"client.lr": [0.01, 0.1]})
"""Two tuning points of one variant at one seed: one run is returned (the chosen point), the other is not."""


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[Sweep]:
    """The comparison's :class:`Sweep` (its results, every run's), kept for the test; no figures drawn."""
    kept: list[Sweep] = []
    real = sweeps_run.run_points

    def run_points(*args: Any, **kwargs: Any) -> Sweep:
        kept.append(real(*args, **kwargs))
        return kept[-1]

    monkeypatch.setattr(sweeps_run, "run_points", run_points)
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    monkeypatch.setattr(sweeps_run, "write_compare_figures", lambda *args, **kwargs: None)
    monkeypatch.setattr(sweeps_run, "write_band_figures", lambda *args, **kwargs: None, raising=False)
    return kept


def compare(out: Path, write: bool) -> CompareResult:
    return run_compare(config_from_dict({**CONFIG, "out_dir": str(out)}), [], progress=False, write=write, options=OPTIONS)


def same(a: dict[str, torch.Tensor] | None, b: dict[str, torch.Tensor] | None) -> bool:
    """Equal names in the same order, and tensors equal in value, dtype and device."""
    assert a is not None and b is not None
    return list(a) == list(b) and all(a[k].dtype == b[k].dtype and a[k].device == b[k].device and torch.equal(a[k], b[k]) for k in a)


def test_only_the_returned_runs_hold_their_models(tmp_path: Path, sweeps: list[Sweep]) -> None:
    """The run not chosen holds no model once the comparison ends; the chosen one's models are what a comparison that
    wrote nothing (its models never dropped) returns, bit for bit, global and clients'."""
    written = compare(tmp_path / "w", write=True)
    (sweep,) = sweeps
    results = [out for out in sweep.results.values() if out is not None]
    returned = list(written.outputs.values())
    assert len(results) == 2 and len(returned) == 1
    (other,) = [out for out in results if all(out is not r for r in returned)]
    assert other.model_state is None and other.client_states == {}
    assert other.records and other.summary  # what the table needs stays

    kept = compare(tmp_path / "m", write=False)  # nothing written: nothing dropped (the models are nowhere else)
    assert list(kept.outputs) == list(written.outputs)
    for label, out in written.outputs.items():
        reference: RunOutput = kept.outputs[label]
        assert same(out.model_state, reference.model_state)
        assert list(out.client_states) == list(reference.client_states) and len(out.client_states) == 4
        assert all(same(out.client_states[c], reference.client_states[c]) for c in out.client_states)
    assert all(out.model_state is not None for out in sweeps[1].results.values() if out is not None)


def test_the_returned_runs_name_their_folders_in_the_finished_comparison(tmp_path: Path, sweeps: list[Sweep]) -> None:
    """``outputs[label].folder`` named the run's folder inside ``NAME-compare.partial``, which the comparison's rename
    removed: a caller reading the chosen run's files from it found nothing."""
    written = compare(tmp_path / "w", write=True)
    assert written.folder is not None and not written.folder.name.endswith(".partial")
    for out in written.outputs.values():
        assert out.folder is not None and out.folder.parent == written.folder
        assert (out.folder / "metrics.jsonl").is_file() and (out.folder / "model.safetensors").is_file()
