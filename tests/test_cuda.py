"""The CUDA suite: runs where torch sees a GPU, and is reported as skipped (not run) everywhere else.

On a GPU machine: ``python -m pytest tests/test_cuda.py -rs``.

``test_every_method`` is generated from the registries (algorithms, soft-label
methods, prototype methods, temperature policies): a new method is covered by
the next run. ``CHILLFL_CUDA_SUITE_DEVICE=cpu`` runs those cases on the CPU
instead (bf16 too where the CPU has bf16 kernels), to check the generated configs without a GPU; the
module's other tests still need one.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import torch

from chillfl.config import load_config
from chillfl.runner import run_experiment
from chillfl.training.local import bf16_supported
from model_cases import model_cases, train_both_ways
from registry_cases import registry_cases

NOT_RUN = "no CUDA GPU on this machine: the CUDA suite was NOT run"
SUITE_DEVICE = os.environ.get("CHILLFL_CUDA_SUITE_DEVICE", "cuda")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NOT_RUN)
pytestmark = pytest.mark.skipif(SUITE_DEVICE == "cuda" and not torch.cuda.is_available(), reason=NOT_RUN)

BASE = {
    "dataset.name": "digits",
    "model.name": "flexchill_cnn",
    "federation.num_clients": 6,
    "federation.clients_per_round": 4,
    "federation.rounds": 3,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.client_split_size": 20,
}
SCARLET = {
    "distillation.method": "scarlet",
    "distillation.public_size": 120,
    "distillation.subset_size": 40,
    "distillation.cache_duration": 2,
}


def _run(**over: object) -> list[dict]:
    return run_experiment(load_config(None, {**BASE, **over}), write=False, progress=False).records


@needs_cuda
@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
@pytest.mark.parametrize("extra", [{}, SCARLET, {"algorithm.name": "scaffold", "temperature.policy": "fedchill"}], ids=["fedavg", "scarlet", "scaffold-fedchill"])
def test_cuda_runs_are_bitwise_reproducible(executor: str, extra: dict) -> None:
    first = _run(device="cuda", executor=executor, **extra)
    assert first == _run(device="cuda", executor=executor, **extra)


@needs_cuda
@pytest.mark.parametrize("extra", [{}, SCARLET], ids=["fedavg", "scarlet"])
def test_cuda_agrees_with_cpu(extra: dict) -> None:
    cpu, gpu = _run(device="cpu", **extra), _run(device="cuda", **extra)
    assert [r["clients"] for r in cpu] == [r["clients"] for r in gpu]
    assert gpu[-1]["global_acc"] == pytest.approx(cpu[-1]["global_acc"], abs=0.03)
    assert gpu[-1]["train_loss"] == pytest.approx(cpu[-1]["train_loss"], rel=0.02)


@needs_cuda
def test_cuda_run_keeps_the_model_on_the_gpu() -> None:
    out = run_experiment(load_config(None, {**BASE, "device": "cuda"}), write=False, progress=False)
    assert out.model_state is not None and all(v.is_cuda for v in out.model_state.values())
    assert out.summary["device"].startswith("cuda")


@needs_cuda
def test_tf32_is_set_for_the_run_only() -> None:
    """``precision = "tf32"``: TF32 matmuls and convolutions inside the run, torch's settings restored after."""
    from chillfl.runner import device_settings

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    with device_settings(load_config(None, {**BASE, "device": "cuda", "precision": "tf32"}), torch.device("cuda")):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    tf32, fp32 = _run(device="cuda", precision="tf32"), _run(device="cuda")
    assert tf32[-1]["train_loss"] == pytest.approx(fp32[-1]["train_loss"], rel=0.02)  # 10-bit mantissa inputs, fp32 accumulation


@needs_cuda
def test_processes_executor_is_refused_on_cuda() -> None:
    from chillfl.errors import ConfigError

    with pytest.raises(ConfigError, match="executor"):
        _run(device="cuda", executor="processes")


# ---------------------------------------------------------------- the vectorised executor's accelerator policy on a real GPU


