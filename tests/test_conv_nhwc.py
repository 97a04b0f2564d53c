"""``batched_conv = "nhwc"``: the clients' convolutions as one channels-last grouped convolution (chillfl.training.conv_nhwc)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils._python_dispatch import TorchDispatchMode

from chillfl.config import load_config
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.runner import run_experiment
from chillfl.training.batched_conv import batched_conv_mode
from chillfl.training.conv_nhwc import NhwcConvolutions, conv2d_nhwc, fold_input, fold_weight
from chillfl.training.local import LocalSpec, model_state

from float_paths import REL, TRAJECTORY_REL
from test_conv_gemm import _AsksForChannelsLast
from test_precision import BASE as PRECISION_BASE


class _Convolutions(TorchDispatchMode):
    """Each convolution below vmap's rules: (op, groups, input channels-last?, output mask), as the device would get it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name == "convolution":
            self.calls.append((name, args[8], args[0].is_contiguous(memory_format=torch.channels_last), None))
        elif name == "convolution_backward":
            self.calls.append((name, args[9], args[1].is_contiguous(memory_format=torch.channels_last), tuple(args[10])))
        return func(*args, **(kwargs or {}))


def test_the_fold_interleaves_the_clients_channels_as_groups():
    """Client b's channel c is group b's channel c: channel b * C + c of the folded NHWC tensor, for inputs and weights."""
    x = torch.arange(2 * 3 * 2 * 4 * 5, dtype=torch.float32).reshape(2, 3, 2, 4, 5)  # [clients 2, N 3, C 2, H 4, W 5]
    folded = fold_input(x)
    assert folded.shape == (3, 4, 4, 5) and folded.is_contiguous(memory_format=torch.channels_last)
    for b in range(2):
        for c in range(2):
            assert torch.equal(folded[:, b * 2 + c], x[b, :, c])
    w = torch.arange(2 * 3 * 2 * 3 * 3, dtype=torch.float32).reshape(2, 3, 2, 3, 3)  # [clients 2, O 3, C 2, 3, 3]
    wf = fold_weight(w)
    assert wf.shape == (6, 2, 3, 3) and wf.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(wf[4], w[1, 1])  # client 1's output channel 1 is filter 1 * 3 + 1
    already = x.permute(1, 3, 4, 0, 2).contiguous().permute(3, 0, 4, 1, 2)  # a previous nhwc convolution's output layout
    assert fold_input(already).data_ptr() == already.data_ptr()  # folded without a copy


@pytest.mark.parametrize("stride, padding, dilation, bias", [(1, 0, 1, True), (2, 1, 1, True), ((1, 2), (0, 1), (2, 1), False)])
def test_one_client_equals_conv2d_values_and_gradients(stride, padding, dilation, bias):
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(4, 3, 9, 10, generator=g), torch.randn(5, 3, 3, 3, generator=g), torch.randn(5, generator=g)
    args = [x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_() if bias else None]
    ref_args = [a.detach().clone().requires_grad_() if a is not None else None for a in args]
    got = conv2d_nhwc(*args, stride=stride, padding=padding, dilation=dilation)
    ref = F.conv2d(*ref_args, stride=stride, padding=padding, dilation=dilation)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    upstream = torch.randn(ref.shape, generator=g)
    got.backward(upstream)
    ref.backward(upstream)
    for a, r in zip(args, ref_args):
        if a is not None:
            torch.testing.assert_close(a.grad, r.grad, rtol=1e-5, atol=1e-5)


def _cnn(batch_norm: bool = False) -> nn.Module:
    torch.manual_seed(0)
    norm = [nn.BatchNorm2d(6)] if batch_norm else []
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), *norm, nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 2 * 2, 5))


def _vmapped_grads(mode: str, clients: int = 3, batch_norm: bool = False) -> tuple[dict[str, torch.Tensor], _Convolutions]:
    model = _cnn(batch_norm)
    g = torch.Generator().manual_seed(2)
    params = {k: v.detach() + 0.01 * torch.randn(clients, *v.shape, generator=g) for k, v in model.named_parameters()}
    buffers = {k: v.expand(clients, *v.shape).clone() for k, v in model.named_buffers()}
    x, y = torch.randn(clients, 6, 3, 8, 8, generator=g), torch.randint(0, 5, (clients, 6), generator=g)

    def loss(p, bufs, xb, yb):
        with batched_conv_mode(mode, vmapped=True):
            return F.cross_entropy(functional_call(model, (p, bufs), (xb,)), yb)

    seen = _Convolutions()
    with seen:
        grads = vmap(grad(loss))(params, buffers, x, y)
    return grads, seen


def test_vmapped_step_runs_every_convolution_grouped_and_nhwc_with_the_same_gradients():
    """Each client's gradient as vmap's own NCHW grouped convolutions give it; below vmap every convolution and
    gradient is ONE grouped call over the 3 clients on a channels-last input, and the data's gradient is never taken."""
    got, seen = _vmapped_grads("nhwc")
    ref, plain = _vmapped_grads("grouped")
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)
    assert [c[0] for c in plain.calls] == ["convolution", "convolution", "convolution_backward", "convolution_backward"]
    assert not any(channels_last for _, _, channels_last, _ in plain.calls)  # what vmap's own fold hands the kernel
    assert sorted(seen.calls) == sorted([
        ("convolution", 3, True, None), ("convolution", 3, True, None),  # the two layers' forwards
        ("convolution_backward", 3, True, (False, True, False)),  # first layer: its weight gradient only (the input is data)
        ("convolution_backward", 3, True, (True, False, False)), ("convolution_backward", 3, True, (False, True, False)),  # second layer
    ])


