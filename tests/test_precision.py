"""``memory_format`` and ``precision``: how a step is computed, never what is computed (beyond rounding)."""

from __future__ import annotations

import functools
import json

import pytest
import torch
from torch import nn

import chillfl.training.local as local
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment
from chillfl.training.local import LocalSpec, evaluate, model_state, resolve_compute, to_memory_format, train_client

from lent_pools import pools

BF16 = local.bf16_supported(torch.device("cpu"))
needs_bf16 = pytest.mark.skipif(not BF16, reason="this CPU has no bf16 kernels (oneDNN)")

BASE = {
    "device": "cpu",  # this module tests the CPU paths (bf16 via oneDNN, channels_last, the processes executor)
    "dataset.name": "digits",
    "federation.num_clients": 4,
    "federation.clients_per_round": 2,
    "federation.rounds": 2,
    "eval.clients": "none",
    "model.name": "flexchill_cnn",
    "client.momentum": 0.5,
    "client.batch_size": 32,
}


def _records(**extra: object) -> str:
    out = run_experiment(load_config(None, {**BASE, **extra}), write=False, progress=False, pools=pools())  # processes: lent workers (lent_pools)
    return json.dumps(out.records, sort_keys=True)


@functools.cache
def _reference(**extra: object) -> str:
    """One run per setting shared by the tests (a second, fresh run checks determinism)."""
    return _records(**extra)


def _cnn_bn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 5)
    )


def _client(n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g)


def _train(spec: LocalSpec, model: nn.Module | None = None) -> local.LocalOutcome:
    model = model or _cnn_bn()
    x, y = _client()
    return train_client(model, model_state(model), x, y, spec=spec, lr=0.05, temperature=1.0, context={}, generator=torch.Generator().manual_seed(3))


# ------------------------------------------------------------------ the rule and its errors


def test_auto_is_channels_last_for_conv2d_models_on_the_cpu_only():
    cpu, conv, mlp = torch.device("cpu"), _cnn_bn(), nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    assert resolve_compute("auto", "fp32", conv, cpu) == ("channels_last", "fp32")
    assert resolve_compute("auto", "fp32", mlp, cpu) == ("contiguous", "fp32")
    assert resolve_compute("auto", "fp32", nn.Conv1d(2, 2, 3), cpu) == ("contiguous", "fp32")  # no 4-d tensors
    assert resolve_compute("auto", "fp32", conv, torch.device("meta")) == ("contiguous", "fp32")
    assert resolve_compute("contiguous", "fp32", conv, cpu) == ("contiguous", "fp32")
    assert resolve_compute("channels_last", "fp32", mlp, cpu) == ("channels_last", "fp32")
    # with a sample input the conv sizes decide: 8x8 -> 8*8*8 + 8*6*6 = 800 outputs (small, stays contiguous);
    assert resolve_compute("auto", "fp32", conv, cpu, torch.zeros(1, 3, 8, 8)) == ("contiguous", "fp32")
    # one padded 3->8 conv on 32x32: 8*32*32 = 8,192 outputs, the threshold itself (channels-last); on 31x31: 7,688
    wide = nn.Conv2d(3, 8, 3, padding=1)
    assert resolve_compute("auto", "fp32", wide, cpu, torch.zeros(1, 3, 32, 32)) == ("channels_last", "fp32")
    assert resolve_compute("auto", "fp32", wide, cpu, torch.zeros(1, 3, 31, 31)) == ("contiguous", "fp32")
    assert resolve_compute("channels_last", "fp32", conv, cpu, torch.zeros(1, 3, 8, 8)) == ("channels_last", "fp32")


def test_bf16_on_a_device_without_it_is_a_config_error(monkeypatch):
    monkeypatch.setattr(local, "bf16_supported", lambda device: False)
    with pytest.raises(ConfigError) as info:
        resolve_compute("auto", "bf16", _cnn_bn(), torch.device("cpu"))
    assert info.value.field == "precision"


@pytest.mark.parametrize(
    "override, field",
    [("memory_format=nhwc", "memory_format"), ("precision=fp16", "precision"), ("precision=1", "precision")],
)
def test_bad_values_exit_2_with_one_line_naming_the_field(tmp_path, capsys, override, field):
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", "federation.rounds=1", override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: {field}:"), err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unsupported_bf16_exits_2_via_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(local, "bf16_supported", lambda device: False)
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", "federation.rounds=1", "precision=bf16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("chillfl: error: precision:"), err