def _bn_jobs(device: str) -> tuple[torch.nn.Module, list]:
    """A conv + batch-norm model and clients of unequal sizes (one straggler), data on ``device``."""
    from torch import nn

    from chillfl.executors.sequential import ClientJob
    from chillfl.training.local import model_state

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 5)).to(device)
    start = model_state(model)
    g = torch.Generator().manual_seed(7)
    jobs = []
    for c, n in enumerate([37, 20, 5, 0, 16, 29, 8]):
        x, y = torch.randn(n, 1, 6, 6, generator=g).to(device), torch.randint(0, 5, (n,), generator=g).to(device)
        jobs.append(ClientJob(c, start, x, y, 0.05 * (1 + c / 4), 1.0 / (1 + c), {}, 500 + c, work=0.5 if c == 1 else 1.0))
    return model, jobs


@pytest.fixture
def deterministic_cuda():
    import os

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(was)


CONVS = pytest.mark.parametrize("conv", ["grouped", "gemm", "nhwc", "loop"])
"""batched_conv: vmap's grouped convolution, im2col + batched GEMM, NHWC grouped, or NHWC one per client."""


@needs_cuda
@CONVS
def test_cuda_vectorized_equals_sequential_with_batchnorm(deterministic_cuda: None, conv: str) -> None:
    from chillfl.data.augment import Augment
    from chillfl.executors.sequential import SequentialExecutor
    from chillfl.executors.vectorized import VectorizedExecutor
    from chillfl.training.local import LocalSpec

    model, jobs = _bn_jobs("cuda")
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.5, weight_decay=1e-3, augment=Augment(crop_padding=1, flip=True), batched_conv=conv)
    ex = VectorizedExecutor(model, spec)  # the policy follows the data: resident chunks on the GPU
    assert ex.resident(jobs[0].x.device)
    got = ex.run(jobs)
    assert ex.fallback_reason is None
    ref = SequentialExecutor(model, spec).run(jobs)
    for a, b in zip(ref, got, strict=True):
        assert a.num_steps == b.num_steps and a.mean_loss == pytest.approx(b.mean_loss, rel=1e-4, abs=1e-5)
        for k in a.params:
            assert b.params[k].is_cuda
            torch.testing.assert_close(b.params[k], a.params[k], atol=1e-4, rtol=1e-4)


@needs_cuda
@CONVS
def test_cuda_vectorized_is_bitwise_reproducible(deterministic_cuda: None, conv: str) -> None:
    from chillfl.executors.vectorized import VectorizedExecutor
    from chillfl.training.local import LocalSpec

    model, jobs = _bn_jobs("cuda")
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.9, batched_conv=conv)
    first, second = (VectorizedExecutor(model, spec).run(jobs) for _ in range(2))
    for a, b in zip(first, second, strict=True):
        assert a.mean_loss == b.mean_loss and all(torch.equal(a.params[k], b.params[k]) for k in a.params)


