"""SAM (FedSAM / FedASAM) and DP-SGD steps under the vectorised executor: vmapped over clients, equal to the
sequential executor up to float rounding (the DP noise the very draws it makes), and bitwise repeatable."""

from __future__ import annotations

import dataclasses
import logging
import math

import pytest
import torch
from torch import nn

from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.step_graphs import TapeRecorder
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.privacy.dpsgd import PerSampleClipping
from chillfl.training.local import LocalOutcome, LocalSpec, model_state
from chillfl.training.schedule import Optimizer


def _jobs(model: nn.Module, sizes: tuple[int, ...] = (37, 20, 5, 16, 29)) -> list[ClientJob]:
    """Unequal client sizes (unequal schedules and short last batches), per-client lr and temperature."""
    start = model_state(model)
    gen = torch.Generator().manual_seed(3)
    jobs = []
    for c, n in enumerate(sizes):
        x, y = torch.randn(n, 12, generator=gen), torch.randint(0, 5, (n,), generator=gen)
        jobs.append(ClientJob(c, start, x, y, 0.05 * (1 + c / 4), 0.5 + c / 4, {}, 1000 + c))
    return jobs


def _mlp(batch_norm: bool = False) -> nn.Module:
    torch.manual_seed(0)
    middle: list[nn.Module] = [nn.BatchNorm1d(8)] if batch_norm else []
    return nn.Sequential(nn.Linear(12, 8), *middle, nn.ReLU(), nn.Linear(8, 5))