# ------------------------------------------------------------------ channels-last: same fp32 maths


def test_channels_last_training_equals_contiguous_and_returns_contiguous_state():
    ref = _train(LocalSpec(2, 8, momentum=0.9, weight_decay=1e-3))
    got = _train(LocalSpec(2, 8, momentum=0.9, weight_decay=1e-3, memory_format="channels_last"))
    assert got.num_steps == ref.num_steps == 10
    assert abs(got.mean_loss - ref.mean_loss) < 1e-5
    for k, v in ref.params.items():
        assert got.params[k].is_contiguous()  # aggregation, checkpoints and evaluation see the usual layout
        torch.testing.assert_close(got.params[k], v, atol=1e-5, rtol=1e-4)


def test_channels_last_step_really_runs_channels_last():
    """The batch and the conv weights the forward sees are NHWC (else the option would do nothing)."""
    model, seen = _cnn_bn(), []
    model[0].register_forward_pre_hook(lambda m, inputs: seen.append(inputs[0].is_contiguous(memory_format=torch.channels_last)))
    _train(LocalSpec(1, 40, memory_format="channels_last"), model)
    _train(LocalSpec(1, 40), model)
    assert seen == [True, False]


def test_channels_last_run_is_deterministic_and_close_to_contiguous():
    cl = _reference(memory_format="channels_last", precision="fp32")
    assert _records(memory_format="channels_last") == cl
    ref = _reference(memory_format="contiguous")
    for a, b in zip(json.loads(ref), json.loads(cl)):
        assert abs(a["global_loss"] - b["global_loss"]) < 1e-4  # accuracies: only between bitwise runs (tests/float_paths.py)


def test_sequential_and_processes_are_bitwise_equal_and_vectorized_close_with_channels_last():
    ref = _reference(memory_format="channels_last", precision="fp32")
    assert _records(executor="processes", memory_format="channels_last", precision="fp32") == ref
    vec = json.loads(_records(executor="vectorized", memory_format="channels_last", precision="fp32"))  # digits' small CNN: vmapped
    for a, b in zip(json.loads(ref), vec):
        assert abs(a["global_loss"] - b["global_loss"]) < 1e-4


