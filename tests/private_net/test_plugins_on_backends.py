"""Plugins by import path, Local-only's kept optimiser state and APFL's own alpha step (``tests/backend_plugin_cases.py``)
on a local Ray (``executor = "ray"``) and under Flower's simulation engine: the sequential executor's metrics, bit for bit
(docs/ray.md, docs/flower.md).

The user's modules are in a folder the test puts on ``sys.path``, not in the working directory: a local Ray's workers
import them from the driver's import path (:func:`chillfl.executors.ray_executor.adopt_import_path`), as the
``processes`` executor's workers and Flower's simulation actors do. Ray: one local Ray for every case (its actors
start once), each case run, then stopped after round 1 and resumed there (``chillfl resume``): bitwise the sequential
run that never stopped, the clients' kept optimiser states and alphas carried over the checkpoint. Flower: two
simulations (a Flower run has no resume) on one Ray and one pool of Flower's actors (``shared_actors``), started once
the user's folder is on ``sys.path``: every part by import path in one, Local-only's Adam state (moments and step
count) kept on the SuperNodes in the other, with the personal models the nodes send back.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

ray = pytest.importorskip("ray")

from backend_plugin_cases import CASES, DEFAULTS, MODULES, config, write_modules  # noqa: E402
from chillfl.executors.pools import WorkerPools  # noqa: E402
from chillfl.runner import CHECKPOINT, CLIENT_MODELS, resume_experiment, run_experiment  # noqa: E402
from chillfl.storage.checkpoint import read_state  # noqa: E402
from resume_cases import Crash, _CrashIn  # noqa: E402
from shared_flower import SharedActors, shared_actors_fixture  # noqa: E402,F401  (the fixture shared_actors)

RESUMED = ["local-kept-momentum", "local-kept-adam", "apfl-alpha-sgd"]
"""Cut after round 1: each run's clients 3 of 4 a round, so some client trains on both sides of the checkpoint."""


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user's modules in a folder on ``sys.path`` (not the working directory, which is elsewhere)."""
    folder = tmp_path / "user"
    folder.mkdir()
    write_modules(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.chdir(tmp_path)
    yield folder
    for name in MODULES:
        sys.modules.pop(name, None)


def test_on_a_local_ray_equal_sequential_and_resume_bitwise(user_modules: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl import runner

    monkeypatch.setattr(runner, "_plots", lambda *args: None)  # figures are not results
    monkeypatch.setenv("RAY_TMPDIR", "/tmp")  # short: Ray's socket paths
    keep = {"checkpoint.client_models": True}
    with WorkerPools() as pools:  # a local Ray, started once for every run here
        for case in CASES:
            seq = run_experiment(config(case, tmp_path / "seq", **keep), progress=False)
            assert seq.folder is not None
            got = run_experiment(config(case, tmp_path / "ray", "ray", **keep), progress=False, pools=pools)
            assert got.records == seq.records, case  # every metric, floats compared exactly
            if case in DEFAULTS:  # the option acts: the run is not the one without it
                assert run_experiment(config(case, tmp_path / "off", **DEFAULTS[case]), write=False, progress=False).records != seq.records, case
            if case not in RESUMED:
                continue
            with pytest.raises(Crash):
                run_experiment(config(case, tmp_path / "cut", "ray", **keep, **{"checkpoint.every": 1}), progress=False, callbacks=[_CrashIn(2)], pools=pools)
            partial = tmp_path / "cut" / f"{case}.partial"
            assert read_state(partial / CHECKPOINT)["round"] == 1
            resumed = resume_experiment(partial, progress=False, pools=pools).folder
            assert resumed is not None
            for name in ("metrics.jsonl", CLIENT_MODELS):
                assert (resumed / name).read_bytes() == (seq.folder / name).read_bytes(), (case, name)
        assert pools.started == 1  # every Ray run on the one set of actors


FLOWER_CASES = ["plugins", "local-kept-adam"]


@pytest.fixture(scope="class")
def class_user_modules(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """:func:`user_modules` for a class: the folder is on ``sys.path`` before the class's shared Ray starts, whose
    actors take the driver's import path then (Flower's Ray backend), as a user's simulation's actors do."""
    pytest.importorskip("flwr")
    root = tmp_path_factory.mktemp("flower-user")
    folder = root / "user"
    folder.mkdir()
    write_modules(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        patch.chdir(root)
        yield folder
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.fixture(scope="class")
def flower_actors(class_user_modules: Path, shared_actors: SharedActors) -> SharedActors:
    """The shared Ray and actors (:mod:`shared_flower`), started once the user's folder is on ``sys.path``."""
    return shared_actors


class TestUnderFlowersSimulation:
    """Both cases on one Ray and one pool of Flower's actors, each its own simulation (a Ray start, its actors' imports
    and its stop were most of a case's time); the first case's actors import the user's modules from the driver's path."""

    @pytest.mark.parametrize("case", FLOWER_CASES)
    def test_under_flowers_simulation_equals_sequential(self, case: str, flower_actors: SharedActors, tmp_path: Path) -> None:
        from chillfl.flower import run_simulation

        keep = {"checkpoint.client_models": True}
        seq = run_experiment(config(case, tmp_path / "seq", **keep), progress=False)
        lent, jobs = flower_actors.lent, flower_actors.jobs
        out = run_simulation(config(case, tmp_path / "flower", **keep), num_supernodes=2)  # clients 0, 2 on one node, 1, 3 on the other
        assert flower_actors.lent == lent + 1 and flower_actors.jobs > jobs  # its clients ran on the shared actors
        assert out.records == seq.records  # every metric, floats compared exactly
        assert seq.folder is not None
        if (seq.folder / CLIENT_MODELS).exists():  # Local-only's models, from the states the nodes kept
            assert (Path(out.folder) / CLIENT_MODELS).read_bytes() == (seq.folder / CLIENT_MODELS).read_bytes()
        assert (case == "plugins") != (seq.folder / CLIENT_MODELS).exists()
