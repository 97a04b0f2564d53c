"""``batched_conv = "gemm"``: the clients' convolutions as im2col + one batched matrix product (chillfl.training.conv_gemm).

The checks that hold for every rewrite of the vmapped step's convolutions (``gemm``, ``nhwc`` and ``loop``) are parametrized here."""

from __future__ import annotations

import json
import math
from collections import Counter
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils._python_dispatch import TorchDispatchMode

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.engine.footprint import activation_bytes
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.runner import run_experiment
from chillfl.errors import ConfigError
from chillfl.training.batched_conv import batched_conv_mode, resolve_batched_conv
from chillfl.training import conv_gemm
from chillfl.training.conv_gemm import GemmConvolutions, conv1d_as_gemm, conv2d_as_gemm, window_index, window_sources, GatherWindows
from chillfl.training.conv_nhwc import PER_CLIENT, conv2d_nhwc
from chillfl.training.local import LocalSpec, bf16_supported, model_state
from chillfl.training.schedule import SGD

from float_paths import REL, TRAJECTORY_REL
from test_precision import BASE as PRECISION_BASE


def test_a_convolution_worked_out_by_hand():
    """x = [[1,2,3],[4,5,6],[7,8,9]], w = [[1,0],[0,-1]], bias 10: out[i,j] = x[i,j] - x[i+1,j+1] + 10 = 6 everywhere."""
    x = torch.arange(1.0, 10.0).reshape(1, 1, 3, 3)
    w = torch.tensor([[[[1.0, 0.0], [0.0, -1.0]]]])
    assert conv2d_as_gemm(x, w, torch.tensor([10.0])).tolist() == [[[[6.0, 6.0], [6.0, 6.0]]]]
    # stride 2, padding 1: p = x with a ring of zeros (5x5); out[i,j] = p[2i,2j] - p[2i+1,2j+1]
    # out[0,0] = 0 - x[0,0] = -1; out[0,1] = 0 - x[0,2] = -3; out[1,0] = 0 - x[2,0] = -7; out[1,1] = x[1,1] - x[2,2] = 5 - 9 = -4
    assert conv2d_as_gemm(x, w, stride=2, padding=1).tolist() == [[[[-1.0, -3.0], [-7.0, -4.0]]]]


