"""docs/extending.md's FedDyn (a user aggregator with a client half, client state and a loss term, named by
import path) under ``executor = "ray"`` with a local Ray, run as the page says: from the folder that holds
``my_methods.py`` (Ray puts the driver's working directory on its workers' path). The workers import the
user's module, and the metrics are bitwise the sequential run's. A user's term that reads a context key the
downlink lacks is, under Ray too, the run's one ConfigError (tests/test_extend.py checks the other executors)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("ray")

import chillfl  # noqa: E402
from chillfl.config import load_config  # noqa: E402
from chillfl.extend import ContextError, FedAvg  # noqa: E402
from chillfl.runner import run_experiment  # noqa: E402

DOCS_TEST = Path(__file__).resolve().parents[1] / "test_extending_docs.py"


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    sys.path.insert(0, str(DOCS_TEST.parent))
    try:
        from test_extending_docs import files
    finally:
        sys.path.remove(str(DOCS_TEST.parent))
    (tmp_path / "my_methods.py").write_text(files()["my_methods.py"], encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))  # PYTHONPATH=. in the page
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("my_methods", None)
    yield tmp_path
    sys.modules.pop("my_methods", None)


def test_user_feddyn_by_import_path_under_a_local_ray_equals_sequential(user_module: Path) -> None:
    base = {"dataset.name": "digits", "model.name": "mlp", "device": "cpu", "threads": 1, "seed": 2, "federation.num_clients": 4,
            "federation.clients_per_round": 2, "federation.rounds": 2, "client.batch_size": 32, "client.lr": 0.05,
            "algorithm": {"name": "my_methods:FEDDYN", "alpha": 0.01}, "temperature": {"policy": "my_methods:LinearWarmup", "rounds": 2}}
    records = {ex: run_experiment(load_config(None, {**base, "executor": ex}), write=False, progress=False).records for ex in ("sequential", "ray")}
    assert [r["global_loss"] for r in records["ray"]] == [r["global_loss"] for r in records["sequential"]]
    assert [r["train_loss"] for r in records["ray"]] == [r["train_loss"] for r in records["sequential"]]


SHRINK = '''
class Shrink:
    """lam * sum ||w||^2, lam read from the downlink's context (FedAvg sends none)."""

    reads = ("shrink",)

    def __call__(self, params, context):
        return context["shrink"] * sum((p ** 2).sum() for p in params.values())
'''


def test_a_missing_context_key_a_ray_worker_finds_is_the_runs_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ray worker's ContextError comes back as itself (a ConfigError: one line, exit 2), not as a WorkerError (exit 1)."""
    (tmp_path / "ray_user_term.py").write_text(SHRINK, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the workers import the term's module from the driver's working directory
    import ray_user_term

    config = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "device": "cpu", "executor": "ray",
              "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1}, "client": {"lr": 0.05, "batch_size": 32}}
    try:
        with pytest.raises(ContextError, match=r"^terms\[0\]: Shrink reads context key\(s\) 'shrink', which client \d+'s context lacks") as err:
            chillfl.run(config=config, aggregator=FedAvg(), terms=[ray_user_term.Shrink()], write=False, progress=False)
    finally:
        sys.modules.pop("ray_user_term", None)
    assert err.value.field == "terms[0]"  # the field that put the term in the run (chillfl.run's terms=[...]), as under the other executors
