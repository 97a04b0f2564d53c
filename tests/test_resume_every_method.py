"""Every registered method under every executor: stopped and resumed, a run is bitwise the uninterrupted run.

The cases are generated from the registries (``resume_cases.py``: every algorithm, temperature policy,
soft-label method and prototype method), each under the sequential, vectorised and process-pool
executors here; under Ray in ``tests/private_net/test_ray.py``. ``tests/test_resume.py`` kills real
subprocesses for four families; this module covers the whole registry.

The process-pool cases' runs borrow the worker processes of one :class:`~chillfl.executors.pools.WorkerPools`
(:func:`pools`), as a sweep's runs do: each run builds its own process executor, but the workers (seconds
each to start: they import torch) start once for the module. A worker keeps nothing of a run but its
template, objective and client side, unpickled again for every executor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from chillfl.storage.checkpoint import read_state
from chillfl.executors.pools import WorkerPools
from chillfl.executors.processes import WorkerPool
from resume_cases import COMBINED, NEEDS, check_resume, methods, registered

pytestmark = pytest.mark.slow  # every method x executor stopped and resumed: minutes; `pytest -m "not slow"` leaves it out

EXECUTORS = ("sequential", "vectorized", "processes")
"""Every executor that runs in this process; Ray's resume cases are in ``tests/private_net/test_ray.py``."""

CASES = [pytest.param(m, ex, 1 + i % 2, id=f"{m}-{ex}") for i, m in enumerate(methods()) for ex in EXECUTORS]
CASES += [pytest.param(m, ex, 3, id=f"{m}-{ex}") for m in COMBINED for ex in EXECUTORS]  # 4 rounds, cut after round 3


@pytest.fixture(scope="module")
def pools() -> Iterator[WorkerPools]:
    """The worker processes every process-pool case's runs borrow, as a sweep's runs do (``chillfl compare``)."""
    with WorkerPools() as shared:
        yield shared


def test_every_registered_method_has_a_case() -> None:
    ids = {p.values[0] for p in CASES} - set(COMBINED)
    assert registered() <= ids
    assert set(NEEDS) <= ids  # no stale entry
    assert {tuple(p.values[:2]) for p in CASES} == {(m, ex) for m in ids | set(COMBINED) for ex in EXECUTORS}


@pytest.mark.parametrize(("method", "executor", "stop"), CASES)
def test_stopped_and_resumed_is_bitwise_the_uninterrupted_run(
    method: str, executor: str, stop: int, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds_on_workers: list[int] = []
    lent: WorkerPools | None = None
    if executor == "processes":  # every run builds its executor as usual, on the module's worker processes
        lent = request.getfixturevalue("pools")
        send = WorkerPool.round

        def counted(self: WorkerPool, items: Any, decode: Any) -> Any:
            rounds_on_workers.append(len(items))
            return send(self, items, decode)

        monkeypatch.setattr(WorkerPool, "round", counted)
    started = lent.started if lent is not None else 0
    check_resume(method, executor, stop, tmp_path, monkeypatch, pools=lent)
    if lent is not None:  # the 3 + (stop + 1) + (3 - stop) rounds (4 + 4 + 1: COMBINED) trained on the workers
        assert len(rounds_on_workers) >= 7 and all(rounds_on_workers), rounds_on_workers
        assert lent.started - started <= 1  # the three runs shared one pool (a new one only for another worker count)


def test_a_checkpoint_gives_each_tensor_its_layout_back(tmp_path: Path) -> None:
    """FedProto keeps the vectorised executor's client weights, which come back transposed; the same values in
    another layout evaluate to other last bits (a matmul adds up in another order), so a resumed run needs the
    layout back: FedProto under ``vectorized`` differed in ``global_loss`` after a resume (issue 27)."""
    from chillfl.storage.checkpoint import write_state

    w = torch.randn(5, 3).t()  # dense, not contiguous: strides (1, 3)
    permuted = torch.randn(2, 3, 4).permute(2, 0, 1)
    gappy = torch.randn(4, 6)[:, ::2]  # not dense: comes back contiguous, as before
    write_state(tmp_path / "state.safetensors", {"w": w, "p": permuted, "g": gappy, "c": torch.arange(6.0).reshape(2, 3)})
    back = read_state(tmp_path / "state.safetensors")
    for key, t in (("w", w), ("p", permuted)):
        assert torch.equal(back[key], t) and back[key].stride() == t.stride(), key
    assert torch.equal(back["g"], gappy) and back["g"].is_contiguous() and back["c"].is_contiguous()