def test_unbatched_weights_are_each_clients_own():
    """A weight vmap does not batch (one model for every client's input) is expanded to each client: same as F.conv2d."""
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(4, 2, 3, 7, 7, generator=g), torch.randn(5, 3, 3, 3, generator=g), torch.randn(5, generator=g)
    with NhwcConvolutions():
        got = vmap(lambda xb: F.conv2d(xb, w, b, padding=1))(x)
    torch.testing.assert_close(got, torch.stack([F.conv2d(xb, w, b, padding=1) for xb in x]), rtol=1e-5, atol=1e-5)


def test_batch_norm_after_an_nhwc_convolution_gets_an_input_vmap_can_question():
    """torch 2.11's CUDA batch norm asks its input's layout, which vmap cannot answer for the NHWC output (as with
    ``gemm``): the mode hands it a contiguous copy, and the gradients stay those of vmap's own convolutions."""
    with _AsksForChannelsLast():
        got, _ = _vmapped_grads("nhwc", batch_norm=True)
    ref, _ = _vmapped_grads("grouped", batch_norm=True)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)


def test_bf16_autocast_runs_the_convolution_in_bf16_and_returns_fp32_gradients():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 7, 7, generator=g)
    w, b = torch.randn(4, 3, 3, 3, generator=g).requires_grad_(), torch.randn(4, generator=g).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = conv2d_nhwc(x, w, b, padding=1)
    assert got.dtype == torch.bfloat16  # as F.conv2d under autocast
    torch.testing.assert_close(got.float(), F.conv2d(x, w, b, padding=1), rtol=3e-2, atol=6e-2)  # bf16 keeps 8 bits
    got.float().sum().backward()
    assert w.grad is not None and w.grad.dtype == torch.float32 and b.grad is not None and b.grad.dtype == torch.float32
    torch.testing.assert_close(b.grad, torch.full((4,), 98.0))  # d/db of the sum: 2 samples x 7x7 outputs, exact in bf16 too


def test_second_order_gradients_are_refused_with_the_reason():
    x, w = torch.randn(1, 1, 4, 4, requires_grad=True), torch.randn(1, 1, 2, 2, requires_grad=True)
    (gw,) = torch.autograd.grad(conv2d_nhwc(x, w).pow(2).sum(), [w], create_graph=True)
    with pytest.raises(RuntimeError, match="no second-order gradients"):
        gw.sum().backward()


def test_vectorized_executor_with_nhwc_equals_sequential_within_rounding():
    """The accelerator (GPU) policy on the CPU, batch norm and unequal clients (stragglers sit out)."""
    model = _cnn(batch_norm=True)
    spec = LocalSpec(epochs=2, batch_size=4, momentum=0.5, weight_decay=1e-3, batched_conv="nhwc")
    g = torch.Generator().manual_seed(5)
    sizes = [9, 4, 13, 6]
    jobs = [ClientJob(c, model_state(model), torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g), 0.05, 1.0, {}, 40 + c) for c, n in enumerate(sizes)]
    ex = VectorizedExecutor(model, spec, accelerator=True)
    seen = _Convolutions()
    with seen:
        got = ex.run(jobs)
    assert ex.fallback_reason is None  # really vmapped
    assert any(groups == 4 and channels_last for _, groups, channels_last, _ in seen.calls)  # the whole chunk, NHWC
    ref = SequentialExecutor(model, spec).run(jobs)  # one client at a time: the convolutions themselves
    for a, b in zip(ref, got, strict=True):
        assert a.num_steps == b.num_steps
        assert math.isclose(a.mean_loss, b.mean_loss, rel_tol=REL)
        for k in a.params:
            torch.testing.assert_close(b.params[k].float(), a.params[k].float(), rtol=REL, atol=1e-5)


def test_bf16_vmapped_nhwc_step_with_batch_norm_trains():
    """The CPU's batched batch norm refuses an NHWC bf16 input with fp32 statistics: the fp32 batch-norm mode takes it."""
    model = _cnn(batch_norm=True)
    spec = LocalSpec(epochs=1, batch_size=4, precision="bf16", batched_conv="nhwc")
    g = torch.Generator().manual_seed(6)
    jobs = [ClientJob(c, model_state(model), torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g), 0.05, 1.0, {}, c) for c in range(3)]
    ex = VectorizedExecutor(model, spec, accelerator=True)
    got = ex.run(jobs)
    assert ex.fallback_reason is None and all(math.isfinite(o.mean_loss) and o.num_steps == 2 for o in got)
    ref = SequentialExecutor(model, spec).run(jobs)
    for a, b in zip(ref, got, strict=True):
        assert math.isclose(a.mean_loss, b.mean_loss, rel_tol=3e-2)  # bf16 keeps 8 bits


def test_a_run_with_nhwc_is_deterministic_and_follows_the_grouped_run():
    base = {**PRECISION_BASE, "executor": "vectorized"}  # digits, the FLex&Chill CNN (vmapped on the CPU), 2 rounds
    runs, nhwc_calls = [], []
    for batched in ("nhwc", "nhwc", "grouped"):
        seen = _Convolutions()
        with seen:
            runs.append(run_experiment(load_config(None, {**base, "batched_conv": batched}), write=False, progress=False).records)
        nhwc_calls.append(sum(1 for _, groups, channels_last, _ in seen.calls if groups > 1 and channels_last))
    assert nhwc_calls[0] > 0 and nhwc_calls[2] == 0  # the config reaches the vectorised step
    assert json.dumps(runs[0]) == json.dumps(runs[1])  # bitwise, run to run
    for a, b in zip(runs[2], runs[0], strict=True):  # another float path: losses within the trajectory tolerance
        for key in ("global_loss", "train_loss"):
            assert math.isclose(a[key], b[key], rel_tol=TRAJECTORY_REL)
