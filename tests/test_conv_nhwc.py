"""``batched_conv = "nhwc"`` / ``"loop"``: the clients' convolutions channels-last, as one grouped convolution or one per
client (chillfl.training.conv_nhwc).

What it shares with ``gemm`` (the vectorised executor against the sequential one, a whole run, bf16 with batch norm) is
tested in tests/test_conv_gemm.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils._python_dispatch import TorchDispatchMode

from chillfl.training.batched_conv import batched_conv_mode
from chillfl.training.conv_nhwc import PER_CLIENT, LoopConvolutions, NhwcConvolutions, conv2d_nhwc, fold_input, fold_weight, max_pool2d_nhwc
from chillfl.training.local import bf16_supported

from test_conv_gemm import _AsksForChannelsLast, _vmapped_grads


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


def test_vmapped_step_runs_every_convolution_grouped_and_nhwc_with_the_same_gradients():
    """Each client's gradient as vmap's own NCHW grouped convolutions give it; below vmap every convolution and
    gradient is ONE grouped call over the 3 clients on a channels-last input, and the data's gradient is never taken."""
    got, seen = _vmapped_grads(3, "nhwc")
    ref, plain = _vmapped_grads(3, "grouped")
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)
    assert [c[0] for c in plain.convs] == ["convolution", "convolution", "convolution_backward", "convolution_backward"]
    assert not any(channels_last for _, _, channels_last, _ in plain.convs)  # what vmap's own fold hands the kernel
    assert sorted(seen.convs) == sorted([
        ("convolution", 3, True, None), ("convolution", 3, True, None),  # the two layers' forwards
        ("convolution_backward", 3, True, (False, True, False)),  # first layer: its weight gradient only (the input is data)
        ("convolution_backward", 3, True, (True, False, False)), ("convolution_backward", 3, True, (False, True, False)),  # second layer
    ])


def test_the_per_client_fold_puts_the_clients_in_the_batch_each_one_channels_last():
    """``loop``: client b's sample i is row b * N + i of the folded tensor, and each client's rows are one contiguous
    channels-last batch (what its own convolution takes without a copy)."""
    x = torch.arange(2 * 3 * 2 * 4 * 5, dtype=torch.float32).reshape(2, 3, 2, 4, 5)  # [clients 2, N 3, C 2, H 4, W 5]
    folded = PER_CLIENT.input(x)
    assert folded.shape == (6, 2, 4, 5) and folded.is_contiguous(memory_format=torch.channels_last)
    for b in range(2):
        assert torch.equal(folded[b * 3:(b + 1) * 3], x[b]) and folded[b * 3:(b + 1) * 3].is_contiguous(memory_format=torch.channels_last)
    back, dim = PER_CLIENT.output(folded, 2)
    assert dim == 0 and torch.equal(back, x)
    assert PER_CLIENT.input(back).data_ptr() == folded.data_ptr()  # a previous layer's output folds without a copy


def test_vmapped_step_runs_each_clients_convolutions_nhwc_with_the_same_gradients():
    """``loop``: the gradients of vmap's own grouped convolutions; below vmap every convolution and gradient is a plain
    (groups = 1) channels-last call, one a client, and the data's gradient is never taken."""
    got, seen = _vmapped_grads(3, "loop")
    ref, _ = _vmapped_grads(3, "grouped")
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)
    assert sorted(seen.convs) == sorted(3 * [
        ("convolution", 1, True, None), ("convolution", 1, True, None),  # the two layers' forwards
        ("convolution_backward", 1, True, (False, True, False)),  # first layer: its weight gradient only (the input is data)
        ("convolution_backward", 1, True, (True, False, False)), ("convolution_backward", 1, True, (False, True, False)),  # second layer
    ])


