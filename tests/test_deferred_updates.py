"""Deferred factored updates (DeferredOuter): hand values, and vectorised training with them equals sequential training."""

import pytest
import torch
from torch import nn

from chillfl.engine import vectorized
from chillfl.engine.executors import ClientJob, SequentialExecutor
from chillfl.engine.vectorized import VectorizedExecutor
from chillfl.training.linear_factors import DEFER_MIN_ELEMENTS, DeferredOuter, factored_layers, factored_linears, recording
from chillfl.training.local import LocalSpec, model_state


def _layer(weight: torch.Tensor) -> nn.Module:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    layer.weight.data.copy_(weight)
    return factored_linears(nn.Sequential(layer))


def test_deferred_rows_hand_values_forward_and_flush() -> None:
    w = torch.zeros(1, 2, 3)  # one client's [out 2, in 3] weight
    d = DeferredOuter({"0.weight": w})
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
    d = DeferredOuter({"w": w})
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


def _wide_mlp() -> nn.Module:
    # first weight 8 x 8192 = 65,536 elements (the deferral threshold), out = 8: a flush every 2 steps of batch 4
    return nn.Sequential(nn.Flatten(), nn.Linear(8192, 8), nn.ReLU(inplace=True), nn.Linear(8, 3))


def _jobs(model: nn.Module, sizes: list[int]) -> list[ClientJob]:
    torch.manual_seed(0)
    start = model_state(model)
    return [ClientJob(c, start, 0.2 * torch.randn(n, 2, 64, 64), torch.randint(0, 3, (n,)), 0.05 * (1 + c % 2), 0.5, {}, c) for c, n in enumerate(sizes)]


@pytest.mark.parametrize("sizes", [[12, 12, 12, 12], [13, 6, 9, 13]])  # equal; unequal (steps of only some clients, short batches)
def test_vectorized_with_deferred_updates_matches_sequential_and_reruns_bitwise(sizes: list[int]) -> None:
    assert 8 * 8192 >= DEFER_MIN_ELEMENTS
    model = _wide_mlp()
    jobs = _jobs(model, sizes)
    spec = LocalSpec(epochs=2, batch_size=4)
    ex = VectorizedExecutor(model, spec, chunk_size=4)
    got = ex.run(jobs)
    assert ex._deferred == {"1.weight"}  # the small head updates at once
    ref = SequentialExecutor(model, spec).run(jobs)
    for a, b in zip(ref, got):
        assert a.num_steps == b.num_steps
        for key in a.params:
            torch.testing.assert_close(b.params[key], a.params[key], rtol=1e-4, atol=1e-5)
        assert abs(a.mean_loss - b.mean_loss) <= 1e-5 * abs(a.mean_loss)
    again = VectorizedExecutor(model, spec, chunk_size=4).run(jobs)
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
