"""The vectorised executor's accelerator (GPU) policy, exercised on the CPU by forcing it.

``VectorizedExecutor(accelerator=True)`` runs the code a CUDA device runs:
resident chunk data and plan, one host read per chunk, chunks sized from free
device memory (here a fake ``free_memory``), one worker. The CUDA-only checks
(sync debug mode, cuda vs cuda) are in tests/test_cuda.py.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
from torch import nn

from chillfl.data.augment import Augment
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.parallel import ExecutorSpec, accelerator_executor, make_parallel_executor
from chillfl.engine.protocol import ClientSide
from chillfl.executors.vectorized import (
    ACCELERATOR_MEMORY_FRACTION,
    VectorizedExecutor,
    accelerator_chunk_size,
    client_bytes,
)
from chillfl.training.local import LocalOutcome, LocalSpec, model_state
from chillfl.engine.footprint import nbytes
from chillfl.training.optim import init_state
from chillfl.training.schedule import Optimizer

from float_paths import assert_records_close

SIZES = [37, 20, 5, 0, 16, 29, 8]  # unequal; smaller than a batch; empty; multiples of the batch


def _cnn_bn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 5))


def _jobs(model: nn.Module, sizes: list[int], work: list[float] | None = None) -> list[ClientJob]:
    start = model_state(model)
    g = torch.Generator().manual_seed(7)
    jobs = []
    for c, n in enumerate(sizes):
        x, y = torch.randn(n, 1, 6, 6, generator=g), torch.randint(0, 5, (n,), generator=g)
        jobs.append(ClientJob(c, start, x, y, 0.05 * (1 + c / 4), 1.0 / (1 + c), {}, 500 + c, work=1.0 if work is None else work[c]))
    return jobs


def _assert_close(ref: list[LocalOutcome], got: list[LocalOutcome]) -> None:
    for a, b in zip(ref, got, strict=True):
        assert a.num_steps == b.num_steps
        assert math.isclose(a.mean_loss, b.mean_loss, rel_tol=1e-5, abs_tol=1e-6)
        assert list(a.params) == list(b.params)
        for k in a.params:
            torch.testing.assert_close(b.params[k], a.params[k], atol=1e-5, rtol=1e-5)


def _fits(clients: int, model: nn.Module, spec: LocalSpec, job: ClientJob) -> Callable[[torch.device], int]:
    """A fake ``free_memory``: exactly ``clients`` clients' worth of resident chunk bytes free (after the fraction)."""
    per_client = client_bytes(model, spec, job, resident=True)
    return lambda _device: math.ceil(clients * per_client / ACCELERATOR_MEMORY_FRACTION)


@pytest.mark.parametrize("augment", [None, Augment(crop_padding=1, padding_mode="constant", flip=True, fill=(0.5,))], ids=["plain", "crop-flip"])
def test_accelerator_policy_equals_sequential_with_batchnorm_stragglers_and_several_chunks(augment: Augment | None) -> None:
    model = _cnn_bn()
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.5, weight_decay=1e-3, augment=augment)
    jobs = _jobs(model, SIZES, work=[1.0, 0.5, 1.0, 1.0, 1.0, 0.3, 1.0])
    ex = VectorizedExecutor(model, spec, accelerator=True, free_memory=_fits(3, model, spec, jobs[0]))
    got = ex.run(jobs)
    assert ex.fallback_reason is None  # it really ran vectorised, not the fallback
    assert [len(c) for c in ex._balanced_chunks(list(range(len(jobs))), ex._chunk_sizes[(8, 1, 6, 6, True)])] == [1, 2, 2, 2]  # 3 fit -> 2 a chunk
    ref = SequentialExecutor(model, spec).run(jobs)
    _assert_close(ref, got)
    assert [o.num_steps for o in got] == [10, 3, 2, 0, 4, 2, 2]  # stragglers stop early; the empty client never steps
    assert [int(o.params["1.num_batches_tracked"]) for o in got] == [10, 3, 2, 0, 4, 2, 2]
    assert not torch.equal(got[0].params["1.running_var"], jobs[0].start["1.running_var"])


def test_accelerator_policy_is_bitwise_reproducible_and_agrees_with_the_cpu_policy() -> None:
    model = _cnn_bn()
    spec = LocalSpec(epochs=1, batch_size=8, momentum=0.9)
    jobs = _jobs(model, SIZES)
    runs = [VectorizedExecutor(model, spec, accelerator=True, free_memory=_fits(4, model, spec, jobs[0])).run(jobs) for _ in range(2)]
    for a, b in zip(*runs, strict=True):
        assert a.mean_loss == b.mean_loss and all(torch.equal(a.params[k], b.params[k]) for k in a.params)
    _assert_close(VectorizedExecutor(model, spec, accelerator=False).run(jobs), runs[0])


HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy")


def test_accelerator_step_loop_reads_no_device_value_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU each of these would block the host until the queued kernels finish."""
    model = _cnn_bn()
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.5, augment=Augment(crop_padding=1, flip=True))
    jobs = _jobs(model, SIZES, work=[1.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0])
    ex = VectorizedExecutor(model, spec, accelerator=True, free_memory=_fits(2, model, spec, jobs[0]))
    ex.run(jobs[:2])  # the probe and the chunk sizing (each once per run) read values; the rounds after them must not
    reads: dict[str, int] = {}
    in_loop = [False]
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            key = _name if in_loop[0] else f"outside:{_name}"
            reads[key] = reads.get(key, 0) + 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    train_steps = ex._train_steps
    loops = []

    def watched(*args: Any, **kwargs: Any) -> torch.Tensor:
        in_loop[0] = True
        try:
            loops.append(1)
            return train_steps(*args, **kwargs)
        finally:
            in_loop[0] = False

    monkeypatch.setattr(ex, "_train_steps", watched)
    out = ex.run(jobs)
    monkeypatch.undo()
    assert ex.fallback_reason is None and sum(o.num_steps for o in out) > 0
    assert {k: v for k, v in reads.items() if not k.startswith("outside:")} == {}
    # the instrumentation works: each chunk reads its losses once, after its loop (2 a chunk: 7 clients -> 4 chunks)
    assert len(loops) == 4 and reads.get("outside:tolist") == 4


def test_accelerator_chunk_size_is_a_power_of_two_of_free_memory() -> None:
    # fraction 0.5 of 2,000 B free = 1,000 B; 100 B per client -> 10 fit -> 8 (a power of two)
    assert accelerator_chunk_size(100, 2_000) == 8
    assert accelerator_chunk_size(100, 3_200) == 16  # 1,600 // 100 = 16 exactly
    assert accelerator_chunk_size(100, 3_199) == 8  # 15 fit
    assert accelerator_chunk_size(100, 10) == 1  # never below one client
    assert accelerator_chunk_size(100, 2_000, fraction=1.0) == 16  # 20 fit


def test_resident_client_bytes_count_the_clients_data() -> None:
    # Linear(2, 2, no bias), batch 4, 10 samples of 2 float32 features, 1 epoch:
    #   CPU estimate 176 B (tests/test_executors.py::test_chunk_size_from_memory_budget);
    #   resident adds x 10*2*4 = 80 B, y 10*8 = 80 B, plan 8 B * 10 rows * 1 epoch = 80 B -> 416 B
    model = nn.Linear(2, 2, bias=False)
    job = ClientJob(0, {"weight": torch.zeros(2, 2)}, torch.zeros(10, 2), torch.zeros(10, dtype=torch.long), 0.1, 1.0, {}, 0)
    spec = LocalSpec(epochs=1, batch_size=4)
    assert client_bytes(model, spec, job) == 176
    assert client_bytes(model, spec, job, resident=True) == 416
    # crop/flip adds 3 int64 draws per sample-step to the plan: 176 + 80 + 80 + 4 * 80 = 656 B
    assert client_bytes(model, LocalSpec(epochs=1, batch_size=4, augment=Augment(flip=True)), job, resident=True) == 656


def test_client_bytes_count_the_plain_steps_momentum_buffers() -> None:
    # The same Linear(2, 2, no bias) client, 176 B (above), its weight (4 float32, 16 B) stepped by hand (plain_sgd):
    #   with plain_momentum = 0.9 it holds that step's buffer too: 176 + 16 = 192 B; with SGD's own momentum as well
    #   (init_state gives every parameter that buffer): 192 + 16 = 208 B; under Adam, its two moments and the buffer:
    #   176 + 2 * 16 + 16 = 224 B. Without plain_momentum, no buffer: 176 B.
    model = nn.Linear(2, 2, bias=False)
    job = ClientJob(0, {"weight": torch.zeros(2, 2)}, torch.zeros(10, 2), torch.zeros(10, dtype=torch.long), 0.1, 1.0, {}, 0)
    plain = frozenset({"weight"})
    assert client_bytes(model, LocalSpec(epochs=1, batch_size=4, plain_sgd=plain), job) == 176
    assert client_bytes(model, LocalSpec(epochs=1, batch_size=4, plain_sgd=plain, plain_momentum=0.9), job) == 192
    assert client_bytes(model, LocalSpec(epochs=1, batch_size=4, momentum=0.5, plain_sgd=plain, plain_momentum=0.9), job) == 208
    adam = Optimizer(name="adam")
    assert client_bytes(model, LocalSpec(epochs=1, batch_size=4, optim=adam, plain_sgd=plain, plain_momentum=0.9), job) == 224
    # The count is init_state's: the slots it makes hold as many bytes.
    state = init_state({"weight": torch.zeros(2, 2)}, adam, 0.0, plain)
    assert sum(nbytes(t) for entries in state.values() for t in entries.values()) == 224 - 176


def test_accelerator_sizes_chunks_from_the_injected_free_memory_once_per_batch_shape() -> None:
    model = _cnn_bn()
    spec = LocalSpec(epochs=1, batch_size=8)
    jobs = _jobs(model, [16] * 20)
    asked: list[torch.device] = []
    fake = _fits(10, model, spec, jobs[0])

    def free(device: torch.device) -> int:
        asked.append(device)
        return fake(device)

    ex = VectorizedExecutor(model, spec, workers=2, accelerator=True, free_memory=free)
    sizes: list[int] = []
    run_chunk = ex._run_chunk
    ex._run_chunk = lambda replica, js, sc, resident: sizes.append(len(js)) or run_chunk(replica, js, sc, resident)  # type: ignore[method-assign,func-returns-value]
    ex.run(jobs)
    ex.run(jobs)
    assert asked == [torch.device("cpu")]  # asked once, for the data's device
    assert sizes == [6, 7, 7] * 2  # 10 fit -> 8 a chunk -> 3 balanced chunks of 20; ONE worker (no multiple of 2)
    assert ex._pool is None  # no worker threads under the accelerator policy


def test_policy_follows_the_data_device_unless_forced() -> None:
    spec = LocalSpec(epochs=1, batch_size=8)
    ex = VectorizedExecutor(_cnn_bn(), spec)
    assert not ex.resident(torch.device("cpu")) and ex.resident(torch.device("cuda", 0))
    assert VectorizedExecutor(_cnn_bn(), spec, accelerator=True).resident(torch.device("cpu"))
    assert not VectorizedExecutor(_cnn_bn(), spec, accelerator=False).resident(torch.device("cuda"))
    child = VectorizedExecutor(_cnn_bn(), spec, accelerator=True).for_spec(LocalSpec(epochs=2, batch_size=4))
    assert child.accelerator is True  # distillation specs' siblings keep the policy


class _NoClient:
    def update(self, task: Any) -> Any:
        raise AssertionError("not called")


def test_auto_on_a_gpu_vectorizes_any_model_with_one_worker() -> None:
    assert accelerator_executor(1) == "sequential" and accelerator_executor(2) == "vectorized"
    big = nn.Linear(1000, 1000)  # 1M parameters: on one CPU worker `auto` would train it sequentially
    client: ClientSide = _NoClient()
    parts = ExecutorSpec(big, LocalSpec(epochs=1, batch_size=8), client, 1_001_000, clients_per_round=10, threads=1, device="cuda")
    ex = make_parallel_executor("auto", parts)
    assert isinstance(ex, VectorizedExecutor) and ex.workers == 1


E2E = {
    "dataset.name": "digits",
    "model": {"name": "flexchill_cnn", "batch_norm": True},
    "federation.num_clients": 6,
    "federation.clients_per_round": 4,
    "federation.rounds": 2,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "client.momentum": 0.5,
    "eval.client_split_size": 20,
}
SCARLET = {"distillation": {"method": "scarlet", "public_size": 120, "subset_size": 40, "cache_duration": 2}}


@pytest.mark.parametrize("extra", [{}, SCARLET], ids=["fedavg-bn", "scarlet-bn"])
def test_whole_runs_under_the_accelerator_policy_match_sequential(monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]) -> None:
    """Both protocols, every stage (distillation, training) through resident chunks of 2 clients, as on a GPU."""
    from chillfl.config import load_config
    from chillfl.executors import vectorized
    from chillfl.runner import run_experiment

    def run(executor: str) -> list[dict[str, Any]]:
        return run_experiment(load_config(None, {**E2E, **extra, "executor": executor}), write=False, progress=False).records

    reference = run("sequential")
    chunks: list[int] = []
    run_chunk = VectorizedExecutor._run_chunk

    def spied(self: VectorizedExecutor, replica: Any, jobs: Any, schedules: Any, resident: bool = False) -> list[LocalOutcome]:
        assert resident and self.fallback_reason is None
        chunks.append(len(jobs))
        return run_chunk(self, replica, jobs, schedules, resident)

    monkeypatch.setattr(VectorizedExecutor, "resident", lambda self, device: True)
    monkeypatch.setattr(vectorized, "accelerator_chunk_size", lambda per_client, free: 2)
    monkeypatch.setattr(VectorizedExecutor, "_run_chunk", spied)
    got = run("vectorized")
    assert chunks and max(chunks) == 2
    assert [r["clients"] for r in got] == [r["clients"] for r in reference]
    assert_records_close(reference, got)  # accuracies: only between bitwise runs (tests/float_paths.py)
