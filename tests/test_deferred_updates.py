"""Deferred factored updates (DeferredOuter): hand values, and vectorised training with them equals sequential training."""

import pytest
import torch
from torch import nn

from chillfl.executors import vectorized
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.training.linear_factors import DEFER_MIN_ELEMENTS, DEFER_MIN_STEPS, DeferredOuter, factored_layers, factored_linears, recording
from chillfl.training.local import LocalSpec, model_state


def _layer(weight: torch.Tensor) -> nn.Module:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    layer.weight.data.copy_(weight)
    return factored_linears(nn.Sequential(layer))


def test_deferred_rows_hand_values_forward_and_flush() -> None:
    w = torch.zeros(1, 2, 3)  # one client's [out 2, in 3] weight
    d = DeferredOuter({"0.weight": w}, ["0.weight"])
    # defer W += -0.5 * dz^T x, x = [1, 0, 2], dz = [3, -1]: U = -0.5 * dz = [-1.5, 0.5], V = x
    d.add("0.weight", torch.tensor([[[1.0, 0.0, 2.0]]]), torch.tensor([[[3.0, -1.0]]]), -0.5)
    assert torch.equal(w, torch.zeros(1, 2, 3))  # nothing written yet
    v, u = d.pending()["0.weight"]
    assert torch.equal(v, torch.tensor([[[1.0, 0.0, 2.0]]])) and torch.equal(u, torch.tensor([[[-1.5, 0.5]]]))
    # forward of x2 = [0, 1, 1] with the pending rows: x2 W^T + (x2 V^T) U = 0 + (0 + 0 + 2) * [-1.5, 0.5] = [-3, 1]
    model = _layer(w[0])
    x2 = torch.tensor([[0.0, 1.0, 1.0]])
    with recording(factored_layers(model), pending={"0.weight": (v[0], u[0])}):
        z = model(x2.requires_grad_(True))
    torch.testing.assert_close(z, torch.tensor([[-3.0, 1.0]]))
    d.flush()
    # W = U^T V = [[-1.5, 0, -3], [0.5, 0, 1]]; x2 W^T = [0 + 0 - 3, 0 + 0 + 1] = [-3, 1], as deferred
    torch.testing.assert_close(w[0], torch.tensor([[-1.5, 0.0, -3.0], [0.5, 0.0, 1.0]]))
    assert d.rows["0.weight"] == 0 and d.pending() == {}


def test_deferred_rows_flush_at_capacity_and_wide_batches_apply_at_once() -> None:
    torch.manual_seed(0)
    w = torch.zeros(2, 2, 5)  # two clients, out = 2: at most 2 rows wait
    d = DeferredOuter({"w": w}, ["w"])
    alpha = torch.tensor([1.0, -2.0])  # per-client step sizes
    x1, dz1 = torch.randn(2, 2, 5), torch.randn(2, 2, 2)
    d.add("w", x1, dz1, alpha)
    assert d.rows["w"] == 2 and torch.equal(w, torch.zeros(2, 2, 5))
    x2, dz2 = torch.randn(2, 1, 5), torch.randn(2, 1, 2)
    d.add("w", x2, dz2, alpha)  # 2 + 1 > 2: the first two rows are written first
    expected = torch.stack([alpha[c] * dz1[c].T @ x1[c] for c in range(2)])
    torch.testing.assert_close(w, expected)
    assert d.rows["w"] == 1
    x3, dz3 = torch.randn(2, 3, 5), torch.randn(2, 3, 2)
    d.add("w", x3, dz3, alpha)  # 3 rows > out = 2: flushed, then applied at once
    expected = expected + torch.stack([alpha[c] * (dz2[c].T @ x2[c] + dz3[c].T @ x3[c]) for c in range(2)])
    torch.testing.assert_close(w, expected)
    assert d.rows["w"] == 0


@pytest.mark.parametrize("transposed", [False, True])
def test_broadcast_weight_gets_each_clients_own_copy_on_flush(transposed: bool) -> None:
    base = torch.tensor([[1.0, 2.0], [3.0, 4.0]])  # [out 2, in 2], the global model every client starts from
    one = base.t().contiguous().t() if transposed else base.clone()
    params = {"w": one.expand(2, 2, 2)}  # two clients, one copy (stride 0)
    d = DeferredOuter(params, ["w"], {"w": (0, 2, 1)} if transposed else {})
    # client 0: x = [1, 0], dz = [1, 1], alpha 1 -> + [[1, 0], [1, 0]]; client 1: x = [0, 1], dz = [2, 0] -> + [[0, 2], [0, 0]]
    d.add("w", torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]]), torch.tensor([[[1.0, 1.0]], [[2.0, 0.0]]]), 1.0)
    assert params["w"].stride(0) == 0  # still one copy until the flush
    d.flush()
    expected = torch.stack([torch.tensor([[2.0, 2.0], [4.0, 4.0]]), torch.tensor([[1.0, 4.0], [3.0, 4.0]])])
    assert params["w"].stride(0) != 0 and torch.equal(params["w"], expected) and params["w"].requires_grad
    assert (params["w"].stride(-1) == 1) != transposed  # written in the stack's layout
    assert torch.equal(one, base)  # the global model is untouched


def _wide_mlp() -> nn.Module:
    # first weight 16 x 8192 = 131,072 elements (>= the threshold), out = 16: a flush every 4 steps of batch 4
    return nn.Sequential(nn.Flatten(), nn.Linear(8192, 16), nn.ReLU(inplace=True), nn.Linear(16, 3))


