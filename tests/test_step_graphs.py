"""Recorded and replayed steps (``cuda_graphs``), exercised on the CPU with the tape stand-in recorder.

:class:`TapeRecorder` replays the recorded step's aten ops on the tensors
they read and wrote, as a CUDA graph replays its kernels on fixed memory: a
step that read a tensor that is not one of its static inputs, or baked a
per-step number into an op, is replayed wrongly here too. The CUDA graph itself (same
bits as eager steps on the GPU, fewer launches) is checked in tests/test_cuda.py.
"""

from __future__ import annotations

import logging
from typing import Callable

import pytest
import torch
from torch import nn

from chillfl.executors.sequential import ClientJob
from chillfl.executors.step_graphs import GraphSlots, StepGraphs, TapeRecorder, tree_key
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.training.local import LocalOutcome, LocalSpec, model_state
from chillfl.training.schedule import LrSchedule, Optimizer


def test_each_shape_warms_up_then_is_captured_once_and_replayed_on_fresh_inputs() -> None:
    recorder = TapeRecorder()
    graphs = StepGraphs(recorder, warmup=2)
    total = torch.zeros(3)
    for i in range(6):  # 2 warm-up steps, 1 recorded (the tape runs it), 3 replays
        graphs((torch.full((3,), float(i)),), lambda xs: total.add_(xs[0]))
    assert total.tolist() == [15.0] * 3  # 0+1+2+3+4+5: every step's own input, also in the replays
    assert (recorder.captures, recorder.replays) == (1, 3)
    graphs((torch.ones(2),), lambda xs: None)  # another shape: its own warm-up
    assert recorder.captures == 1


def test_a_shape_warms_up_once_per_run_not_once_per_chunk() -> None:
    seen: dict = {}
    recorder = TapeRecorder()
    total = torch.zeros(())
    for _chunk in range(2):
        graphs = StepGraphs(recorder, warmup=2, seen=seen)  # the executor shares ``seen`` between its chunks
        for _ in range(3):
            graphs((torch.tensor(1.0),), lambda xs: total.add_(xs[0]))
    # chunk 1: 2 warm-up steps, 1 recorded; chunk 2: recorded at once, 2 replays
    assert (recorder.captures, recorder.replays, float(total)) == (2, 2, 6.0)


def test_a_shapes_last_step_in_a_chunk_is_not_captured() -> None:
    """A capture pays off only through replays: with no later step of its shape (``again=False``) the step runs eagerly."""
    recorder = TapeRecorder()
    total = torch.zeros(())
    for _chunk in range(3):  # chunks of one step (Per-FedAvg's meta-steps): never captured
        StepGraphs(recorder, warmup=0)((torch.tensor(1.0),), lambda xs: total.add_(xs[0]), again=False)
    assert (recorder.captures, float(total)) == (0, 3.0)
    graphs = StepGraphs(recorder, warmup=0)
    for again in (True, True, False):  # a chunk of three: captured at its first, replayed at the other two
        graphs((torch.tensor(1.0),), lambda xs: total.add_(xs[0]), again=again)
    assert (recorder.captures, recorder.replays, float(total)) == (1, 2, 6.0)


def test_a_replay_repeats_the_recorded_ops_on_the_recorded_tensors() -> None:
    """A CUDA graph's semantics: a tensor the step read besides its inputs is the captured step's, in every replay."""
    graphs = StepGraphs(TapeRecorder(), warmup=0)
    total = torch.zeros(())
    scales = [torch.tensor(1.0), torch.tensor(10.0), torch.tensor(100.0)]
    for i in range(3):
        graphs((torch.tensor(float(i + 1)),), lambda xs, scale=scales[i]: total.add_(xs[0] * scale))
    assert float(total) == 6.0  # 1*1 + 2*1 + 3*1: the scale of the recorded step, not 10 and 100


def test_a_capture_that_fails_runs_that_step_and_the_rest_eagerly(caplog: pytest.LogCaptureFixture) -> None:
    class Refuses(TapeRecorder):
        def capture(self, run: Callable[[], None]) -> Callable[[], None]:
            raise RuntimeError("operation not permitted when stream is capturing")

    graphs = StepGraphs(Refuses(), warmup=1)
    total = torch.zeros(())
    with caplog.at_level(logging.WARNING, logger="chillfl.executors.step_graphs"):
        for i in range(4):
            graphs((torch.tensor(float(i)),), lambda xs: total.add_(xs[0]))
    assert float(total) == 6.0  # 0+1+2+3: no step lost or repeated
    assert graphs.failed is not None and "stream is capturing" in graphs.failed
    assert sum("could not be captured" in r.message for r in caplog.records) == 1


SIZES = [40, 40, 40, 40, 24, 20]  # batches of 8; client 5 ends each epoch on 4 rows; clients 4 and 5 stop after 9 steps


