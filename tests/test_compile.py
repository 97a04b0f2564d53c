"""``compile = true``: the vectorised executor's all-client step through torch.compile (chillfl.executors.compiled).

A compiled step rounds differently from the eager one (inductor fuses and
reorders float arithmetic), so compiled runs are compared with eager ones
within float rounding, and with each other (and across a resume, and across
two fresh processes with empty compile caches) bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch
from torch import nn
from torch.func import vmap

import chillfl.executors.compiled as compiled
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.executors.compiled import CompiledSteps, CompileFailed, check_toolchain
from chillfl.executors.sequential import ClientJob
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.training.local import LocalOutcome, LocalSpec, model_state
from float_paths import REL, TRAJECTORY_REL, assert_close, assert_records_close
from methods_e2e import records
from resume_cases import TINY, check_resume, overrides

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # torch's own, raised as inductor loads


@pytest.fixture(autouse=True, scope="module")
def inductor_cache_per_isa() -> Iterator[None]:
    """Compiled kernels cached per ``ATEN_CPU_CAPABILITY``: torch 2.13's cache keys miss it, and kernels built under
    another value crashed (CI reruns these tests on AVX2 kernels; chillfl.executors.compiled's Choices). Without it
    set, torch's own folder, which a later session finds warm."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    isa = os.environ.get("ATEN_CPU_CAPABILITY")
    with pytest.MonkeyPatch.context() as mp:
        if isa:
            mp.setenv("TORCHINDUCTOR_CACHE_DIR", f"{os.environ.get('TORCHINDUCTOR_CACHE_DIR') or default_cache_dir()}-{isa}")
        yield


SIZES = [40, 40, 40, 40, 24, 20]  # batches of 8: clients 4 and 5 run out first, client 5 ends each epoch on 4 rows


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 16), nn.ReLU(), nn.Linear(16, 5))


def _jobs(model: nn.Module) -> list[ClientJob]:
    start = model_state(model)
    g = torch.Generator().manual_seed(3)
    jobs = []
    for c, n in enumerate(SIZES):
        x, y = torch.randn(n, 1, 6, 6, generator=g), torch.randint(0, 5, (n,), generator=g)
        jobs.append(ClientJob(c, start, x, y, 0.05, 1.0 / (1 + c), {}, 100 + c))
    return jobs


def _train(compile_: bool, accelerator: bool = False) -> tuple[list[LocalOutcome], VectorizedExecutor]:
    model = _model()
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.9, compiled=compile_)
    ex = VectorizedExecutor(model, spec, chunk_size=len(SIZES), accelerator=accelerator, free_memory=lambda _d: 1 << 40)
    out = ex.run(_jobs(model))
    assert ex.fallback_reason is None
    return out, ex


@pytest.mark.parametrize("accelerator", [False, True], ids=["cpu-policy", "accelerator-policy"])
def test_only_the_steps_of_every_client_at_full_batch_are_compiled(monkeypatch: pytest.MonkeyPatch, accelerator: bool) -> None:
    """Steps of only some clients (short batches, clients whose data ran out) stay eager: their shapes vary."""
    shapes: list[tuple[int, ...]] = []

    def eager_twin(_self: CompiledSteps, fn: Callable[..., Any], args: Any) -> Any:
        shapes.append(tuple(args[len(_model().state_dict())].shape[:2]))  # x follows the parameters and buffers
        return vmap(fn)(*args)

    monkeypatch.setattr(CompiledSteps, "__call__", eager_twin)
    out, ex = _train(True, accelerator)
    # 5 batches an epoch for clients 0-3, 3 (8, 8, 8) for client 4, 3 (8, 8, 4) for client 5: every client has a
    # full batch at the first two steps of each of the two epochs; the rest are steps of some clients or a short batch
    assert shapes == [(6, 8)] * 4
    assert [o.num_steps for o in out] == [10, 10, 10, 10, 6, 6]
    assert not ex._factored and not ex._deferred  # a compiled forward hides a linear layer's output gradient from autograd