@pytest.mark.parametrize("form", [conv2d_as_gemm, conv2d_nhwc, partial(conv2d_nhwc, fold=PER_CLIENT)], ids=["gemm", "nhwc", "loop"])
@pytest.mark.parametrize(
    "stride, padding, dilation, channels_last, bias",
    [(1, 0, 1, False, True), (1, 2, 1, False, False), (2, 1, 1, True, True), ((1, 2), (0, 1), (2, 1), False, True), (1, 1, 1, True, False)],
)
def test_equals_conv2d_values_and_gradients(form, stride, padding, dilation, channels_last, bias):
    """One client's convolution (outside vmap) in each rewrite: F.conv2d's values and gradients."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 9, 10, generator=g)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(5, 3, 3, 3, generator=g), torch.randn(5, generator=g)
    args = [x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_() if bias else None]
    ref_args = [a.detach().clone().requires_grad_() if a is not None else None for a in args]
    got = form(*args, stride=stride, padding=padding, dilation=dilation)
    ref = F.conv2d(*ref_args, stride=stride, padding=padding, dilation=dilation)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    upstream = torch.randn(ref.shape, generator=g)
    got.backward(upstream)
    ref.backward(upstream)
    for a, r in zip(args, ref_args):
        if a is not None:
            torch.testing.assert_close(a.grad, r.grad, rtol=1e-5, atol=1e-5)


CPU = torch.device("cpu")


def test_window_index_worked_out_by_hand():
    """A 3x4 image (flat positions 0..11, the zero pixel 12), 2x2 windows: stride 1 gives 2x3 outputs, the window at
    (p, q) reads (p + i) 4 + (q + j), and the blank window after them reads the zero pixel only; stride (1, 2) and
    dilation (2, 1) on the same image: 1x2 outputs, rows 0 and 2, columns 2q, 2q + 1."""
    index, h_out, w_out = window_index(3, 4, (2, 2), (1, 1), (1, 1), (0, 0), CPU)
    assert (h_out, w_out) == (2, 3)
    assert index.view(7, 4).tolist() == [[0, 1, 4, 5], [1, 2, 5, 6], [2, 3, 6, 7],
                                         [4, 5, 8, 9], [5, 6, 9, 10], [6, 7, 10, 11], [12, 12, 12, 12]]
    index, h_out, w_out = window_index(3, 4, (2, 2), (1, 2), (2, 1), (0, 0), CPU)
    assert (h_out, w_out) == (1, 2)
    assert index.view(3, 4).tolist() == [[0, 1, 8, 9], [2, 3, 10, 11], [12, 12, 12, 12]]


def test_window_index_with_padding_reads_the_zero_pixel_worked_out_by_hand():
    """A 2x2 image (pixels 0..3, zero pixel 4), 2x2 windows, padding 1: 3x3 outputs; the window at (p, q) reads
    (p + i - 1, q + j - 1), the zero pixel where that is outside: (0, 0) reads only pixel 0 at its (1, 1); (1, 1) reads
    all four; (2, 2) only pixel 3 at its (0, 0). Stride 2 keeps windows (0, 0), (0, 2), (2, 0), (2, 2) of those."""
    index, h_out, w_out = window_index(2, 2, (2, 2), (1, 1), (1, 1), (1, 1), CPU)
    assert (h_out, w_out) == (3, 3)
    windows = index.view(10, 4).tolist()
    assert windows[0] == [4, 4, 4, 0] and windows[1] == [4, 4, 0, 1] and windows[4] == [0, 1, 2, 3]
    assert windows[8] == [3, 4, 4, 4] and windows[9] == [4, 4, 4, 4]
    index, h_out, w_out = window_index(2, 2, (2, 2), (2, 2), (1, 1), (1, 1), CPU)
    assert (h_out, w_out) == (2, 2)
    assert index.view(5, 4).tolist() == [[4, 4, 4, 0], [4, 4, 1, 4], [4, 2, 4, 4], [3, 4, 4, 4], [4, 4, 4, 4]]


def test_window_sources_worked_out_by_hand():
    """The same 3x4 image, 2x2 windows, stride 1 (2x3 outputs, slots ((p 3 + q) 2 + i) 2 + j, 24 = the blank window's
    first): position (0, 0) is read only by window (0, 0) at (i, j) = (0, 0), slot 0; position (1, 1) by all four
    windows around it, each at another (i, j): window (1, 1) at (0, 0) = slot 16, (1, 0) at (0, 1) = 13, (0, 1) at
    (1, 0) = 6, (0, 0) at (1, 1) = 3; position (2, 3), the last, only by window (1, 2) at (1, 1): slot 23; the zero
    pixel's row (12) is all blank."""
    sources = window_sources(3, 4, (2, 2), (1, 1), (1, 1), (0, 0), (2, 3), CPU)
    assert sources.shape == (13, 4)
    assert sources[0].tolist() == [0, 24, 24, 24]
    assert sources[5].tolist() == [16, 13, 6, 3]
    assert sources[11].tolist() == [24, 24, 24, 23]
    assert sources[12].tolist() == [24, 24, 24, 24]
    # stride 2: position (0, 1) lies between windows (q = 1/2 is not whole): nothing reads it with kernel 1
    assert window_sources(3, 4, (1, 1), (2, 2), (1, 1), (0, 0), (2, 2), CPU)[1].tolist() == [4]
    # padding 1 on a 2x2 image (3x3 outputs, blank = 36): pixel 0 is read by window (0, 0) at (1, 1) = slot 3, (0, 1)
    # at (1, 0) = 6, (1, 0) at (0, 1) = 13, (1, 1) at (0, 0) = 16: the same slots as above, from the other side
    assert window_sources(2, 2, (2, 2), (1, 1), (1, 1), (1, 1), (3, 3), CPU)[0].tolist() == [16, 13, 6, 3]