def _model(width: int = 16) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, width), nn.ReLU(), nn.Linear(width, 5))


def _jobs(model: nn.Module, sizes: list[int]) -> list[ClientJob]:
    start = model_state(model)
    g = torch.Generator().manual_seed(3)
    jobs = []
    for c, n in enumerate(sizes):
        x, y = torch.randn(n, 1, 6, 6, generator=g), torch.randint(0, 5, (n,), generator=g)
        jobs.append(ClientJob(c, start, x, y, 0.05 * (1 + c % 2), 1.0 / (1 + c), {}, 100 + c))
    return jobs


def _run(spec: LocalSpec, jobs: list[ClientJob], model: nn.Module, recorder: TapeRecorder | None) -> tuple[list[LocalOutcome], VectorizedExecutor]:
    ex = VectorizedExecutor(model, spec, accelerator=True, free_memory=lambda _d: 1 << 40, step_recorder=None if recorder is None else (lambda _d: recorder))
    out = ex.run(jobs)
    assert ex.fallback_reason is None
    return out, ex


def _assert_bitwise(a: list[LocalOutcome], b: list[LocalOutcome]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.num_steps == y.num_steps and x.mean_loss == y.mean_loss
        assert all(torch.equal(x.params[k], y.params[k]) for k in x.params), [k for k in x.params if not torch.equal(x.params[k], y.params[k])]


@pytest.mark.parametrize("momentum,clip", [(0.0, 0.0), (0.9, 1.0)], ids=["sgd", "momentum-clip"])
def test_replayed_steps_equal_eager_steps_bitwise_with_batchnorm_and_short_batches(momentum: float, clip: float) -> None:
    """Every client's step replayed from the captured one: the same bits as running each step (the same kernels on the CPU)."""
    model = _model()
    optim = Optimizer(clip_norm=clip) if clip else Optimizer()
    spec = LocalSpec(epochs=3, batch_size=8, momentum=momentum, weight_decay=1e-3, cuda_graphs=True, optim=optim)
    jobs = _jobs(model, SIZES)
    recorder = TapeRecorder()
    graphed, ex = _run(spec, jobs, model, recorder)
    assert ex.graphed(jobs[0].x.device)
    eager, _ = _run(spec, jobs, model, None)  # no recorder on the CPU: steps run as they are
    _assert_bitwise(eager, graphed)
    # all six clients step on 8 rows at steps 0,1, 3,4, 6,7 (client 5's steps 2, 5, 8 are 4 rows: two eager groups);
    # steps 9-14 are clients 0-3's alone (eager). 6 all-client steps: 2 warm-up, 1 recorded, 3 replayed
    assert (recorder.captures, recorder.replays) == (1, 3)
    assert [o.num_steps for o in graphed] == [15, 15, 15, 15, 9, 9]
    assert not torch.equal(graphed[0].params["1.running_mean"], jobs[0].start["1.running_mean"])  # batch norm really ran in the replays


@pytest.mark.parametrize("conv", ["gemm", "nhwc", "loop"])
def test_replayed_steps_with_rewritten_convolutions_equal_eager_steps_bitwise(conv: str) -> None:
    """``batched_conv`` rewrites the step's convolutions (``nhwc`` / ``loop``: custom autograd functions with vmap rules): what the
    recorder captures from them replays to the eager bits too."""
    model = _model()
    spec = LocalSpec(epochs=3, batch_size=8, momentum=0.9, cuda_graphs=True, batched_conv=conv)
    jobs = _jobs(model, SIZES)
    recorder = TapeRecorder()
    graphed, _ = _run(spec, jobs, model, recorder)
    eager, _ = _run(spec, jobs, model, None)
    _assert_bitwise(eager, graphed)
    assert (recorder.captures, recorder.replays) == (1, 3)


def test_steps_whose_inputs_change_from_step_to_step_are_not_recorded() -> None:
    model = _model()
    jobs = _jobs(model, SIZES)
    for optim in (Optimizer(name="adam"), Optimizer(step_schedule=LrSchedule(name="cosine"))):  # Adam's bias correction; a scheduled rate
        spec = LocalSpec(epochs=1, batch_size=8, cuda_graphs=True, optim=optim)
        recorder = TapeRecorder()
        _, ex = _run(spec, jobs, model, recorder)
        assert not ex.graphed(jobs[0].x.device) and recorder.captures == 0
    off = LocalSpec(epochs=1, batch_size=8)
    assert not VectorizedExecutor(model, off, accelerator=True, step_recorder=lambda _d: TapeRecorder()).graphed(torch.device("cpu"))
    cpu_policy = LocalSpec(epochs=1, batch_size=8, cuda_graphs=True)
    assert not VectorizedExecutor(model, cpu_policy, accelerator=False, step_recorder=lambda _d: TapeRecorder()).graphed(torch.device("cpu"))
    assert not VectorizedExecutor(model, cpu_policy, accelerator=True).graphed(torch.device("cpu"))  # no CUDA, no recorder


def test_recorded_steps_do_not_defer_large_linear_updates() -> None:
    """Deferred updates (:class:`DeferredOuter`) grow their buffers every step: a recorded step could not replay them."""
    model = _model(width=512)  # Linear(144 -> 512): 73,728 >= 65,536 weights a client, plain SGD: deferred without graphs
    jobs = _jobs(model, [64] * 4)
    plain = LocalSpec(epochs=1, batch_size=4)
    _, ex = _run(plain, jobs, model, None)
    assert ex._deferred  # the case is one that defers
    _, ex = _run(LocalSpec(epochs=1, batch_size=4, cuda_graphs=True), jobs, model, TapeRecorder())
    assert ex._deferred == frozenset()


SCARLET = {"distillation": {"method": "scarlet", "public_size": 120, "subset_size": 40, "cache_duration": 2}}


@pytest.mark.parametrize("extra", [{}, SCARLET], ids=["fedavg-bn", "scarlet-bn"])
def test_whole_runs_with_recorded_steps_equal_runs_without_bitwise(monkeypatch: pytest.MonkeyPatch, extra: dict) -> None:
    """``cuda_graphs = true`` through the config, every stage (SCARLET's distillation too), as on a GPU: the same records."""
    from chillfl.config import load_config
    from chillfl.runner import run_experiment

    from test_vectorized_accelerator import E2E

    recorder = TapeRecorder()
    init = VectorizedExecutor.__init__

    def with_tape(self: VectorizedExecutor, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        self.step_recorder = lambda _device: recorder

    monkeypatch.setattr(VectorizedExecutor, "resident", lambda self, device: True)  # the accelerator policy, as on a GPU
    monkeypatch.setattr(VectorizedExecutor, "__init__", with_tape)

    def run(graphs: bool) -> list[dict]:
        config = load_config(None, {**E2E, **extra, "executor": "vectorized", "cuda_graphs": graphs, "client.epochs": 3})
        return run_experiment(config, write=False, progress=False).records

    without = run(False)
    assert recorder.captures == 0
    with_graphs = run(True)
    assert recorder.replays > 0
    assert with_graphs == without
    assert recorder.captures == 1  # once a run: round 2's chunk replays round 1's graph on its own values (GraphSlots)


def test_a_slot_key_is_the_structure_the_layouts_and_the_plain_values_by_their_bits() -> None:
    t = torch.zeros(2, 3)
    assert tree_key((t, 0.5, "x")) == tree_key((torch.ones(2, 3), 0.5, "x"))  # values of tensors are not baked in
    assert tree_key((t, 0.5)) != tree_key((t, 0.25))  # numbers are
    assert tree_key((t, 0.0)) != tree_key((t, -0.0))  # to the bit
    assert tree_key((t, 0.5)) != tree_key((t.t(), 0.5))  # strides
    assert tree_key((t, 0.5)) != tree_key(([t], 0.5))  # structure
    assert tree_key((t, object())) is None  # an object a replay could neither refresh nor compare
    assert tree_key((torch.zeros(3).expand(2, 3),)) is None  # a broadcast view cannot be copied into


def test_a_slot_is_reused_by_the_next_chunk_of_its_structure_with_the_new_values_and_owns_its_tensors() -> None:
    slots = GraphSlots(keep=2)
    graphs = StepGraphs(TapeRecorder())
    first = (torch.tensor([1.0, 2.0]), 0.5)
    a = slots.take(first, lambda: graphs)
    assert a is not None and a.graphs is graphs
    assert torch.equal(a.tree[0], first[0]) and a.tree[0] is not first[0]  # a copy: the caller's tensor (the global model?) is never written
    a.tree[0].add_(100.0)
    assert first[0].tolist() == [1.0, 2.0]
    slots.give(a)
    b = slots.take((torch.tensor([3.0, 4.0]), 0.5), lambda: StepGraphs(TapeRecorder()))
    assert b is a and b.tree[0].tolist() == [3.0, 4.0]  # the same slot and graphs, holding the new values
    assert slots.take((torch.tensor([3.0, 4.0]), 0.5), lambda: graphs) is not a  # held by a chunk: another gets its own
    slots.give(b)
    other = slots.take((torch.tensor([1.0, 2.0]), 0.25), lambda: graphs)  # another local rate: another slot
    assert other is not None and other is not a
    slots.give(other)
    third = slots.take((torch.zeros(3), 0.5), lambda: graphs)
    assert third is not None
    slots.give(third)  # three structures, keep=2: the least recently used (the first) is dropped with its graphs
    assert slots.take((torch.tensor([5.0, 6.0]), 0.5), lambda: graphs) is not a
    assert slots.take((torch.tensor([1.0]), object()), lambda: graphs) is None