def test_a_short_last_batch_stays_eager_even_when_every_client_of_the_chunk_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of one client: every step is a step of the whole chunk, but a short batch's size varies between clients
    and seeds, and each size would be compiled."""
    shapes: list[tuple[int, ...]] = []

    def eager_twin(_self: CompiledSteps, fn: Callable[..., Any], args: Any) -> Any:
        shapes.append(tuple(args[len(_model().state_dict())].shape[:2]))
        return vmap(fn)(*args)

    monkeypatch.setattr(CompiledSteps, "__call__", eager_twin)
    model = _model()
    ex = VectorizedExecutor(model, LocalSpec(epochs=2, batch_size=8, compiled=True), chunk_size=1)
    out = ex.run(_jobs(model))
    assert [o.num_steps for o in out] == [10, 10, 10, 10, 6, 6]
    # 2 x 5 full batches for clients 0-3 and 2 x 3 for client 4; client 5's 2 x (8, 8, 4): its two short ones stay eager
    assert shapes == [(1, 8)] * (4 * 10 + 6 + 4)


def test_runs_of_one_step_structure_share_compiled_graphs_and_other_structures_never_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled, "_BY_STRUCTURE", {})
    monkeypatch.setattr(compiled, "REUSES", 3)
    spec = LocalSpec(epochs=1, batch_size=8, compiled=True)
    takes = [VectorizedExecutor(_model(), spec)._compiled for _ in range(4)]
    assert takes[0] is takes[1] is takes[2] and takes[3] is not takes[0]  # the fourth run gets a fresh one (REUSES)
    wider = nn.Sequential(nn.Flatten(), nn.Linear(36, 5))
    assert VectorizedExecutor(wider, spec)._compiled is not takes[3]  # another architecture: its own
    bf16 = LocalSpec(epochs=1, batch_size=8, compiled=True, precision="bf16")
    assert VectorizedExecutor(_model(), bf16)._compiled is not takes[3]  # other compute settings: their own
    assert VectorizedExecutor(_model(), LocalSpec(epochs=1, batch_size=8))._compiled is None


def test_compiled_steps_train_as_eager_ones_within_rounding() -> None:
    """Batch norm (its running statistics updated inside the compiled step), momentum, short batches."""
    eager, _ = _train(False)
    twice = [_train(True)[0] for _ in range(2)]
    for a, b in zip(eager, twice[0], strict=True):
        assert a.num_steps == b.num_steps
        assert_close(a.params, b.params, "params", rel=REL)
        assert b.mean_loss == pytest.approx(a.mean_loss, rel=REL)
    for a, b in zip(*twice, strict=True):  # compiled again (torch's cache): the same bits
        assert a.mean_loss == b.mean_loss and all(torch.equal(a.params[k], b.params[k]) for k in a.params)


def test_a_compiled_run_is_close_to_the_eager_run_and_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    over = {**TINY, "executor": "vectorized", "federation.clients_per_round": 4, "client.batch_size": 16}
    eager = load_config(None, over)
    assert_records_close(records(eager), records(eager.with_overrides({"compile": True})), rel=TRAJECTORY_REL)
    check_resume("algorithm.fedavg", "vectorized", 1, tmp_path, monkeypatch, compile=True)


COMPILED_METHODS = ("algorithm.scaffold", "algorithm.fedprox", "algorithm.moon", "algorithm.pfedme", "distillation.scarlet", "prototypes.fedproto", "temperature.fedchill")
"""One of each kind of step input: control variates and a global model in the context, a previous model's features,
an inner loop, the soft-label protocol's distillation phase, prototypes, per-client temperatures. Every registered
method was run once this way by hand (closing note of issue 39's compile step): all within TRAJECTORY_REL of eager."""


@pytest.mark.slow
@pytest.mark.parametrize("method", COMPILED_METHODS)
def test_methods_train_compiled_as_they_train_eagerly_within_rounding(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = CompiledSteps.__call__
    monkeypatch.setattr(CompiledSteps, "__call__", lambda self, fn, args: calls.append(1) or real(self, fn, args))
    cfg = load_config(None, {**TINY, "executor": "vectorized", "client.epochs": 2}).with_overrides(overrides(method))
    eager = records(cfg)
    assert not calls
    assert_records_close(eager, records(cfg.with_overrides({"compile": True})), rel=TRAJECTORY_REL)
    assert calls  # the method's steps were compiled, not all left to the fallback


@pytest.mark.slow
def test_two_fresh_processes_compile_the_same_bits_and_leave_no_process(tmp_path: Path) -> None:
    """Empty compile caches in each process (inductor compiles from scratch), the CLI's run: the same metrics, byte for byte.

    Inductor compiles in worker processes of its own; nothing of the run's session is left once it ends.
    The two processes run side by side (each its own cache folder and session): the same check, in about half the
    time where a second core is free.
    """
    config = tmp_path / "run.toml"
    config.write_text('[dataset]\nname = "digits"\n[model]\nname = "mlp"\nhidden = [16]\n[federation]\nnum_clients = 6\nclients_per_round = 3\nrounds = 2\n'
                      '[client]\nbatch_size = 16\n[partition]\nname = "iid"\n')
    procs = []
    try:
        for i in range(2):
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{i}"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
            cmd = [sys.executable, "-m", "chillfl", "run", str(config), "-q", f"name=run{i}", f"out_dir={tmp_path}", "executor=vectorized", "compile=true"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True))
        folders = []
        for i, proc in enumerate(procs):
            _, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err
            assert not _session_members(proc.pid), "a process of the run outlived it"
            folders.append(tmp_path / f"run{i}")
    finally:
        for proc in procs:  # a failed assertion on the first leaves no second run behind
            proc.kill()
            proc.wait()
    assert (folders[0] / "metrics.jsonl").read_bytes() == (folders[1] / "metrics.jsonl").read_bytes()
    assert "compile = true" in (folders[0] / "config.toml").read_text()


def _session_members(sid: int) -> list[int]:
    """Live processes whose session id is ``sid`` (field 6 of /proc/PID/stat)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(pid))
    return found


def test_compile_needs_the_vectorised_executor() -> None:
    for executor in ("sequential", "processes", "ray"):
        with pytest.raises(ConfigError) as err:
            load_config(None, {"compile": True, "executor": executor})
        assert err.value.field == "compile" and "'vectorized' or 'auto'" in err.value.message
    assert load_config(None, {"compile": True, "executor": "auto"}).compile


def test_the_cli_refuses_compile_on_another_executor_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import main

    config = tmp_path / "run.toml"
    config.write_text('[dataset]\nname = "digits"\n[model]\nname = "mlp"\n')
    assert main(["run", str(config), "-q", f"out_dir={tmp_path / 'out'}", "compile=true", "executor=sequential"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("chillfl: error: compile: ") and "\n" not in err
    assert not (tmp_path / "out").exists()  # nothing written


def test_a_missing_toolchain_is_a_config_error_naming_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.config as inductor
    import torch.utils._triton as triton

    with inductor.patch({"cpp.cxx": ("/nonexistent/c++-for-this-test",)}), pytest.raises(ConfigError, match="C\\+\\+ compiler") as err:
        check_toolchain(torch.device("cpu"))
    assert err.value.field == "compile"
    monkeypatch.setattr(triton, "has_triton", lambda: False)
    with pytest.raises(ConfigError, match="Triton"):
        check_toolchain(torch.device("cuda"))
    with pytest.raises(ConfigError, match="'mps'"):
        check_toolchain(torch.device("mps"))


class _FailsBackward(torch.autograd.Function):
    """Identity forward; its backward fails, as a compiled backward kernel can (torch 2.13: "tuple args required")."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("tuple args required")


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_compiler_failure_stops_the_run_in_one_line_never_a_silent_fallback(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The step runs eagerly (tried once), so the failure is the compiler's: CompileFailed naming ``compile``, not the
    fallback to the sequential executor, which would report eager speed as compiled."""

    def broken(_self: CompiledSteps, fn: Callable[..., Any], args: Any) -> Any:
        if where == "forward":
            raise RuntimeError("backend='inductor' raised:\nCppCompileError: C++ compile failed\n\nmore lines")
        losses, *rest = vmap(fn)(*args)
        return (_FailsBackward.apply(losses), *rest)

    monkeypatch.setattr(CompiledSteps, "__call__", broken)
    with pytest.raises(CompileFailed) as err:
        _train(True)
    assert err.value.field == "compile" and "\n" not in str(err.value)
    said = "raised: CppCompileError: C++ compile failed" if where == "forward" else "RuntimeError: tuple args required"
    assert said in err.value.message and "more lines" not in err.value.message


def test_more_step_shapes_than_the_limit_is_an_error_not_a_silent_eager_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past torch's recompile limit a function runs eagerly, silently: its kernels would depend on the order of shapes."""
    from torch._dynamo.exc import FailOnRecompileLimitHit

    monkeypatch.setattr(compiled, "COMPILE_LIMIT", 1)
    steps = CompiledSteps()
    assert steps(lambda a: (a.sum(),), (torch.ones(2, 5),))[0].tolist() == [5.0, 5.0]
    with pytest.raises(FailOnRecompileLimitHit):
        steps(lambda a: (a.sum(),), (torch.ones(3, 5),))
    assert CompiledSteps()(lambda a: (a.sum(),), (torch.ones(3, 5),))[0].tolist() == [5.0] * 3  # the limit is each executor's own


def test_a_run_that_trains_client_by_client_says_its_steps_are_not_compiled(caplog: pytest.LogCaptureFixture) -> None:
    """The CPU trains large convolutions one client at a time, unvmapped: ``compile`` then has nothing to compile, and says so."""
    import logging

    model = nn.Sequential(nn.Conv2d(3, 32, 5, padding=2), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 16 * 16, 5))  # 8,192 conv outputs a sample
    g = torch.Generator().manual_seed(0)
    jobs = [ClientJob(c, model_state(model), torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 5, (8,), generator=g), 0.05, 1.0, {}, c) for c in range(2)]
    ex = VectorizedExecutor(model, LocalSpec(epochs=1, batch_size=8, compiled=True))
    with caplog.at_level(logging.WARNING, logger="chillfl.executors.vectorized"):
        ex.run(jobs)
        ex.run(jobs)
    said = [r.message for r in caplog.records if r.message.startswith("compile:")]
    assert said == ["compile: this run trains client by client (large convolutions on the CPU), whose steps are not compiled"]


def test_auto_choosing_another_executor_says_its_steps_are_not_compiled(caplog: pytest.LogCaptureFixture) -> None:
    """``executor = "auto"`` trains one client a round sequentially: nothing is compiled, and the run says so."""
    import logging

    from chillfl.runner import run_experiment

    cfg = load_config(None, {**TINY, "executor": "auto", "compile": True, "federation.clients_per_round": 1, "federation.rounds": 1})
    with caplog.at_level(logging.WARNING, logger="chillfl.executors.parallel"):
        run_experiment(cfg, write=False, progress=False)
    assert [r.message for r in caplog.records if r.message.startswith("compile:")] == [
        "compile: executor auto chose 'sequential' for this run, whose steps are not compiled; executor = \"vectorized\" compiles them"
    ]