def _assert_close(ref: list[LocalOutcome], got: list[LocalOutcome], rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """The tolerance of the optimisers' vectorized-vs-sequential test (tests/test_optimizers.py): fp32 sums in another order."""
    for a, b in zip(ref, got, strict=True):
        assert a.num_steps == b.num_steps
        assert b.mean_loss == pytest.approx(a.mean_loss, rel=rtol)
        assert list(a.params) == list(b.params)
        for k in a.params:
            torch.testing.assert_close(b.params[k], a.params[k], rtol=rtol, atol=atol)


def _vectorized(model: nn.Module, spec: LocalSpec, jobs: list[ClientJob], chunk: int | None) -> tuple[VectorizedExecutor, list[LocalOutcome]]:
    vec = VectorizedExecutor(model, spec, chunk_size=chunk)
    try:
        return vec, vec.run(jobs)
    finally:
        vec.close()


def _bitwise(a: list[LocalOutcome], b: list[LocalOutcome]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.mean_loss == y.mean_loss and all(torch.equal(x.params[k], y.params[k]) for k in x.params)


SAM_CASES = [
    pytest.param(Optimizer("sgd", sam_rho=0.05), 0.0, False, id="sam"),
    pytest.param(Optimizer("sgd", sam_rho=0.5, sam_adaptive=True), 0.9, False, id="asam-momentum"),
    pytest.param(Optimizer("sgd", sam_rho=0.5, sam_adaptive=True, sam_eta=0.01), 0.0, False, id="asam-eta"),
    pytest.param(Optimizer("sgd", sam_rho=0.1), 0.5, True, id="sam-batchnorm"),
    pytest.param(Optimizer("adam", sam_rho=0.1, clip_norm=1.0), 0.0, False, id="sam-adam-clip"),
]


@pytest.mark.parametrize("optim,momentum,batch_norm", SAM_CASES)
def test_sam_steps_are_vmapped_and_equal_sequential(optim: Optimizer, momentum: float, batch_norm: bool) -> None:
    model = _mlp(batch_norm)
    spec = LocalSpec(epochs=2, batch_size=8, momentum=momentum, weight_decay=1e-2, optim=optim)
    jobs = _jobs(model)
    ref = SequentialExecutor(model, spec).run(jobs)
    plain = SequentialExecutor(model, LocalSpec(epochs=2, batch_size=8, momentum=momentum, weight_decay=1e-2, optim=Optimizer(optim.name))).run(jobs)
    assert not torch.allclose(ref[0].params["0.weight"], plain[0].params["0.weight"], rtol=1e-3, atol=1e-4)  # SAM moves the result
    for chunk in (None, 2):
        vec, got = _vectorized(model, spec, jobs, chunk)
        assert vec.fallback_reason is None and vec._per_client is False  # vmapped, not client by client
        _assert_close(ref, got)
    _bitwise(got, _vectorized(model, spec, jobs, 2)[1])  # two vectorized runs: bitwise the same


def _private_spec(clip: float, sigma: float) -> LocalSpec:
    return LocalSpec(epochs=2, batch_size=8, momentum=0.5, optim=Optimizer("sgd"), private=PerSampleClipping(clip, sigma))


@pytest.mark.parametrize("clip,sigma", [pytest.param(0.5, 0.0, id="clipped"), pytest.param(1e3, 1.0, id="noise"), pytest.param(0.5, 1.1, id="both")])
def test_dp_sgd_steps_are_vmapped_and_equal_sequential(clip: float, sigma: float) -> None:
    """With a large C the noise (std sigma C = 1000) dominates every step: equal results need the very same draws."""
    model = _mlp()
    spec = _private_spec(clip, sigma)
    jobs = _jobs(model)
    ref = SequentialExecutor(model, spec).run(jobs)
    for chunk in (None, 2):
        vec, got = _vectorized(model, spec, jobs, chunk)
        assert vec.fallback_reason is None and vec._per_client is False  # vmapped, not client by client
        _assert_close(ref, got, rtol=1e-4 if sigma else 1e-5)
    _bitwise(got, _vectorized(model, spec, jobs, 2)[1])
    if sigma and clip > 1:  # the noise is what moves the weights: another client's (or step's) draws would be far off
        assert math.isfinite(ref[0].mean_loss) and ref[0].params["0.weight"].abs().max() > 10


def test_dp_sgd_noise_is_each_clients_own() -> None:
    """Swapping two clients' seeds changes their results under both executors alike: the noise follows the job seed."""
    model = _mlp()
    spec = _private_spec(1e3, 1.0)
    jobs = _jobs(model, (16, 16, 16))
    swapped = [ClientJob(j.client_id, j.start, j.x, j.y, j.lr, j.temperature, j.context, jobs[1 - i].seed if i < 2 else j.seed) for i, j in enumerate(jobs)]
    ref = SequentialExecutor(model, spec).run(swapped)
    _assert_close(ref, _vectorized(model, spec, swapped, None)[1], rtol=1e-4)
    assert not torch.allclose(ref[0].params["0.weight"], SequentialExecutor(model, spec).run(jobs)[0].params["0.weight"])


def _resident(model: nn.Module, spec: LocalSpec, jobs: list[ClientJob], recorder: TapeRecorder | None) -> tuple[VectorizedExecutor, list[LocalOutcome]]:
    """The accelerator policy on the CPU (resident chunks), with ``cuda_graphs``' CPU stand-in when ``recorder`` is given."""
    vec = VectorizedExecutor(model, spec, accelerator=True, free_memory=lambda _d: 1 << 40, step_recorder=None if recorder is None else (lambda _d: recorder))
    try:
        out = vec.run(jobs)
    finally:
        vec.close()
    assert vec.fallback_reason is None and vec._per_client is False
    return vec, out


def test_recorded_sam_steps_replay_bitwise() -> None:
    """SAM's two gradients are one recordable step (no host read, no new input): replays give the eager bits."""
    model = _mlp(batch_norm=True)
    spec = LocalSpec(epochs=3, batch_size=8, momentum=0.9, cuda_graphs=True, optim=Optimizer("sgd", sam_rho=0.1, sam_adaptive=True))
    jobs = _jobs(model, (40, 40, 40, 36))
    recorder = TapeRecorder()
    vec, graphed = _resident(model, spec, jobs, recorder)
    assert vec.graphed(jobs[0].x.device) and recorder.replays > 0
    _bitwise(_resident(model, spec, jobs, None)[1], graphed)
    _assert_close(SequentialExecutor(model, spec).run(jobs), graphed)


def test_dp_sgd_steps_are_not_recorded_and_equal_sequential_resident() -> None:
    """DP-SGD's noise is a new host draw every step, which a replay would repeat: its steps stay eager."""
    model = _mlp()
    spec = LocalSpec(epochs=2, batch_size=8, cuda_graphs=True, private=PerSampleClipping(1e3, 1.0))
    jobs = _jobs(model, (40, 40, 40, 36))
    recorder = TapeRecorder()
    vec, got = _resident(model, spec, jobs, recorder)
    assert not vec.graphed(jobs[0].x.device) and recorder.captures == 0
    _assert_close(SequentialExecutor(model, spec).run(jobs), got, rtol=1e-4)


@pytest.mark.parametrize("spec", [
    pytest.param(LocalSpec(epochs=1, batch_size=8, compiled=True, optim=Optimizer("sgd", sam_rho=0.05)), id="sam"),
    pytest.param(LocalSpec(epochs=1, batch_size=8, compiled=True, private=PerSampleClipping(1.0, 1.0)), id="dp-sgd"),
])
def test_under_compile_they_still_train_vmapped_and_eager_saying_why(spec: LocalSpec, caplog: pytest.LogCaptureFixture) -> None:
    """Compiled graphs are the plain step's: these steps stay vmapped and eager, bitwise the run without ``compile``
    (client by client, the way they ran before, they were several times slower), and a warning says so."""
    model = _mlp()
    jobs = _jobs(model, (16, 9))
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        vec, got = _vectorized(model, spec, jobs, None)
    assert not vec._per_client and vec._compiled is None and vec.uncompiled_reason is not None
    assert any("not compiled" in r.getMessage() and "vmapped, eagerly" in r.getMessage() for r in caplog.records)
    _, eager = _vectorized(model, dataclasses.replace(spec, compiled=False), jobs, None)
    _bitwise(eager, got)