def _big_conv_jobs() -> tuple[nn.Module, list[ClientJob]]:
    """A CNN whose first conv outputs 8 x 32 x 32 = 8192 elements a sample: the per-client threshold."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.MaxPool2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 5))
    g = torch.Generator().manual_seed(4)
    jobs = [ClientJob(c, model_state(model), torch.randn(12 + 4 * c, 3, 32, 32, generator=g), torch.randint(0, 5, (12 + 4 * c,), generator=g), 0.1, 1.0, {}, 70 + c) for c in range(3)]
    return model, jobs


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=needs_bf16)])
def test_vectorized_trains_big_conv_models_per_client_with_sequential_bits(precision):
    """Large convolutions on the CPU: each client unvmapped on the executor's threads, so sequential's very bits."""
    from chillfl.executors.vectorized import PER_CLIENT_MIN_CONV_OUTPUTS, conv_outputs_per_sample, per_client_steps

    model, jobs = _big_conv_jobs()
    assert conv_outputs_per_sample(model, jobs[0].x) == 8192 == PER_CLIENT_MIN_CONV_OUTPUTS
    assert per_client_steps(model, jobs[0].x) and not per_client_steps(nn.Conv2d(3, 7, 3, padding=1), jobs[0].x)  # 7168 a sample: vmapped
    assert not per_client_steps(nn.Linear(3 * 32 * 32, 5), jobs[0].x.flatten(1))  # no convolution
    spec = LocalSpec(2, 8, momentum=0.5, memory_format="channels_last", precision=precision)
    ref = SequentialExecutor(model, spec).run(jobs)
    vec = VectorizedExecutor(model, spec, workers=2)
    got = vec.run(jobs)
    vec.close()
    assert vec.fallback_reason is None and vec._per_client
    for a, b in zip(ref, got):
        assert a.mean_loss == b.mean_loss and all(torch.equal(a.params[k], b.params[k]) for k in a.params)


# ------------------------------------------------------------------ evaluation


def test_evaluation_is_unaffected_by_the_state_layout():
    model = _cnn_bn()
    state = {k: v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v for k, v in model_state(model).items()}
    x, y = _client(64)
    ref = evaluate(model, state, x, y)
    assert evaluate(model, to_memory_format(state, "channels_last"), x, y) == ref  # bitwise


# ------------------------------------------------------------------ bf16


@needs_bf16
def test_bf16_training_is_close_to_fp32_and_keeps_an_fp32_state():
    ref = _train(LocalSpec(2, 8, momentum=0.9))
    got = _train(LocalSpec(2, 8, momentum=0.9, precision="bf16"))
    assert abs(got.mean_loss - ref.mean_loss) < 0.02 * abs(ref.mean_loss)
    start = model_state(_cnn_bn())
    for k, v in ref.params.items():
        assert got.params[k].dtype == v.dtype
        if v.is_floating_point() and k.endswith("weight"):  # the training updates differ by bf16 rounding only (< 10 %)
            update, bf16_update = v - start[k], got.params[k] - start[k]
            assert (bf16_update - update).norm() <= 0.1 * update.norm(), k
    assert any(not torch.equal(got.params[k], v) for k, v in ref.params.items())  # bf16 did change the arithmetic


@needs_bf16
def test_bf16_forward_runs_in_bf16():
    model, dtypes = _cnn_bn(), []
    model[0].register_forward_hook(lambda m, i, out: dtypes.append(out.dtype))
    _train(LocalSpec(1, 40, precision="bf16"), model)
    assert dtypes == [torch.bfloat16]


@needs_bf16
def test_bf16_run_is_deterministic_and_close_to_fp32():
    bf = _reference(memory_format="channels_last", precision="bf16")
    assert _records(memory_format="channels_last", precision="bf16") == bf
    ref = _reference(memory_format="channels_last", precision="fp32")
    for a, b in zip(json.loads(ref), json.loads(bf)):
        assert abs(a["global_acc"] - b["global_acc"]) <= 0.05
        assert abs(a["global_loss"] - b["global_loss"]) <= 0.05 * a["global_loss"]


@needs_bf16
def test_vectorized_bf16_mlp_matches_sequential_within_bf16_rounding():
    """A vmapped model (an MLP: no Conv2d) under bf16 autocast keeps factored linear gradients, close to sequential."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))
    spec = LocalSpec(2, 8, momentum=0.5, precision="bf16")
    g = torch.Generator().manual_seed(1)
    jobs = [ClientJob(c, model_state(model), torch.randn(24, 12, generator=g), torch.randint(0, 5, (24,), generator=g), 0.1, 1.0, {}, 50 + c) for c in range(3)]
    ref = SequentialExecutor(model, spec).run(jobs)
    vec = VectorizedExecutor(model, spec)
    got = vec.run(jobs)
    assert vec.fallback_reason is None and vec._factored  # vmapped, factored gradients kept
    for a, b in zip(ref, got):
        for k, v in a.params.items():
            torch.testing.assert_close(b.params[k], v, atol=2e-2, rtol=2e-2)


def test_two_conv_cnn_pools_before_relu_with_the_same_bits_as_relu_before_pool():
    """relu(maxpool(z)) == maxpool(relu(z)), forward and gradients, bit for bit (the cheaper order, models/cnn.py)."""
    from chillfl.models import build_model

    model = build_model("mcmahan_cnn", (3, 32, 32), 10, {}, seed=0)
    f = model.features
    assert [type(m) for m in f] == [nn.Conv2d, nn.MaxPool2d, nn.ReLU] * 2
    paper_order = nn.Sequential(f[0], nn.ReLU(), nn.MaxPool2d(2), f[3], nn.ReLU(), nn.MaxPool2d(2))
    x = torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    grads = []
    for net in (f, paper_order):
        out = net(x)
        (weight,) = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), [f[0].weight])
        grads.append((out, weight))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