@pytest.mark.parametrize("stride, dilation, padding", [((1, 1), (1, 1), (0, 0)), ((2, 1), (1, 2), (1, 0)), ((1, 3), (2, 1), (2, 1))])
def test_gather_windows_gradient_is_the_scatter_it_replaces(stride, dilation, padding):
    """Its gradient (a gather and a sum) equals autograd's of ``index_select`` (a scatter-add) at every pixel, the
    blank window's gradient being zero as the convolution keeps it, and its own gradient (a Hessian-vector product
    through it) too: every slot's gradient reaches each pixel that slot read. The zero pixel, a constant, gets zero."""
    g = torch.Generator().manual_seed(9)
    pixels = torch.randn(2, 7 * 8 + 1, 3, generator=g, dtype=torch.float64, requires_grad=True)
    index, h_out, w_out = window_index(7, 8, (3, 2), stride, dilation, padding, CPU)
    sources = window_sources(7, 8, (3, 2), stride, dilation, padding, (h_out, w_out), CPU)
    upstream = torch.randn(2, index.numel(), 3, generator=g, dtype=torch.float64)
    upstream[:, -6:] = 0  # the blank window
    upstream.requires_grad_()
    got, = torch.autograd.grad(GatherWindows.apply(pixels, index, sources), pixels, upstream, create_graph=True)
    want, = torch.autograd.grad(pixels.index_select(1, index), pixels, upstream, create_graph=True)
    torch.testing.assert_close(got[:, :-1], want[:, :-1], rtol=0, atol=1e-12)
    assert not got[:, -1].any()
    probe = torch.randn(got.shape, generator=g, dtype=torch.float64)
    probe[:, -1] = 0  # the zero pixel's gradient is dropped (F.pad's backward)
    second, = torch.autograd.grad((got * probe).sum(), upstream)
    torch.testing.assert_close(second[:, :-6], probe.index_select(1, index)[:, :-6], rtol=0, atol=0)


def test_the_gather_reads_the_input_in_place_whatever_its_layout():
    """[N, H, W, C] -> [N, H W, C] is a view for an NHWC input (what a GEMM convolution hands the next one, pooled) and
    for an NCHW one (strides H W, 1 merge): one copy, the input with its zero pixel, feeds the gather of the columns;
    the others are the weight's and the output's."""
    w = torch.randn(4, 3, 3, 3)
    for fmt in (torch.channels_last, torch.contiguous_format):
        x, counter = torch.randn(2, 3, 6, 6).contiguous(memory_format=fmt), _AtenCalls()
        with counter:
            conv2d_as_gemm(x, w)
        # [C_out, C_in, kh, kw] -> [C_out, kh kw C_in], and the output without the blank window's row (no bias to add)
        assert counter.calls["clone"] == 2 and "copy_" not in counter.calls
        assert counter.calls["constant_pad_nd"] == 1  # the input + its zero pixel, kh kw times smaller than the columns
        assert counter.calls["index_select"] == 1 and "im2col" not in counter.calls


def test_output_is_nhwc_in_memory():
    """The product's rows are (sample, position): the output is a channels-last view, no copy made for the shape."""
    out = conv2d_as_gemm(torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3))
    assert out.shape == (2, 4, 4, 4) and out.is_contiguous(memory_format=torch.channels_last)


