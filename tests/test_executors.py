"""Executors: vectorised and process-pool training equal the sequential reference."""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest
import torch
from torch import nn

from chillfl.config import load_config
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.protocols.parameters import ParameterClient
from chillfl.executors.parallel import ExecutorSpec, VECTORIZE_MAX_PARAMS, choose_executor, make_parallel_executor, vectorized_workers
from chillfl.executors.processes import ProcessExecutor, WorkerError, WorkerPool, _Results, pack_tree
from chillfl.runner import run_experiment
from chillfl.executors.vectorized import NotVectorizable, VectorizedExecutor, chunk_size_for, dim_order, stack, stack_contexts
from chillfl.errors import ConfigError
from chillfl.training.local import LocalOutcome, LocalSpec, model_state

from float_paths import assert_records_close
from lent_pools import pools


class Pull:
    """Test term: sum(w * c) over the keys in context['c'] (gradient c), times context['scale']."""

    reads = ("c", "scale")

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        c = context["c"]
        return context["scale"] * sum((params[k] * c[k]).sum() for k in c)


class Prox:
    """Test term: mu/2 ||w - anchor||^2 (FedProx's shape), anchor shared by every client."""

    reads = ("anchor", "mu")

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        anchor = context["anchor"]
        return 0.5 * context["mu"] * sum(((params[k] - anchor[k]) ** 2).sum() for k in anchor)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 5))


def _cnn_bn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 5))


def _jobs(model: nn.Module, sizes: list[int], shape: tuple[int, ...], contexts: list[dict[str, Any]] | None = None) -> list[ClientJob]:
    """Clients with unequal data sizes, per-client lr, temperature and seed."""
    start = model_state(model)
    g = torch.Generator().manual_seed(123)
    jobs = []
    for c, n in enumerate(sizes):
        x = torch.randn(n, *shape, generator=g)
        y = torch.randint(0, 5, (n,), generator=g)
        ctx = contexts[c] if contexts else {}
        jobs.append(ClientJob(c, start, x, y, 0.05 * (1 + c / 4), 1.0 / (1 + c), ctx, 1000 + c))
    return jobs


def _assert_close(ref: list[LocalOutcome], got: list[LocalOutcome], atol: float = 1e-5) -> None:
    assert len(ref) == len(got)
    for a, b in zip(ref, got):
        assert a.num_steps == b.num_steps
        assert list(a.params) == list(b.params)
        assert math.isclose(a.mean_loss, b.mean_loss, rel_tol=1e-5, abs_tol=1e-6)
        for k in a.params:
            assert a.params[k].dtype == b.params[k].dtype
            torch.testing.assert_close(b.params[k], a.params[k], atol=atol, rtol=1e-5)