@needs_cuda
@CONVS
def test_cuda_vectorized_step_loop_never_syncs(monkeypatch: pytest.MonkeyPatch, deterministic_cuda: None, conv: str) -> None:
    """torch's sync debug mode raises on any host<->device synchronisation inside the chunks' step loops."""
    from chillfl.executors.vectorized import VectorizedExecutor
    from chillfl.training.local import LocalSpec

    model, jobs = _bn_jobs("cuda")
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.5, batched_conv=conv)
    ex = VectorizedExecutor(model, spec)
    reference = ex.run(jobs)  # probe and chunk sizing (once per run) happen here
    train_steps, loops = ex._train_steps, []

    def strict(*args, **kwargs):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            loops.append(1)
            return train_steps(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(ex, "_train_steps", strict)
    got = ex.run(jobs)
    assert loops and ex.fallback_reason is None  # a sync would have raised inside the step and forced the fallback
    for a, b in zip(reference, got, strict=True):
        assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


def _even_jobs(device: str) -> tuple[torch.nn.Module, list]:
    """:func:`_bn_jobs`'s model with 6 clients of 40 rows: at batch 8 every step is every client's (recorded and replayed)."""
    from chillfl.executors.sequential import ClientJob

    model, jobs = _bn_jobs(device)
    g = torch.Generator().manual_seed(11)
    return model, [
        ClientJob(c, jobs[0].start, torch.randn(40, 1, 6, 6, generator=g).to(device), torch.randint(0, 5, (40,), generator=g).to(device), 0.05, 1.0, {}, 900 + c)
        for c in range(6)
    ]


@needs_cuda
@CONVS
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_graph_replays_equal_eager_steps_bitwise(deterministic_cuda: None, conv: str, precision: str) -> None:
    """``cuda_graphs``: the recorded step's kernels replayed give the same bits as the steps run eagerly, batch norm included."""
    from chillfl.executors.step_graphs import CudaGraphRecorder
    from chillfl.executors.vectorized import VectorizedExecutor
    from chillfl.training.local import LocalSpec

    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16: the bf16 case was NOT run")
    model, jobs = _even_jobs("cuda")
    replays: list[int] = []

    class Counting(CudaGraphRecorder):
        def capture(self, run):
            replay = super().capture(run)
            return lambda: (replays.append(1), replay())

    eager = VectorizedExecutor(model, LocalSpec(epochs=2, batch_size=8, momentum=0.9, batched_conv=conv, precision=precision)).run(jobs)
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.9, batched_conv=conv, precision=precision, cuda_graphs=True)
    ex = VectorizedExecutor(model, spec, step_recorder=Counting)
    graphed = ex.run(jobs)
    assert ex.fallback_reason is None and ex.graphed(jobs[0].x.device)
    assert len(replays) == 10 - 2  # 10 steps of every client: 2 warm-up, then the captured one replayed and 7 more
    for a, b in zip(eager, graphed, strict=True):
        assert a.mean_loss == b.mean_loss
        assert all(torch.equal(a.params[k], b.params[k]) for k in a.params), [k for k in a.params if not torch.equal(a.params[k], b.params[k])]


