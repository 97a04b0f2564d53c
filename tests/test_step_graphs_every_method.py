"""Every registered method with recorded steps (``cuda_graphs = true``) gives the records it gives without them.

A recorded step replays the ops it recorded on the tensors it recorded (a CUDA
graph's semantics; here :class:`~chillfl.executors.step_graphs.TapeRecorder`, on
the CPU): a method whose step read a tensor that a later step replaces, or a
number that changes between steps, would replay stale values and its records
would differ. The cases are the registry's (``resume_cases.methods()``), under the
vectorised executor's accelerator policy, as on a GPU; 2 epochs a round, so that
every round has steps replayed after its capture.
"""

from __future__ import annotations

from typing import Any

import pytest

from chillfl import runner
from chillfl.config import load_config
from chillfl.executors.step_graphs import TapeRecorder
from chillfl.executors.vectorized import VectorizedExecutor
from resume_cases import COMBINED, TINY, methods, overrides

pytestmark = pytest.mark.slow  # every method, twice: a minute or two; `pytest -m "not slow"` leaves it out

NOT_RECORDED = {
    "algorithm.perfedavg": "each meta-step trains as a chunk of one step: with no replay to follow, a capture would only cost",
}
"""Methods whose steps are (rightly) never recorded, and why; every other method must record and replay."""


@pytest.mark.parametrize("method", [pytest.param(m, id=m) for m in [*methods(), *COMBINED]])
def test_every_method_replays_its_recorded_steps_bitwise(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = TapeRecorder()
    init = VectorizedExecutor.__init__

    def with_tape(self: VectorizedExecutor, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.step_recorder = lambda _device: recorder

    monkeypatch.setattr(VectorizedExecutor, "resident", lambda self, device: True)  # the accelerator policy, as on a GPU
    monkeypatch.setattr(VectorizedExecutor, "__init__", with_tape)
    monkeypatch.setattr(runner, "_plots", lambda *args: None)

    def records(graphs: bool) -> list[dict[str, Any]]:
        over = {**TINY, "executor": "vectorized", "client.epochs": 2, "cuda_graphs": graphs}
        cfg = load_config(None, over).with_overrides(overrides(method))
        return runner.run_experiment(cfg, write=False, progress=False).records

    eager = records(False)
    assert recorder.captures == 0
    replayed = records(True)
    assert replayed == eager
    if method in NOT_RECORDED:
        assert recorder.captures == 0, NOT_RECORDED[method]
        return
    assert recorder.captures > 0  # every other method's resident SGD steps at a constant rate are recorded
    assert recorder.replays >= recorder.captures  # a capture is made only where a replay of it follows