class _AsksForChannelsLast(torch.overrides.TorchFunctionMode):
    """What torch 2.11's CUDA ``F.batch_norm`` does first: ask a non-contiguous input whether it is channels-last."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.batch_norm:
            x = args[0]
            assert x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last)
        return func(*args, **(kwargs or {}))


def test_batch_norm_after_a_gemm_convolution_gets_an_input_vmap_can_question():
    """Under vmap that question is "NYI" for the NHWC view a GEMM convolution returns (H200, torch 2.11, FedBN and
    FedAlign with ``batched_conv = "gemm"``): the mode hands batch norm a contiguous copy, same values."""
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(3, 2, 2, 6, 6, generator=g), torch.randn(3, 4, 2, 3, 3, generator=g)
    mean, var = torch.zeros(4), torch.ones(4)

    def step(x, w):
        return F.batch_norm(F.conv2d(x, w), mean, var, training=False)

    with _AsksForChannelsLast():
        with pytest.raises(RuntimeError, match="inside of vmap"):  # the failure: batch norm handed the NHWC view itself
            vmap(lambda x, w: F.batch_norm(conv2d_as_gemm(x, w), mean, var, training=False))(x, w)
        with GemmConvolutions():
            got = vmap(step)(x, w)
    torch.testing.assert_close(got, vmap(step)(x, w), rtol=1e-5, atol=1e-5)


def test_bf16_autocast_computes_in_bf16_with_an_fp32_bias():
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(2, 3, 7, 7, generator=g), torch.randn(4, 3, 3, 3, generator=g), torch.randn(4, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = conv2d_as_gemm(x, w, b, padding=1)
    assert got.dtype == torch.bfloat16  # as F.conv2d under autocast: the bias did not promote it back to fp32
    torch.testing.assert_close(got.float(), F.conv2d(x, w, b, padding=1), rtol=3e-2, atol=6e-2)  # bf16 keeps 8 bits


class _AtenCalls(TorchDispatchMode):
    """Counts aten ops below vmap's batching rules: what would reach the device as kernels; and each convolution's
    (op, groups, input channels-last?, output mask), as the device would get it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.convs: list[tuple] = []
        self.pads: list[tuple[int, int]] = []  # each constant_pad_nd's (input, output) elements

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        self.calls[name] += 1
        if name == "constant_pad_nd":
            self.pads.append((args[0].numel(), func(*args, **(kwargs or {})).numel()))
        if name == "convolution":
            self.convs.append((name, args[8], args[0].is_contiguous(memory_format=torch.channels_last), None))
        elif name == "convolution_backward":
            self.convs.append((name, args[9], args[1].is_contiguous(memory_format=torch.channels_last), tuple(args[10])))
        return func(*args, **(kwargs or {}))


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 2 * 2, 5))


def _vmapped_grads(clients: int, mode: str) -> tuple[dict[str, torch.Tensor], _AtenCalls]:
    """Each client's gradient of one vmapped step under ``batched_conv = mode``, and the aten calls below vmap."""
    model = _cnn()
    g = torch.Generator().manual_seed(2)
    params = {k: v.detach() + 0.01 * torch.randn(clients, *v.shape, generator=g) for k, v in model.named_parameters()}
    buffers = {k: v.expand(clients, *v.shape).clone() for k, v in model.named_buffers()}
    x, y = torch.randn(clients, 6, 3, 8, 8, generator=g), torch.randint(0, 5, (clients, 6), generator=g)

    def loss(p, bufs, xb, yb):
        with batched_conv_mode(mode, vmapped=True):
            return F.cross_entropy(functional_call(model, (p, bufs), (xb,)), yb)

    counter = _AtenCalls()
    with counter:
        grads = vmap(grad(loss))(params, buffers, x, y)
    return grads, counter