@pytest.mark.parametrize("mode", [NhwcConvolutions, LoopConvolutions])
def test_unbatched_weights_are_each_clients_own(mode):
    """A weight vmap does not batch (one model for every client's input) is expanded to each client: same as F.conv2d."""
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(4, 2, 3, 7, 7, generator=g), torch.randn(5, 3, 3, 3, generator=g), torch.randn(5, generator=g)
    with mode():
        got = vmap(lambda xb: F.conv2d(xb, w, b, padding=1))(x)
    torch.testing.assert_close(got, torch.stack([F.conv2d(xb, w, b, padding=1) for xb in x]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("conv", ["nhwc", "loop"])
def test_batch_norm_after_an_nhwc_convolution_gets_an_input_vmap_can_question(conv):
    """torch 2.11's CUDA batch norm asks its input's layout, which vmap cannot answer for the NHWC output (as with
    ``gemm``): the mode hands it a contiguous copy, and the gradients stay those of vmap's own convolutions."""
    with _AsksForChannelsLast():
        got, _ = _vmapped_grads(3, conv)
    ref, _ = _vmapped_grads(3, "grouped")
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not bf16_supported(torch.device("cpu")), reason="this CPU has no bf16 kernels (oneDNN): bf16 not run")
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
    with pytest.raises(RuntimeError, match="no second-order gradients .*set batched_conv = 'grouped' or 'gemm'"):
        gw.sum().backward()


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", [(2, None, 0, False), (3, 2, 1, False), ((2, 3), (1, 2), 0, True)])
def test_one_clients_max_pool_equals_max_pool2d_values_and_gradient(kernel, stride, padding, ceil_mode):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 9, 8, generator=g)
    mine, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = max_pool2d_nhwc(mine, kernel, stride, padding, ceil_mode=ceil_mode)
    want = F.max_pool2d(ref, kernel, stride, padding, ceil_mode=ceil_mode)
    assert torch.equal(got, want)  # a maximum is exact
    upstream = torch.randn(want.shape, generator=g)
    got.backward(upstream)
    want.backward(upstream)
    assert torch.equal(mine.grad, ref.grad)  # each window's gradient to its maximum: sums of the same numbers


def _two_blocks() -> nn.Module:
    """The McMahan CNN's layout in small: conv -> max-pool -> ReLU, twice, then a linear layer."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 2 * 2, 5))


class _Copies(TorchDispatchMode):
    """Bytes written by layout copies (``clone``) below vmap, and the max-pools' inputs (channels, channels-last?)."""

    def __init__(self) -> None:
        super().__init__()
        self.copied = 0
        self.pools: list[tuple[int, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name == "clone":
            self.copied += out.numel() * out.element_size()
        elif name == "max_pool2d_with_indices":
            self.pools.append((args[0].shape[1], args[0].is_contiguous(memory_format=torch.channels_last)))
        return out


@pytest.mark.parametrize("conv, pooled", [("nhwc", (24, True)), ("loop", (8, True))])
def test_convolutions_and_max_pools_keep_the_clients_nhwc_with_fewer_copies_and_the_same_gradients(conv, pooled):
    """Each max-pool runs once on the clients' folded NHWC tensor (``nhwc``: 3 clients x 8 channels; ``loop``: the
    clients in the batch, 8 channels), so a convolution's output reaches the next one without vmap's NCHW round trip:
    fewer bytes copied than the grouped step, same gradients."""
    model = _two_blocks()
    g = torch.Generator().manual_seed(8)
    params = {k: v.detach() + 0.01 * torch.randn(3, *v.shape, generator=g) for k, v in model.named_parameters()}
    x, y = torch.randn(3, 4, 3, 14, 14, generator=g), torch.randint(0, 5, (3, 4), generator=g)
    results = {}
    for mode in ("grouped", conv):
        def loss(p, xb, yb, mode=mode):
            with batched_conv_mode(mode, vmapped=True):
                return F.cross_entropy(functional_call(model, p, (xb,)), yb)

        seen = _Copies()
        with seen:
            results[mode] = vmap(grad(loss))(params, x, y), seen
    (got, mine), (ref, grouped) = results[conv], results["grouped"]
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)
    assert mine.pools == [pooled, pooled] and not any(channels_last for _, channels_last in grouped.pools)
    assert mine.copied < grouped.copied / 2, (mine.copied, grouped.copied)


def test_a_max_pool_that_returns_its_indices_runs_as_it_was():
    x = torch.randn(1, 2, 4, 4)
    with NhwcConvolutions():
        out, indices = F.max_pool2d(x, 2, return_indices=True)
    want, want_indices = F.max_pool2d(x, 2, return_indices=True)
    assert torch.equal(out, want) and torch.equal(indices, want_indices)