def one_thread_reference(model: nn.Module, spec: LocalSpec, jobs: list[Any]) -> list[Any]:
    """The sequential executor's outcomes at one thread, the workers' count: bitwise equality needs the same."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return SequentialExecutor(model, spec).run(jobs)
    finally:
        torch.set_num_threads(threads)


def _assert_identical(ref: list[LocalOutcome], got: list[LocalOutcome]) -> None:
    for a, b in zip(ref, got, strict=True):
        assert (a.num_steps, a.mean_loss, list(a.params)) == (b.num_steps, b.mean_loss, list(b.params))
        for k in a.params:
            assert torch.equal(a.params[k], b.params[k]), k


# sizes: unequal, one smaller than a batch, one empty, one a multiple of the batch
SIZES = [37, 20, 5, 0, 16, 29]


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_vectorized_mlp_unequal_sizes_momentum_weight_decay(chunk_size: int | None) -> None:
    model = _mlp()
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.9, weight_decay=1e-3)
    jobs = _jobs(model, SIZES, (3, 4))
    ref = SequentialExecutor(model, spec).run(jobs)
    got = VectorizedExecutor(model, spec, chunk_size=chunk_size).run(jobs)
    _assert_close(ref, got)
    assert [o.num_steps for o in got] == [10, 6, 2, 0, 4, 8]  # 2 epochs * ceil(n / 8)
    for k, v in got[3].params.items():  # the empty client is untouched
        assert torch.equal(v, jobs[3].start[k])


def test_vectorized_cnn_with_batchnorm_buffers() -> None:
    model = _cnn_bn()
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.5)
    jobs = _jobs(model, SIZES, (1, 6, 6))
    ref = SequentialExecutor(model, spec).run(jobs)
    got = VectorizedExecutor(model, spec).run(jobs)
    _assert_close(ref, got)
    # running statistics moved, and the step counter matches exactly
    assert not torch.equal(got[0].params["1.running_mean"], jobs[0].start["1.running_mean"])
    assert [int(o.params["1.num_batches_tracked"]) for o in got] == [10, 6, 2, 0, 4, 8]


def test_vectorized_per_client_and_shared_context() -> None:
    model = _mlp()
    spec = LocalSpec(epochs=1, batch_size=8, momentum=0.9, terms=(Pull(), Prox()))
    anchor = {k: v + 0.1 for k, v in model_state(model).items()}  # the same object for every client
    g = torch.Generator().manual_seed(5)
    contexts = [
        {"c": {"3.weight": torch.randn(5, 8, generator=g)}, "scale": 0.1 * (i + 1), "anchor": anchor, "mu": 0.01}
        for i in range(len(SIZES))
    ]
    jobs = _jobs(model, SIZES, (3, 4), contexts)
    _assert_close(SequentialExecutor(model, spec).run(jobs), VectorizedExecutor(model, spec).run(jobs))


def test_vectorized_hand_computed_steps() -> None:
    # W (2x2, no bias) starts at 0 and x = 0, so logits = 0 and the CE gradient is 0;
    # the term sum(W * c) adds gradient c. Batch 4:
    #   client 0: 4 samples -> 1 step:  W = -lr0 * c0 = -0.5 * 1 = -0.5
    #   client 1: 6 samples -> 2 steps (4 + short 2): W = -2 * lr1 * c1 = -2 * 0.1 * 2 = -0.4
    # loss per step = CE(0, y) + sum(W * c) = log 2 + sum(W * c), W taken before the step:
    #   client 0: log 2;  client 1: (log 2 + (log 2 + 4 * (-0.1 * 2) * 2)) / 2 = log 2 - 0.8
    model = nn.Linear(2, 2, bias=False)
    start = {"weight": torch.zeros(2, 2)}
    spec = LocalSpec(epochs=1, batch_size=4, terms=(Pull(),))
    jobs = [
        ClientJob(0, start, torch.zeros(4, 2), torch.zeros(4, dtype=torch.long), 0.5, 1.0, {"c": {"weight": torch.ones(2, 2)}, "scale": 1.0}, 1),
        ClientJob(1, start, torch.zeros(6, 2), torch.ones(6, dtype=torch.long), 0.1, 0.5, {"c": {"weight": torch.full((2, 2), 2.0)}, "scale": 1.0}, 2),
    ]
    out = VectorizedExecutor(model, spec).run(jobs)
    torch.testing.assert_close(out[0].params["weight"], torch.full((2, 2), -0.5))
    torch.testing.assert_close(out[1].params["weight"], torch.full((2, 2), -0.4))
    assert [o.num_steps for o in out] == [1, 2]
    assert math.isclose(out[0].mean_loss, math.log(2), rel_tol=1e-6)
    assert math.isclose(out[1].mean_loss, math.log(2) - 0.8, rel_tol=1e-6)


def test_vectorized_threads_are_bitwise_equal_to_one_thread() -> None:
    # 6 clients in chunks of 2 -> 3 chunks shared by 2 threads: same bits as one thread, and close to sequential
    model = _cnn_bn()
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.5, weight_decay=1e-3)
    jobs = _jobs(model, SIZES, (1, 6, 6))
    one = VectorizedExecutor(model, spec, chunk_size=2).run(jobs)
    threaded = VectorizedExecutor(model, spec, chunk_size=2, workers=2)
    first, second = threaded.run(jobs), threaded.run(jobs)  # the 2nd round runs every chunk on the pool
    threaded.close()
    _assert_identical(one, first)
    _assert_identical(one, second)
    _assert_close(SequentialExecutor(model, spec).run(jobs), second)


def test_parameters_take_their_gradients_layout() -> None:
    # Under vmap a linear weight's gradient is laid out transposed ([C, out, in] stored as
    # [C, in, out]); the executor learns that once and stacks the weight that way in every chunk.
    model = _mlp()
    spec = LocalSpec(epochs=1, batch_size=8)
    jobs = _jobs(model, [16, 16, 16], (3, 4))
    ex = VectorizedExecutor(model, spec, chunk_size=2)
    out = ex.run(jobs)
    assert ex._layouts == {"1.weight": (0, 2, 1), "3.weight": (0, 2, 1)}  # biases already match
    _assert_close(SequentialExecutor(model, spec).run(jobs), out)
    assert out[0].params["1.weight"].stride() == (1, 8)  # the client's [8, 12] weight, column-major


def test_stack_copies_into_the_requested_layout() -> None:
    a, b = torch.arange(6.0).view(2, 3), torch.arange(6.0, 12.0).view(2, 3)
    plain = stack([a, b])
    assert plain.is_contiguous() and torch.equal(plain, torch.stack([a, b]))
    column_major = stack([a, b], (0, 2, 1))  # each client's [2, 3] stored column-major
    assert column_major.stride() == (6, 1, 2) and torch.equal(column_major, torch.stack([a, b]))
    same = stack([a, a, a], (0, 2, 1))  # one broadcasting copy when every client starts from the same tensor
    assert same.stride() == (6, 1, 2) and torch.equal(same, torch.stack([a, a, a]))
    client_inner = stack([a, b], (1, 0, 2))  # the client dim need not be outermost
    assert client_inner.stride() == (3, 6, 1) and torch.equal(client_inner, torch.stack([a, b]))
    same[0, 0, 0] = 100.0  # a copy, never a view of the start
    assert a[0, 0] == 0.0
    assert dim_order(column_major) == (0, 2, 1) and dim_order(plain) == (0, 1, 2)


def test_vectorized_workers_never_oversubscribe() -> None:
    assert vectorized_workers(threads=1, cores=2) == 2
    assert vectorized_workers(threads=2, cores=2) == 1
    assert vectorized_workers(threads=0, cores=8) == 1  # torch's default already uses every core
    assert vectorized_workers(threads=3, cores=8) == 2
    assert vectorized_workers(threads=4, cores=2) == 1


def test_chunk_size_from_memory_budget() -> None:
    # Linear(2, 2, no bias), no momentum, batch 4 of 2 features (float32):
    #   state: 3 copies * 4 weights * 4 B = 48;  batch: 4 * 2 * 4 B = 32
    #   activations: one module output 4 x 2 floats = 32 B, counted 3 times = 96  -> 176 B per client
    model = nn.Linear(2, 2, bias=False)
    job = ClientJob(0, {"weight": torch.zeros(2, 2)}, torch.zeros(10, 2), torch.zeros(10, dtype=torch.long), 0.1, 1.0, {}, 0)
    spec = LocalSpec(epochs=1, batch_size=4)
    assert chunk_size_for(model, spec, job, 5 * 176 + 10) == 5
    # momentum adds one more state copy: 176 + 16 = 192 B
    assert chunk_size_for(model, LocalSpec(epochs=1, batch_size=4, momentum=0.9), job, 5 * 192 + 10) == 5
    assert chunk_size_for(model, LocalSpec(epochs=1, batch_size=4, momentum=0.9), job, 5 * 192 - 1) == 4
    assert chunk_size_for(model, spec, job, 100) == 1  # never below one client
    # a budget of one client per chunk still gives the sequential result
    jobs = _jobs(_mlp(), SIZES, (3, 4))
    _assert_close(SequentialExecutor(_mlp(), spec).run(jobs), VectorizedExecutor(_mlp(), spec, memory_budget=1).run(jobs))


def test_stack_contexts_broadcasts_shared_and_stacks_differing() -> None:
    shared = torch.ones(3)
    ctxs = [{"a": shared, "b": torch.full((2,), float(i)), "mu": 0.5, "s": 1.0 * i} for i in range(3)]
    stacked = stack_contexts(ctxs, torch.float32)
    # leaves in key order: a (same object -> shared), b (stacked), mu (equal -> shared), s (differs -> tensor)
    assert sorted(stacked.batched) == [1, 3]
    assert stacked.shared[0] is shared
    torch.testing.assert_close(stacked.batched[1], torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]))
    torch.testing.assert_close(stacked.batched[3], torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(NotVectorizable):
        stack_contexts([{"a": 1.0}, {"b": 1.0}], torch.float32)
    with pytest.raises(NotVectorizable):
        stack_contexts([{"a": "x"}, {"a": "y"}], torch.float32)


@pytest.mark.usefixtures("no_strict_fallbacks")  # a fallback on purpose
def test_vectorized_falls_back_once_when_step_cannot_be_vmapped(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.Dropout(0.5), nn.Linear(8, 5))  # random op: vmap refuses
    spec = LocalSpec(epochs=1, batch_size=8)
    jobs = _jobs(model, [9, 7, 12], (3, 4))
    ex = VectorizedExecutor(model, spec)
    with caplog.at_level(logging.WARNING, logger="chillfl.executors.vectorized"):
        first, second = ex.run(jobs), ex.run(jobs)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "falling back to the sequential executor" in warnings[0].getMessage()
    ref = SequentialExecutor(model, spec).run(jobs)
    _assert_identical(ref, first)
    _assert_identical(ref, second)


class Branchy:
    """Test term with Python control flow on a per-client number: fine alone, not under vmap."""

    reads = ("mu",)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        if context["mu"] > 0:  # a batched tensor under vmap: data-dependent control flow
            return context["mu"] * sum((v**2).sum() for v in params.values())
        return torch.zeros(())


@pytest.mark.usefixtures("no_strict_fallbacks")  # a fallback on purpose
@pytest.mark.parametrize("workers", [1, 2])
def test_vectorized_falls_back_when_only_differing_contexts_break_vmap(workers: int, caplog: pytest.LogCaptureFixture) -> None:
    # the probe (two copies of one client) passes; the real chunk stacks differing mu's and fails
    model = _mlp()
    spec = LocalSpec(epochs=1, batch_size=8, terms=(Branchy(),))
    jobs = _jobs(model, [9, 7, 12, 8], (3, 4), [{"mu": 0.01 * c} for c in range(4)])
    ex = VectorizedExecutor(model, spec, chunk_size=2, workers=workers)
    with caplog.at_level(logging.WARNING, logger="chillfl.executors.vectorized"):
        got = ex.run(jobs)
    ex.close()
    assert ex.fallback_reason is not None and "cannot be vmapped" in ex.fallback_reason
    _assert_identical(SequentialExecutor(model, spec).run(jobs), got)


@pytest.mark.usefixtures("no_strict_fallbacks")  # a fallback on purpose
def test_auto_falls_back_to_the_process_pool_when_the_model_cannot_be_vmapped(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.Dropout(0.5), nn.Linear(8, 5))
    spec = LocalSpec(epochs=1, batch_size=8)
    jobs = _jobs(model, [9, 7, 12], (3, 4))
    ex = VectorizedExecutor(model, spec, workers=2, fallback=partial(ProcessExecutor, model, spec, workers=2))
    with caplog.at_level(logging.WARNING, logger="chillfl.executors.vectorized"):
        got = ex.run(jobs)
    try:
        assert isinstance(ex._fallback, ProcessExecutor)
        assert "falling back to the process executor" in caplog.records[-1].getMessage()
        _assert_identical(SequentialExecutor(model, spec).run(jobs), got)  # the pool is bitwise sequential
    finally:
        ex.close()


def test_pack_tree_roundtrip_shares_memory() -> None:
    tree = {"w": torch.arange(6.0).view(2, 3), "n": torch.tensor(3), "inner": {"b": torch.ones(2)}, "mu": 0.1}
    packed = pack_tree(tree)
    assert sorted(packed.buffers) == ["float32", "int64"] and all(b.is_shared() for b in packed.buffers.values())
    out = packed.unpack()
    assert out["mu"] == 0.1
    for key in ("w", "n"):
        assert torch.equal(out[key], tree[key]) and out[key].dtype == tree[key].dtype
    assert torch.equal(out["inner"]["b"], tree["inner"]["b"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_process_pool_bitwise_errors_and_clean_shutdown() -> None:
    model = _cnn_bn()
    spec = LocalSpec(epochs=1, batch_size=8, momentum=0.9, weight_decay=1e-3, terms=(Pull(),))
    g = torch.Generator().manual_seed(9)
    contexts = [{"c": {"4.bias": torch.randn(5, generator=g)}, "scale": 0.5} for _ in SIZES]
    jobs = _jobs(model, SIZES, (1, 6, 6), contexts)
    ref = one_thread_reference(model, spec, jobs)
    ex = ProcessExecutor(model, spec, workers=2)
    try:
        pids = ex.pids
        assert len(pids) == 2
        _assert_identical(ref, ex.run(jobs))
        # a failing job raises in the parent, naming the client; the pool stays usable
        bad = list(jobs)
        bad[2] = ClientJob(2, jobs[2].start, jobs[2].x, torch.full_like(jobs[2].y, 99), 0.1, 1.0, contexts[2], 7)
        with pytest.raises(WorkerError, match="client 2"):
            ex.run(bad)
        _assert_identical(ref[:3], ex.run(jobs[:3]))
    finally:
        ex.close()
    assert not any(_alive(p) for p in pids)
    assert not [p for p in multiprocessing.active_children() if p.pid in pids]
    with pytest.raises(WorkerError, match="closed"):
        ex.run(jobs)
    ex.close()  # idempotent


def test_one_pool_serves_one_executor_after_another() -> None:
    """Executors on a given pool (two architectures, two objectives): each bitwise its sequential twin; closing
    an executor leaves the pool up, closing the pool stops its workers."""
    one_thread = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count: bitwise equality needs the same
    try:
        setups = [(_mlp(), LocalSpec(epochs=1, batch_size=8), (3, 4)), (_cnn_bn(), LocalSpec(epochs=2, batch_size=4, momentum=0.9), (1, 6, 6))]
        expected = [SequentialExecutor(model, spec).run(_jobs(model, [9, 7, 5], shape)) for model, spec, shape in setups]
    finally:
        torch.set_num_threads(one_thread)
    with WorkerPool(workers=2) as pool:
        pids = pool.pids
        for (model, spec, shape), want in zip(setups * 2, expected * 2):  # back and forth: each executor's own template
            ex = ProcessExecutor(model, spec, pool=pool)
            _assert_identical(want, ex.run(_jobs(model, [9, 7, 5], shape)))
            ex.close()
            with pytest.raises(WorkerError, match="closed"):
                ex.run(_jobs(model, [9], shape))
            assert pool.pids == pids and all(_alive(p) for p in pids)
        with pytest.raises(ValueError, match="pool's workers"):
            ProcessExecutor(_mlp(), LocalSpec(epochs=1, batch_size=8), pool=pool, workers=3)
    assert not any(_alive(p) for p in pids)


@contextmanager
def _one_worker() -> Iterator[tuple[ProcessExecutor, list[ClientJob]]]:
    """A one-worker pool that has run two jobs, and the jobs; closed afterwards."""
    model = _mlp()
    ex = ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8), workers=1)
    try:
        jobs = _jobs(model, [9, 7], (3, 4))
        assert len(ex.run(jobs)) == 2
        yield ex, jobs
    finally:
        ex.close()


def test_process_pool_reports_a_dead_worker() -> None:
    with _one_worker() as (ex, jobs):
        os.kill(ex.pids[0], signal.SIGKILL)
        with pytest.raises(WorkerError, match="died"):
            ex.run(jobs)
    assert not _alive(ex.pids[0])


def test_a_sigterm_to_the_whole_process_group_leaves_the_workers_to_the_parent() -> None:
    """A cluster's scheduler stops a job with SIGTERM to every process of it (Slurm's scancel, systemd): the
    workers died of it, and the round the parent was to finish and checkpoint failed as "worker failed" (exit 1).
    They ignore it, as Ctrl-C's SIGINT: the parent stops after the round and closes them."""
    with _one_worker() as (ex, jobs):
        os.kill(ex.pids[0], signal.SIGTERM)
        assert len(ex.run(jobs)) == 2
        assert _alive(ex.pids[0])
    assert not _alive(ex.pids[0])