def test_vmapped_gemm_step_has_no_convolution_and_a_launch_count_independent_of_the_clients():
    _vmapped_grads(2, "gemm")  # a first step makes the layers' windows; the steps after it reuse them
    grads2, seen2 = _vmapped_grads(2, "gemm")
    calls2, calls7 = seen2.calls, _vmapped_grads(7, "gemm")[1].calls
    assert "convolution" not in calls2 and "convolution_backward" not in calls2  # no cuDNN / oneDNN convolution at all
    assert "arange" not in calls2  # no window index rebuilt: made once per shape (`windows`)
    assert "im2col" not in calls2 and "col2im" not in calls2  # ATen's CUDA im2col: one kernel a sample
    assert calls2 == calls7  # the same ops for 2 clients as for 7: one batched GEMM, not one a client
    _, grouped = _vmapped_grads(2, "grouped")
    assert grouped.calls["convolution"] == 2  # the default: vmap's grouped convolution, one a layer
    # one gather a layer, one more for the second layer's input gradient (the first layer's input, the data, needs
    # none), and no scatter: the loss's own gathers and scatters are the grouped step's
    assert calls2["gather"] == grouped.calls["gather"] + 3
    assert calls2["scatter_add"] + calls2["index_add"] == grouped.calls["scatter_add"] + grouped.calls["index_add"]
    # pads: a layer's input and its zero pixel (forward: 2 clients x 6 samples x 8 x 8 x 3, then x 4 x 4 x 6), the
    # second's input gradient without it (backward); never the columns' gradient, the backward's largest tensor (it
    # holds the blank window's zero row that the gather reads)
    assert [n for n, _ in seen2.pads] == [2 * 6 * 64 * 3, 2 * 6 * 16 * 6, 2 * 6 * 17 * 6]
    ref, _ = _vmapped_grads(2, "grouped")
    for k in ref:
        torch.testing.assert_close(grads2[k], ref[k], rtol=1e-4, atol=1e-6)


def test_only_plain_convolutions_are_rewritten():
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 2, 3, 3)
    counter = _AtenCalls()
    with counter, GemmConvolutions():
        grouped = F.conv2d(x, w, groups=2)
        same = F.conv2d(x, torch.randn(3, 4, 3, 3), padding="same")
        plain = F.conv2d(x, torch.randn(3, 4, 3, 3))
    assert counter.calls["convolution"] == 2 and counter.calls["index_select"] == 1  # groups=2 and padding="same" ran as they were
    assert grouped.shape == (1, 4, 3, 3) and same.shape == (1, 3, 5, 5) and plain.shape == (1, 3, 3, 3)
    assert isinstance(batched_conv_mode("gemm", vmapped=False), type(batched_conv_mode("grouped", vmapped=True)))  # one client: untouched


NEEDS_BF16_CONV = pytest.mark.skipif(not bf16_supported(torch.device("cpu")), reason="this CPU has no bf16 kernels (oneDNN): its bf16 convolutions not run")
"""``nhwc`` and ``loop`` keep the convolution itself, in bf16 under autocast (``gemm`` computes bf16 matrix products, which
run anywhere)."""

REACHED = {
    "gemm": lambda seen: seen.calls["gather"] * ("convolution_backward" not in seen.calls),  # gathers, no convolution's backward
    "nhwc": lambda seen: sum(1 for _, groups, channels_last, _ in seen.convs if groups > 1 and channels_last),  # grouped, NHWC
    # a client's own NHWC gradients (the chunk-size estimate runs a plain forward, whose input may be NHWC too: C = 1)
    "loop": lambda seen: sum(1 for op, groups, channels_last, _ in seen.convs if op == "convolution_backward" and groups == 1 and channels_last),
}
"""How many of a rewrite's own calls a vmapped run made: > 0 where the config reached the vectorised step."""