@pytest.mark.usefixtures("no_strict_fallbacks")  # a fallback on purpose
def test_vectorized_conv_model_with_dropout_still_falls_back_instead_of_racing_threads():
    """Per-client threads would race for torch's global generator: a step that cannot be vmapped falls back as before."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(4), nn.ReLU(), nn.Dropout(0.5), nn.Flatten(), nn.Linear(8 * 8 * 8, 5))
    spec = LocalSpec(1, 8)
    g = torch.Generator().manual_seed(2)
    jobs = [ClientJob(c, model_state(model), torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 5, (16,), generator=g), 0.1, 1.0, {}, 9 + c) for c in range(4)]
    vec = VectorizedExecutor(model, spec, workers=2)
    got = vec.run(jobs)
    assert vec.fallback_reason is not None
    for a, b in zip(SequentialExecutor(model, spec).run(jobs), got):
        assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)
    vec.close()


@pytest.mark.parametrize("method", ["scarlet", "fedmd"])
def test_soft_label_phases_use_the_runs_compute_settings(method: str) -> None:
    """Distillation on the public set, the server model's training and FedMD's transfer learning (its declared pretraining) are trained like private data.

    Before, SCARLET's distill/server specs were built without these fields, and
    later FedMD's transfer spec too, so those phases silently ran contiguous
    fp32 whatever the config said.
    """
    from chillfl.experiment import build_experiment, build_protocol

    precision = "bf16" if BF16 else "fp32"
    over = {**BASE, "memory_format": "channels_last", "precision": precision, "batched_conv": "gemm", "executor": "vectorized",
            "distillation.method": method, "distillation.public_size": 60, "distillation.subset_size": 20}
    if method == "fedmd":
        over["distillation.transfer_epochs"] = 1
    protocol = build_protocol(build_experiment(load_config(None, over)))
    specs = protocol.specs  # type: ignore[attr-defined]
    transfer = protocol.client.pretraining  # type: ignore[attr-defined]
    phases = [specs.client, specs.distill, specs.server] + (list(transfer.specs) if method == "fedmd" else [])
    assert method != "fedmd" or transfer is not None
    for spec in phases:
        assert (spec.memory_format, spec.precision, spec.batched_conv) == ("channels_last", precision, "gemm")
    for spec in phases[1:]:  # a phase keeps the run's optimiser but none of the private objective's terms
        assert (spec.momentum, spec.optim, tuple(spec.terms), spec.augment) == (0.5, specs.client.optim, (), None)


def test_fp32_batch_norm_mode_runs_bf16_batch_norm_in_fp32_under_vmap() -> None:
    """The vmapped bf16 step on CUDA runs batch norm on fp32 inputs (its batched backward refuses the bf16/fp32 mix
    there); the mode itself is device-independent, so it is checked here: fp32 maths, bf16 out, gradients flow."""
    from torch.nn import functional as F

    x = torch.randn(2, 3, 4, 5, 5).bfloat16().requires_grad_(True)  # 2 clients, batch 3, 4 channels
    w, b = torch.rand(4) + 0.5, torch.randn(4)

    def bn(xi: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(xi, None, None, w, b, training=True)

    with local.Fp32BatchNorm():
        out = torch.func.vmap(bn)(x)
    assert out.dtype == torch.bfloat16
    expected = torch.stack([bn(xi.detach().float()) for xi in x]).bfloat16()
    assert torch.equal(out, expected)
    (grad,) = torch.autograd.grad(out.float().sum(), [x])
    assert grad.dtype == torch.bfloat16 and torch.isfinite(grad.float()).all()


def test_fp32_batch_norm_mode_only_where_needed() -> None:
    spec = lambda precision: local.LocalSpec(epochs=1, batch_size=8, precision=precision)  # noqa: E731
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert isinstance(local.batch_norm_mode(spec("bf16"), cuda, vmapped=True), local.Fp32BatchNorm)
    for args in ((spec("bf16"), cpu, True), (spec("bf16"), cuda, False), (spec("fp32"), cuda, True)):
        assert not isinstance(local.batch_norm_mode(*args), local.Fp32BatchNorm)
    gemm = local.LocalSpec(epochs=1, batch_size=8, precision="bf16", batched_conv="gemm")  # its NHWC outputs: the CPU refuses the mix too
    assert isinstance(local.batch_norm_mode(gemm, cpu, vmapped=True), local.Fp32BatchNorm)
    assert not isinstance(local.batch_norm_mode(gemm, cpu, vmapped=False), local.Fp32BatchNorm)