@needs_cuda
def test_cuda_gemm_windows_made_during_a_capture_are_not_kept_and_the_replay_is_right(monkeypatch: pytest.MonkeyPatch, deterministic_cuda: None) -> None:
    """A layer's windows first made inside a CUDA graph capture hold nothing until a replay: ``windows`` must not keep them."""
    from chillfl.training import conv_gemm

    made: dict = {}
    monkeypatch.setattr(conv_gemm, "_MADE", made)
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(4, 3, 9, 9, generator=g).cuda(), torch.randn(6, 3, 3, 3, generator=g).cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (cuBLAS's workspace) on another shape: this one's windows stay unmade
        conv_gemm.conv2d_as_gemm(torch.randn(1, 3, 5, 5, device="cuda"), w)
    torch.cuda.current_stream().wait_stream(side)
    kept = set(made)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = conv_gemm.conv2d_as_gemm(x, w, padding=1)
    assert set(made) == kept  # nothing kept from the capture
    graph.replay()
    torch.cuda.synchronize()
    eager = conv_gemm.conv2d_as_gemm(x, w, padding=1)
    assert len(made) == len(kept) + 1  # the eager call keeps its own
    assert torch.equal(out, eager)


@needs_cuda
def test_cuda_graphs_cut_the_kernel_launches_of_a_chunk(deterministic_cuda: None) -> None:
    """One ``cudaGraphLaunch`` a replayed step instead of the step's kernels one by one (a count, not a time)."""
    from torch.profiler import ProfilerActivity, profile

    from chillfl.executors.vectorized import VectorizedExecutor
    from chillfl.training.local import LocalSpec

    model, jobs = _even_jobs("cuda")
    launches = {}
    for graphs in (False, True):
        ex = VectorizedExecutor(model, LocalSpec(epochs=4, batch_size=8, cuda_graphs=graphs))
        ex.run(jobs)  # the probe and chunk sizing
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            ex.run(jobs)
            torch.cuda.synchronize()
        launches[graphs] = sum(e.count for e in prof.key_averages() if e.key in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaGraphLaunch"))
    # 20 steps: eagerly ~20 x (the step's kernels); recorded: 20 launches of the graph the first run recorded (GraphSlots) + each step's gather
    assert launches[True] * 3 < launches[False], launches


@needs_cuda
def test_cuda_graphs_run_gives_the_same_records_as_without(deterministic_cuda: None) -> None:
    assert _run(device="cuda", executor="vectorized", cuda_graphs=True) == _run(device="cuda", executor="vectorized", cuda_graphs=False)


@needs_cuda
def test_compiled_steps_on_the_gpu_repeat_bitwise_train_as_eager_ones_and_replay_as_graphs(deterministic_cuda: None) -> None:
    """``compile = true`` on CUDA (Triton kernels): reproducible, within rounding of eager, and recorded as CUDA graphs unchanged."""
    from float_paths import assert_records_close

    compiled = _run(device="cuda", executor="vectorized", compile=True)
    assert compiled == _run(device="cuda", executor="vectorized", compile=True)
    assert_records_close(_run(device="cuda", executor="vectorized"), compiled)
    assert _run(device="cuda", executor="vectorized", compile=True, cuda_graphs=True) == compiled


@needs_cuda
def test_cuda_chunks_are_sized_from_free_device_memory() -> None:
    from chillfl.executors.vectorized import free_device_memory

    free, total = torch.cuda.mem_get_info(0)
    assert 0 < free_device_memory(torch.device("cuda", 0)) <= total


@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@CONVS
def test_cuda_vectorized_run_agrees_with_sequential_run(conv: str, precision: str) -> None:
    vec = _run(device="cuda", executor="vectorized", batched_conv=conv, precision=precision)
    seq = _run(device="cuda", executor="sequential", precision=precision)
    assert [r["clients"] for r in vec] == [r["clients"] for r in seq]
    assert vec[-1]["train_loss"] == pytest.approx(seq[-1]["train_loss"], rel=1e-3 if precision == "fp32" else 5e-2)  # bf16: 8 mantissa bits over 3 rounds


# ---------------------------------------------------------------- every registered method (generated from the registries)

CASES = [pytest.param({**over, "deterministic": True}, id=case) for case, over in registry_cases()]
PRECISIONS = ["fp32", "bf16"] if SUITE_DEVICE == "cuda" or bf16_supported(torch.device(SUITE_DEVICE)) else ["fp32"]


@pytest.fixture
def strict_vectorized(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vectorised executor may not fall back: an exception in the run's own code must fail the test.

    ``CHILLFL_STRICT_VECTORIZED=1`` (set again here, whatever the environment) makes a fallback raise.
    On the CPU stand-in the executor takes the accelerator policy (resident, vmapped chunks), the GPU's path.
    """
    from chillfl.executors import vectorized

    monkeypatch.setenv("CHILLFL_STRICT_VECTORIZED", "1")
    if SUITE_DEVICE == "cpu":
        monkeypatch.setattr(vectorized.VectorizedExecutor, "resident", lambda self, device: True)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("executor", ["sequential", "vectorized", "vectorized+gemm"])
@pytest.mark.parametrize("config", CASES)
def test_every_method(config: dict[str, Any], executor: str, precision: str, strict_vectorized: None) -> None:
    """Two rounds on the device; fp32 with ``deterministic = true`` runs twice and must repeat bit for bit.

    ``vectorized+gemm``: the vectorised executor with ``batched_conv = "gemm"`` (chillfl.training.conv_gemm);
    ``vectorized`` alone runs the default, ``auto`` (``grouped`` here: ``nhwc`` needs ``cuda_graphs`` too)."""
    executor, _, batched_conv = executor.partition("+")
    over = {**config, "device": SUITE_DEVICE, "executor": executor, "precision": precision, "batched_conv": batched_conv or "auto"}
    out = run_experiment(load_config(None, over), write=False, progress=False)
    assert len(out.records) == 2
    if out.model_state is not None:
        assert all(v.device.type == torch.device(SUITE_DEVICE).type for v in out.model_state.values())
    if precision == "fp32":
        again = run_experiment(load_config(None, over), write=False, progress=False).records
        assert again == out.records


CNN_CASES = [case for case in CASES if case.values[0]["model.name"] != "mlp"]
"""The registry's cases whose model has convolutions (FedAlign's ResNet-20, FedBN's CNN): the only ones a rewrite of
the vmapped step's convolutions changes."""


@pytest.mark.parametrize("conv", ["nhwc", "loop"])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("config", CNN_CASES)
def test_every_cnn_method_with_nhwc_convolutions(config: dict[str, Any], precision: str, conv: str, strict_vectorized: None) -> None:
    """``batched_conv = "nhwc"`` / ``"loop"`` (chillfl.training.conv_nhwc) on the registry's CNN methods: two rounds on the device,
    fp32 repeated bit for bit, round 1's training loss close to the default grouped convolutions'.

    Round 1, not 2: FedAlign's ResNet-20 with batch norm spreads rounding fast. On the CPU under the accelerator
    policy its round-2 loss was 1.1138 sequential, 1.1216 grouped, 1.1231 gemm, 1.1292 nhwc (round 1: within 4e-3)."""
    over = {**config, "device": SUITE_DEVICE, "executor": "vectorized", "precision": precision}
    out = run_experiment(load_config(None, {**over, "batched_conv": conv}), write=False, progress=False)
    grouped = run_experiment(load_config(None, {**over, "batched_conv": "grouped"}), write=False, progress=False)
    assert len(out.records) == 2 and math.isfinite(out.records[-1]["train_loss"])
    assert out.records[0]["train_loss"] == pytest.approx(grouped.records[0]["train_loss"], rel=1e-2 if precision == "fp32" else 5e-2)
    if precision == "fp32":
        assert run_experiment(load_config(None, {**over, "batched_conv": conv}), write=False, progress=False).records == out.records


GRAPHED_PRECISIONS = ["bf16", "tf32"] if SUITE_DEVICE == "cuda" else [p for p in PRECISIONS if p == "bf16"]
"""Where ``batched_conv = "auto"`` picks ``nhwc`` with ``cuda_graphs = true`` (TF32 is CUDA's only)."""


@pytest.mark.parametrize("precision", GRAPHED_PRECISIONS)
@pytest.mark.parametrize("config", CNN_CASES)
def test_every_cnn_method_graphed_with_the_default_convolutions(config: dict[str, Any], precision: str, strict_vectorized: None) -> None:
    """The default of a graphed bf16 / TF32 run on CUDA: ``cuda_graphs = true`` with ``batched_conv = "auto"`` (``nhwc``
    there; ``grouped`` on the CPU stand-in), two rounds of the registry's CNN methods, round 1's training loss close
    to the graphed run's with ``grouped`` convolutions (``test_every_method`` runs no graphs)."""
    from chillfl.experiment import build_experiment

    over = {**config, "device": SUITE_DEVICE, "executor": "vectorized", "precision": precision, "cuda_graphs": True}
    assert build_experiment(load_config(None, over)).spec.batched_conv == ("nhwc" if SUITE_DEVICE == "cuda" else "grouped")
    out = run_experiment(load_config(None, over), write=False, progress=False)
    grouped = run_experiment(load_config(None, {**over, "batched_conv": "grouped"}), write=False, progress=False)
    assert len(out.records) == 2 and math.isfinite(out.records[-1]["train_loss"])
    assert out.records[0]["train_loss"] == pytest.approx(grouped.records[0]["train_loss"], rel=5e-2)


# ---------------------------------------------------------------- every registered model (generated from the registry)


@needs_cuda
@pytest.mark.parametrize("name,shape", model_cases())
def test_every_model_trains_on_cuda_with_deterministic_algorithms(name: str, shape: tuple[int, ...], deterministic_cuda: None, strict_vectorized: None) -> None:
    """CUDA refuses ops without a deterministic kernel here (FedChill's CNN1/CNN3 and the SVHN CNN did, in
    AdaptiveAvgPool2d(2)'s backward, before models/pooling.py); tests/test_deterministic_alerts.py is the CPU twin."""
    train_both_ways(name, shape, torch.device("cuda"))