@pytest.mark.parametrize("conv", ["gemm", "nhwc", "loop"])
def test_vectorized_executor_with_rewritten_convolutions_equals_sequential_within_rounding(conv):
    """The accelerator (GPU) policy on the CPU, batch norm and unequal clients (stragglers sit out)."""
    model = _cnn()
    spec = LocalSpec(epochs=2, batch_size=4, momentum=0.5, weight_decay=1e-3, batched_conv=conv)
    g = torch.Generator().manual_seed(5)
    sizes = [9, 4, 13, 6]
    jobs = [ClientJob(c, model_state(model), torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g), 0.05, 1.0, {}, 40 + c) for c, n in enumerate(sizes)]
    ex = VectorizedExecutor(model, spec, accelerator=True)
    counter = _AtenCalls()
    with counter:
        got = ex.run(jobs)
    assert ex.fallback_reason is None and REACHED[conv](counter) > 0  # really vmapped, really rewritten
    if conv == "gemm":
        assert counter.calls["convolution"] == 2 and "convolution_backward" not in counter.calls  # only the chunk-size estimate's plain forward
    elif conv == "nhwc":
        assert any(groups == 4 and channels_last for _, groups, channels_last, _ in counter.convs)  # the whole chunk in one call
    else:
        assert all(groups == 1 for _, groups, _, _ in counter.convs)  # each client's own convolutions, never vmap's grouped one
    ref = SequentialExecutor(model, spec).run(jobs)  # one client at a time: the convolutions themselves
    for a, b in zip(ref, got, strict=True):
        assert a.num_steps == b.num_steps
        assert math.isclose(a.mean_loss, b.mean_loss, rel_tol=REL)
        for k in a.params:
            torch.testing.assert_close(b.params[k].float(), a.params[k].float(), rtol=REL, atol=1e-5)


def test_the_chunk_size_estimate_counts_the_columns():
    """Conv2d(3, 4, 3) on 2 samples of 3x5x5: output 2x4x3x3; columns K x N (L + 1) = 27 x 20 (each sample's blank
    window too), twice (their gradient), and the input gradient's gather, 3 x 3 values for each of 2 x 3 x (5 x 5 + 1)
    pixels (the zero pixel too); 4 bytes."""
    model = nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 5, 5)
    plain = activation_bytes(model, model_state(model), x)
    assert plain == 2 * 4 * 3 * 3 * 4
    assert activation_bytes(model, model_state(model), x, gemm_columns=True) - plain == (2 * 27 * 20 + 2 * 3 * 26 * 9) * 4


BASE = {**PRECISION_BASE, "executor": "vectorized"}  # digits, the FLex&Chill CNN (vmapped on the CPU), 2 rounds


@pytest.mark.parametrize("conv", ["gemm", "nhwc", "loop"])
def test_a_run_with_rewritten_convolutions_is_deterministic_and_follows_the_grouped_run(conv):
    runs, reached = [], []
    for batched in (conv, conv, "grouped"):
        counter = _AtenCalls()
        with counter:
            runs.append(run_experiment(load_config(None, {**BASE, "batched_conv": batched}), write=False, progress=False).records)
        reached.append(REACHED[conv](counter))
    assert reached[0] > 0 and reached[2] == 0  # the config reaches the vectorised step
    assert json.dumps(runs[0]) == json.dumps(runs[1])  # bitwise, run to run
    for a, b in zip(runs[2], runs[0], strict=True):  # another float path: losses within the trajectory tolerance, no accuracy
        for key in ("global_loss", "train_loss"):
            assert math.isclose(a[key], b[key], rel_tol=TRAJECTORY_REL)


def test_a_bad_value_exits_2_naming_the_field(tmp_path, capsys):
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", "federation.rounds=1", "batched_conv=im2col"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "chillfl: error: batched_conv: unknown value 'im2col'; allowed: auto, grouped, gemm, nhwc, loop"


def test_auto_is_nhwc_on_cuda_graphs_in_bf16_and_tf32_and_grouped_elsewhere():
    """The measured-fastest form on the H200 (docs/gpu.md), a fixed rule of device, graphs and precision; an explicit
    choice stays."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # a device object needs no GPU
    resolve = partial(resolve_batched_conv, optim=SGD, private=None)  # plain SGD: steps cuda_graphs records (tests/test_gpufix_auto_conv.py: the others)
    assert [resolve("auto", p, cuda, True) for p in ("fp32", "tf32", "bf16")] == ["grouped", "nhwc", "nhwc"]
    assert [resolve("auto", p, cuda, False) for p in ("fp32", "tf32", "bf16")] == ["grouped"] * 3  # eager: slower
    assert [resolve("auto", p, cpu, g) for p in ("fp32", "bf16") for g in (False, True)] == ["grouped"] * 4
    assert [resolve(c, "bf16", cuda, True) for c in ("grouped", "gemm", "loop")] == ["grouped", "gemm", "loop"]


def test_the_default_on_the_cpu_is_the_grouped_run_bit_for_bit():
    """``auto`` is the config's default: on the CPU the documented outputs keep their bits."""
    assert load_config(None, {}).batched_conv == "auto"
    auto = run_experiment(load_config(None, {**BASE, "federation.rounds": 1}), write=False, progress=False).records
    grouped = run_experiment(load_config(None, {**BASE, "federation.rounds": 1, "batched_conv": "grouped"}), write=False, progress=False).records
    assert json.dumps(auto) == json.dumps(grouped)