def test_a_worker_whose_parent_was_killed_exits_without_multiprocessing_finalizers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGKILLed run's workers find their task queue closed: each removes the parent's temp folder and ends with
    os._exit, as the parent watch does. A plain return ran multiprocessing's finalizers, among them the unlink of the
    worker's own resource-sharer socket, which lies in that same folder (spawned workers inherit the parent's tempdir):
    where a sibling had removed it first, a FileNotFoundError traceback was printed under the killed run (twice in
    about ten kills of a 3-worker run)."""
    from chillfl.executors import processes

    class Exited(BaseException):
        pass

    exits: list[int] = []

    def exit_(code: int) -> None:
        exits.append(code)
        raise Exited

    class Closed:
        """The killed parent's end of the task queue."""

        def get(self, timeout: float) -> None:
            raise EOFError

    class Idle:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def start(self) -> None:  # the parent watch would race the loop to os._exit: the loop's own way out is tested
            pass

    monkeypatch.setattr(processes.os, "_exit", exit_)
    monkeypatch.setattr(processes.signal, "signal", lambda *args: None)  # the worker ignores Ctrl-C; this process must not
    monkeypatch.setattr(processes.threading, "Thread", Idle)
    monkeypatch.setattr(processes.torch, "set_num_threads", lambda n: None)
    # a worker's process-wide set-up, not this test's subject: left in the pytest process, a hook that drops every error
    # once "parent -1" is gone made later tests unable to fail, and 200,000 objects stayed frozen out of the collector
    monkeypatch.setattr(processes, "_quiet_once_orphaned", lambda parent: None)
    monkeypatch.setattr(processes.gc, "freeze", lambda: None)
    folder = tmp_path / "pymp-killed"
    (folder / "listener-x").mkdir(parents=True)
    with pytest.raises(Exited):
        processes._worker_main(1, Closed(), None, -1, str(folder))  # parent -1: not this process's parent, so gone
    assert exits == [0] and not folder.exists()