def _jobs(model: nn.Module, sizes: list[int]) -> list[ClientJob]:
    torch.manual_seed(0)
    start = model_state(model)
    return [ClientJob(c, start, 0.2 * torch.randn(n, 2, 64, 64), torch.randint(0, 3, (n,)), 0.05 * (1 + c % 2), 0.5, {}, c) for c, n in enumerate(sizes)]


@pytest.mark.parametrize("accelerator", [False, True])  # True: the GPU policy (resident chunks), forced on the CPU
@pytest.mark.parametrize("sizes", [[12, 12, 12, 12], [13, 6, 9, 13]])  # equal; unequal (steps of only some clients, short batches)
def test_vectorized_with_deferred_updates_matches_sequential_and_reruns_bitwise(sizes: list[int], accelerator: bool) -> None:
    assert 16 * 8192 >= DEFER_MIN_ELEMENTS and 4 * DEFER_MIN_STEPS <= 16
    model = _wide_mlp()
    jobs = _jobs(model, sizes)
    spec = LocalSpec(epochs=2, batch_size=4)
    ex = VectorizedExecutor(model, spec, chunk_size=4, accelerator=accelerator)
    got = ex.run(jobs)
    assert ex._deferred == {"1.weight"}  # the small head updates at once
    ref = SequentialExecutor(model, spec).run(jobs)
    for a, b in zip(ref, got):
        assert a.num_steps == b.num_steps
        for key in a.params:
            torch.testing.assert_close(b.params[key], a.params[key], rtol=1e-4, atol=1e-5)
        assert abs(a.mean_loss - b.mean_loss) <= 1e-5 * abs(a.mean_loss)
    again = VectorizedExecutor(model, spec, chunk_size=4, accelerator=accelerator).run(jobs)
    for a, b in zip(got, again):
        assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


def test_vectorized_deferred_equals_eager_vectorized(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _wide_mlp()
    jobs = _jobs(model, [10, 10, 10])
    spec = LocalSpec(epochs=1, batch_size=3)
    deferred = VectorizedExecutor(model, spec).run(jobs)
    monkeypatch.setattr(vectorized, "DEFER_MIN_ELEMENTS", 1 << 40)
    eager_ex = VectorizedExecutor(model, spec)
    eager = eager_ex.run(jobs)
    assert eager_ex._deferred == frozenset()
    for a, b in zip(eager, deferred):
        for key in a.params:
            torch.testing.assert_close(b.params[key], a.params[key], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("spec", [LocalSpec(epochs=1, batch_size=4, momentum=0.9), LocalSpec(epochs=1, batch_size=4, weight_decay=1e-3)])
def test_no_deferral_with_momentum_or_weight_decay(spec: LocalSpec) -> None:
    model = _wide_mlp()
    ex = VectorizedExecutor(model, spec)
    got = ex.run(_jobs(model, [8, 8]))
    assert ex._factored == {"1.weight", "3.weight"} and ex._deferred == frozenset()
    ref = SequentialExecutor(model, spec).run(_jobs(model, [8, 8]))
    for a, b in zip(ref, got):
        torch.testing.assert_close(b.params["1.weight"], a.params["1.weight"], rtol=1e-4, atol=1e-5)


def test_no_deferral_when_a_term_reads_the_weight() -> None:
    def prox(params, context):  # FedProx-like: the weight is read outside its layer (a dense gradient part)
        return 0.5 * sum(((params[k] - context["anchor"][k]) ** 2).sum() for k in params)

    prox.reads = ("anchor",)  # type: ignore[attr-defined]  # a term names the context keys it reads

    model = _wide_mlp()
    anchor = {k: v.detach() + 0.1 for k, v in model.named_parameters()}
    jobs = [j.__class__(j.client_id, j.start, j.x, j.y, j.lr, j.temperature, {"anchor": anchor}, j.seed) for j in _jobs(model, [8, 5])]
    spec = LocalSpec(epochs=1, batch_size=4, terms=(prox,))
    ex = VectorizedExecutor(model, spec)
    got = ex.run(jobs)
    assert "1.weight" in ex._factored and ex._deferred == frozenset()
    ref = SequentialExecutor(model, spec).run(jobs)
    for a, b in zip(ref, got):
        torch.testing.assert_close(b.params["1.weight"], a.params["1.weight"], rtol=1e-4, atol=1e-5)


def test_resident_chunk_estimate_counts_the_deferred_row_buffers() -> None:
    from chillfl.executors.vectorized import client_bytes

    model = _wide_mlp()
    job = _jobs(model, [8])[0]
    spec = LocalSpec(epochs=1, batch_size=4)
    plain = client_bytes(model, spec, job, frozenset({"1.weight"}), resident=True)
    counted = client_bytes(model, spec, job, frozenset({"1.weight"}), resident=True, deferred=frozenset({"1.weight"}))
    assert counted - plain == 16 * (16 + 8192) * 4  # out rows of x (8192 floats) and of dz (16 floats), fp32
    assert client_bytes(model, spec, job, frozenset({"1.weight"}), deferred=frozenset({"1.weight"})) == client_bytes(model, spec, job, frozenset({"1.weight"}))


def test_no_deferral_when_a_step_fills_more_than_a_quarter_of_the_rows() -> None:
    model = _wide_mlp()  # out = 16: batch 4 defers (4 x 4 <= 16), batch 5 does not (its flush would come every 3 steps)
    for batch, deferred in ((4, {"1.weight"}), (5, set())):
        ex = VectorizedExecutor(model, LocalSpec(epochs=1, batch_size=batch))
        ex.run(_jobs(model, [10, 10]))
        assert ex._deferred == deferred