@pytest.mark.parametrize("conv", ["gemm", pytest.param("nhwc", marks=NEEDS_BF16_CONV), pytest.param("loop", marks=NEEDS_BF16_CONV)])
def test_bf16_vmapped_rewritten_step_with_batch_norm_trains(conv):
    """The CPU's batched batch norm refuses an NHWC bf16 input with fp32 statistics: the fp32 batch-norm mode takes it."""
    model = _cnn()
    spec = LocalSpec(epochs=1, batch_size=4, precision="bf16", batched_conv=conv)
    g = torch.Generator().manual_seed(6)
    jobs = [ClientJob(c, model_state(model), torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g), 0.05, 1.0, {}, c) for c in range(3)]
    ex = VectorizedExecutor(model, spec, accelerator=True)
    got = ex.run(jobs)
    assert ex.fallback_reason is None and all(math.isfinite(o.mean_loss) and o.num_steps == 2 for o in got)
    ref = SequentialExecutor(model, spec).run(jobs)
    for a, b in zip(ref, got, strict=True):
        assert math.isclose(a.mean_loss, b.mean_loss, rel_tol=3e-2)  # bf16 keeps 8 bits


@pytest.mark.parametrize("stride, padding, dilation", [(1, 3, 1), (2, 1, 1), (1, 2, 2)])
def test_conv1d_equals_conv1d_values_and_gradients(stride, padding, dilation):
    """``conv1d`` (the 1-d CNN of UCI HAR) as a 2-d convolution of height 1."""
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(3, 4, 20, generator=g, requires_grad=True), torch.randn(6, 4, 7, generator=g, requires_grad=True), torch.randn(6, generator=g)
    got = conv1d_as_gemm(x, w, b, stride=stride, padding=padding, dilation=dilation)
    ref = F.conv1d(x, w, b, stride=stride, padding=padding, dilation=dilation)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    gx, gw = torch.autograd.grad(got.square().sum(), (x, w))
    rx, rw = torch.autograd.grad(ref.square().sum(), (x, w))
    torch.testing.assert_close(gx, rx, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gw, rw, rtol=1e-5, atol=1e-4)


def test_a_vmapped_conv1d_model_runs_no_convolution_and_trains_as_sequential():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(2, 4, 5, padding=2), nn.BatchNorm1d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 12, 3))
    spec = LocalSpec(epochs=2, batch_size=4, momentum=0.5, batched_conv="gemm")
    g = torch.Generator().manual_seed(8)
    jobs = [ClientJob(c, model_state(model), torch.randn(n, 2, 12, generator=g), torch.randint(0, 3, (n,), generator=g), 0.05, 1.0, {}, c) for c, n in enumerate([9, 6, 11])]
    ex = VectorizedExecutor(model, spec, accelerator=True)
    counter = _AtenCalls()
    with counter:
        got = ex.run(jobs)
    assert ex.fallback_reason is None and counter.calls["convolution"] == 1 and "convolution_backward" not in counter.calls  # the estimate's forward only
    ref = SequentialExecutor(model, spec).run(jobs)
    for a, b in zip(ref, got, strict=True):
        assert math.isclose(a.mean_loss, b.mean_loss, rel_tol=REL)
        for k in a.params:
            torch.testing.assert_close(b.params[k].float(), a.params[k].float(), rtol=REL, atol=1e-5)
    conv = nn.Conv1d(2, 4, 5, padding=2)  # the chunk estimate: K = 2 x 5, N (L + 1) = 3 x 13, twice; 5 values a pixel (3 x 2 x (12 + 1)); 4 bytes
    x = torch.randn(3, 2, 12)
    assert activation_bytes(conv, model_state(conv), x, gemm_columns=True) - activation_bytes(conv, model_state(conv), x) == (2 * 10 * 39 + 3 * 2 * 13 * 5) * 4