def test_a_workers_error_is_quiet_once_its_parent_is_gone(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A parent SIGKILLed mid-fetch of a result's tensors resets the worker's resource-sharer connection: that thread
    reports its ConnectionResetError through sys.excepthook, and printed a traceback under the killed run (twice in
    twelve kills of a 3-worker run, after the fix above). Once the parent is gone the worker's errors are not printed;
    while it lives they are, as before."""
    import sys

    from chillfl.executors import processes

    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError as exc:
        error = (type(exc), exc, exc.__traceback__)
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)  # restored after the test
    processes._quiet_once_orphaned(-1, wait=0.0)  # -1: not this process's parent, so gone
    sys.excepthook(*error)
    assert capsys.readouterr().err == ""
    sys.excepthook = sys.__excepthook__
    processes._quiet_once_orphaned(os.getppid(), wait=0.0)  # this process's parent, alive
    sys.excepthook(*error)
    assert "ConnectionResetError: [Errno 104] Connection reset by peer" in capsys.readouterr().err


def test_process_pool_reports_a_task_its_queue_cannot_send() -> None:
    """A queue pickles what it sends in a thread of its own, where an error was only printed: the round waited
    forever for the task (so it did under a TMPDIR too long for the sockets that pass tensors)."""
    with WorkerPool(workers=1) as pool:
        with pytest.raises(WorkerError, match=r"could not send a task to the workers: \w*Error: .*lambda"):
            pool.round([lambda: None], decode=lambda reply: reply)
        assert not pool.usable


def test_a_result_a_worker_cannot_send_comes_back_as_its_jobs_error() -> None:
    results = _Results(ctx=multiprocessing.get_context("spawn"))
    try:
        results._on_queue_feeder_error(OSError("AF_UNIX path too long"), (3, True, object()))
        assert results.get(timeout=10) == (3, False, "could not send the result to the parent: OSError: AF_UNIX path too long")
    finally:
        results.close()


def test_choose_executor() -> None:
    assert choose_executor(1_000, 1, 8) == "sequential"  # one client: nothing to parallelise
    assert choose_executor(VECTORIZE_MAX_PARAMS, 10, 1) == "vectorized"
    assert choose_executor(VECTORIZE_MAX_PARAMS + 1, 10, 2) == "vectorized"  # chunks on 2 threads
    assert choose_executor(VECTORIZE_MAX_PARAMS + 1, 10, 1) == "sequential"  # one worker: a big stack is slower


def _experiment(executor: str, model: nn.Module) -> ExecutorSpec:
    spec = LocalSpec(epochs=1, batch_size=8)
    client = ParameterClient(model, 64)
    return ExecutorSpec(model, spec, client, sum(v.numel() for v in model_state(model).values()), clients_per_round=4, threads=1)


def test_make_parallel_executor_names_and_auto_log(caplog: pytest.LogCaptureFixture) -> None:
    exp = _experiment("auto", _mlp())
    assert isinstance(make_parallel_executor("sequential", exp), SequentialExecutor)
    assert isinstance(make_parallel_executor("vectorized", exp), VectorizedExecutor)
    with caplog.at_level(logging.INFO, logger="chillfl.executors.parallel"):
        chosen = make_parallel_executor("auto", exp)
    assert isinstance(chosen, VectorizedExecutor)  # 149 parameters, 4 clients per round
    lines = [r.getMessage() for r in caplog.records if r.name == "chillfl.executors.parallel"]
    assert len(lines) == 1 and "vectorized" in lines[0]
    cores = len(os.sched_getaffinity(0))
    assert chosen.workers == cores  # threads = 1 (the default): one chunk thread per core
    assert ("if the model cannot be vmapped: processes" in lines[0]) == (cores > 1)
    with pytest.raises(ConfigError, match="executor"):
        make_parallel_executor("threads", exp)


@pytest.mark.parametrize("executor", ["sequential", "vectorized", "processes"])
def test_run_experiment_is_deterministic(executor: str) -> None:
    overrides = {
        "executor": executor,
        "dataset.name": "digits",
        "model.name": "mlp",
        "federation.num_clients": 4,
        "federation.rounds": 2,
        "client.batch_size": 32,
        "client.momentum": 0.5,
    }
    config = load_config(None, overrides)
    # processes: both runs on this test process's lent workers (lent_pools), the second on the workers the first used: a
    # worker keeping anything of a run would show here; a pool's own start is tests/test_worker_pools.py's and the above
    first = run_experiment(config, write=False, progress=False, pools=pools()).records
    second = run_experiment(config, write=False, progress=False, pools=pools()).records
    assert len(first) == 2 and first == second
    if executor == "vectorized":  # and it agrees with the reference up to float rounding
        ref = run_experiment(config.with_overrides({"executor": "sequential"}), write=False, progress=False).records
        assert_records_close(ref, first)  # accuracies: only between bitwise runs (tests/float_paths.py)


def test_budget_chunks_are_balanced_across_workers() -> None:
    ex = VectorizedExecutor(_mlp(), LocalSpec(epochs=1, batch_size=8), workers=2)
    sizes = lambda n, size: [len(c) for c in ex._balanced_chunks(list(range(n)), size)]  # noqa: E731
    assert sizes(100, 19) == [16, 17, 17, 16, 17, 17]  # rows i*100//6: 6 chunks of 16-17, not 5 of 19 and one of 5
    assert sizes(100, 200) == [50, 50]  # every worker gets a chunk
    assert sizes(3, 1) == [1, 1, 1]  # never more chunks than clients
    assert sorted(sum(ex._balanced_chunks(list(range(37)), 5), [])) == list(range(37))