def _fresh_windows(monkeypatch: pytest.MonkeyPatch) -> dict:
    made: dict = {}
    monkeypatch.setattr(conv_gemm, "_MADE", made)
    return made


def test_windows_are_made_once_per_shape_and_equal_a_fresh_build(monkeypatch):
    made = _fresh_windows(monkeypatch)
    args = (7, 6, (3, 2), (2, 1), (1, 2), (1, 0), torch.device("cpu"))
    first = conv_gemm.windows(*args)
    assert conv_gemm.windows(*args) is first and len(made) == 1  # the second call builds nothing
    index, h_out, w_out = window_index(*args)
    assert torch.equal(first[0], index) and (first[2], first[3]) == (h_out, w_out)
    assert torch.equal(first[1], window_sources(*args[:6], (h_out, w_out), args[6]))
    conv_gemm.windows(7, 6, (3, 2), (2, 1), (1, 2), (0, 0), torch.device("cpu"))  # another padding: another entry
    assert len(made) == 2


def test_windows_made_inside_a_transform_are_plain_tensors(monkeypatch):
    made = _fresh_windows(monkeypatch)
    x = torch.randn(2, 1, 3, 5, 5)
    w = torch.randn(2, 2, 3, 3, 3)
    vmap(grad(lambda xi, wi: conv2d_as_gemm(xi, wi).square().sum(), argnums=1))(x, w)  # the windows: made under vmap(grad)
    (index, sources, _, _), = made.values()
    assert not torch._C._functorch.is_functorch_wrapped_tensor(index)  # a wrapper of a finished grad level: unusable later
    assert not torch._C._functorch.is_functorch_wrapped_tensor(sources)


@pytest.mark.parametrize("when", ["inference mode", "graph capture", "fake tensors"])
def test_windows_are_not_kept_when_they_could_not_be_read_later(monkeypatch, when):
    """Inference tensors cannot be saved for a later backward; a graph's tensors hold nothing until replayed (and live
    in its pool); fake tensors (torch.compile's tracing) hold no values at all."""
    made = _fresh_windows(monkeypatch)
    args = (5, 5, (3, 3), (1, 1), (1, 1), (0, 0), torch.device("cpu"))
    if when == "inference mode":
        with torch.inference_mode():
            conv_gemm.windows(*args)
    elif when == "graph capture":
        with monkeypatch.context() as capture:
            capture.setattr(torch.cuda, "is_available", lambda: True)
            capture.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
            conv_gemm.windows(*args)
    else:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            conv_gemm.windows(*args)
    assert made == {}
    conv_gemm.windows(*args)
    assert len(made) == 1  # an ordinary call afterwards keeps its own


@pytest.mark.parametrize("executor", ["sequential", "processes", "ray"])
@pytest.mark.parametrize(("option", "value"), [("batched_conv", "gemm"), ("cuda_graphs", True), ("compile", True)])
def test_an_option_of_the_vectorised_step_under_another_executor_is_refused(executor: str, option: str, value: object) -> None:
    """``compile`` was refused under an executor without the vectorised step, but ``cuda_graphs`` and ``batched_conv``
    were accepted and did nothing, with nothing said (a run "with graphs" that had none)."""
    with pytest.raises(ConfigError) as err:
        load_config(None, {"executor": executor, option: value})
    assert err.value.field == option and f"executor {executor!r} has none" in err.value.message
    for fine in ("vectorized", "auto"):
        assert getattr(load_config(None, {"executor": fine, option: value}), option) == value
