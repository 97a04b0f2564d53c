"""Factored linear-weight gradients: hand values, and equal to dense training for every way a weight can be used."""

import logging
import pickle

import pytest
import torch
from torch import nn

from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.models.registry import build_model, model_names
from chillfl.training.linear_factors import FactoredLinear, add_outer_, factored_layers, factored_linears, recording
from chillfl.training.local import LocalSpec, StepLoss, model_state, split_state, step_grads, train_client


def test_add_outer_hand_values() -> None:
    # dz^T x for x = [1, 0, 2], dz = [3, -1]: [[3, 0, 6], [-1, 0, -2]]; alpha = -0.5
    w = torch.ones(2, 3)
    add_outer_(w, torch.tensor([[1.0, 0.0, 2.0]]), torch.tensor([[3.0, -1.0]]), -0.5)
    torch.testing.assert_close(w, torch.tensor([[-0.5, 1.0, -2.0], [1.5, 1.0, 2.0]]))
    # two rows are summed: x rows [1, 0], [0, 1]; dz rows [1], [2] -> dz^T x = [[1, 2]]
    w = torch.zeros(1, 2)
    add_outer_(w, torch.eye(2), torch.tensor([[1.0], [2.0]]))
    torch.testing.assert_close(w, torch.tensor([[1.0, 2.0]]))


@pytest.mark.parametrize("transposed", [False, True])
def test_add_outer_stacked_per_client_alpha_and_layouts(transposed: bool) -> None:
    torch.manual_seed(0)
    x, dz = torch.randn(3, 4, 2, 5), torch.randn(3, 4, 2, 6)  # [C, batch, time, features]: rows are batch x time
    start = torch.randn(3, 6, 5)
    w = start.transpose(1, 2).contiguous().transpose(1, 2) if transposed else start.clone()  # [C, 6, 5] stored as [C, 5, 6]
    alpha = torch.tensor([0.5, -1.0, 2.0])
    add_outer_(w, x, dz, alpha)
    expected = torch.stack([start[c] + alpha[c] * dz[c].reshape(-1, 6).T @ x[c].reshape(-1, 5) for c in range(3)])
    torch.testing.assert_close(w, expected)
    assert (w.stride(-1) == 1) != transposed  # updated where it lies, no re-layout


class _Uses(nn.Module):
    """Every way a linear weight can be used: an in-place activation on its output, a layer called
    twice, a weight read outside its layer (tied output), a bias-free layer on the raw input, and a
    3-d input whose rows are (batch, time)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw = nn.Linear(6, 8, bias=False)  # constant input, no bias: stays dense in train_client
        self.hidden = nn.Linear(8, 8)
        self.act = nn.ReLU(inplace=True)
        self.out = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.raw(x.view(len(x), 2, 6)))  # [B, time 2, 8]
        h = self.act(self.hidden(h))
        h = self.hidden(h).mean(1)  # the same layer again
        return self.out(h) + 0.1 * h[:, :4] @ self.hidden.weight[:4, :4]  # hidden.weight read outside its layer


def _dense_and_factored(model: nn.Module, spec: LocalSpec, context: dict | None = None) -> tuple[dict, dict]:
    torch.manual_seed(1)
    start = model_state(model)
    x, y = torch.randn(21, 12), torch.randint(0, 4, (21,))
    kwargs = dict(spec=spec, lr=0.1, temperature=0.5, context=context or {})
    dense = train_client(model, start, x, y, generator=torch.Generator().manual_seed(3), **kwargs)
    factored = train_client(factored_linears(model), start, x, y, generator=torch.Generator().manual_seed(3), **kwargs)
    return dense.params, factored.params


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 1e-2)])
def test_factored_training_equals_dense_training(momentum: float, weight_decay: float) -> None:
    torch.manual_seed(0)
    dense, factored = _dense_and_factored(_Uses(), LocalSpec(epochs=2, batch_size=5, momentum=momentum, weight_decay=weight_decay))
    for key in dense:
        torch.testing.assert_close(factored[key], dense[key], rtol=1e-5, atol=1e-6)


def test_factored_training_with_a_term_on_the_weights_equals_dense() -> None:
    def prox(params, context):  # FedProx-like: pulls every weight towards the anchor
        return 0.5 * sum(((params[k] - context["anchor"][k]) ** 2).sum() for k in params)

    prox.reads = ("anchor",)  # type: ignore[attr-defined]  # a term names the context keys it reads

    torch.manual_seed(0)
    model = _Uses()
    anchor = {k: torch.randn_like(v) for k, v in model.named_parameters()}
    dense, factored = _dense_and_factored(model, LocalSpec(epochs=1, batch_size=5, terms=(prox,)), {"anchor": anchor})
    for key in dense:
        torch.testing.assert_close(factored[key], dense[key], rtol=1e-5, atol=1e-6)


def test_step_records_each_factored_call_and_keeps_dense_parts() -> None:
    torch.manual_seed(0)
    model = factored_linears(_Uses())
    params, buffers = split_state(model, model_state(model))
    params = {k: v.requires_grad_(True) for k, v in params.items()}
    loss_fn = StepLoss(model, LocalSpec(epochs=1, batch_size=4))
    loss, captured = loss_fn(params, buffers, torch.randn(4, 12), torch.randint(0, 4, (4,)), 1.0, {})
    # raw: constant input and no bias -> dense; hidden twice; out once
    assert loss_fn.keys == ["hidden.weight", "hidden.weight", "out.weight"]
    grads, factors = step_grads(loss, params, loss_fn.keys, captured)
    named = dict(zip(params, grads))
    assert named["raw.weight"] is not None and named["out.weight"] is None
    assert named["hidden.weight"] is not None  # its read outside the layer: a dense part besides two factor pairs
    assert [len(factors[k]) for k in ("hidden.weight", "out.weight")] == [2, 1]


def test_factored_copy_leaves_the_model_alone_and_computes_the_same() -> None:
    torch.manual_seed(0)
    model = _Uses()
    twin = factored_linears(model)
    assert all(type(m) is nn.Linear for m in model.modules() if isinstance(m, nn.Linear))
    assert sum(isinstance(m, FactoredLinear) for m in twin.modules()) == 3
    x = torch.randn(5, 12)
    torch.testing.assert_close(twin(x), model(x))  # not recording: an ordinary linear layer
    with recording(factored_layers(twin)) as rec:
        torch.testing.assert_close(twin(x), model(x))  # recording: the same values
    assert [key for key, _, _ in rec.calls] == ["hidden.weight", "hidden.weight", "out.weight"]
    assert all(m.recorder is None for m in twin.modules() if isinstance(m, FactoredLinear))
    assert isinstance(pickle.loads(pickle.dumps(twin)), nn.Module)  # process workers receive it


def test_vectorized_factors_linear_weights_and_matches_sequential() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))
    start = model_state(model)
    jobs = [ClientJob(c, start, torch.randn(n, 12), torch.randint(0, 4, (n,)), 0.1 * (c + 1), 0.5, {}, c) for c, n in enumerate([9, 14, 5])]
    spec = LocalSpec(epochs=2, batch_size=4)
    ex = VectorizedExecutor(model, spec)
    got, ref = ex.run(jobs), SequentialExecutor(model, spec).run(jobs)
    assert ex._factor and ex._factored == {"0.weight", "2.weight"}
    for a, b in zip(ref, got):
        for key in a.params:
            torch.testing.assert_close(b.params[key], a.params[key], rtol=1e-5, atol=1e-6)


def test_vectorized_turns_factoring_off_when_a_layer_cannot_be_factored(caplog: pytest.LogCaptureFixture) -> None:
    # A bias-free first layer has a constant input: its output is not in the graph once the weight
    # is detached, and under vmap that cannot be seen in advance -> the probe turns factoring off.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16, bias=False), nn.ReLU(), nn.Linear(16, 4))
    start = model_state(model)
    jobs = [ClientJob(c, start, torch.randn(8, 12), torch.randint(0, 4, (8,)), 0.1, 1.0, {}, c) for c in range(3)]
    spec = LocalSpec(epochs=1, batch_size=4)
    ex = VectorizedExecutor(model, spec)
    with caplog.at_level(logging.INFO, logger="chillfl.executors.vectorized"):
        got = ex.run(jobs)
    assert not ex._factor and ex.fallback_reason is None  # still vectorised, with dense gradients
    assert "using dense gradients" in caplog.text
    for a, b in zip(SequentialExecutor(model, spec).run(jobs), got):
        for key in a.params:
            torch.testing.assert_close(b.params[key], a.params[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", model_names())
def test_every_registered_model_trains_the_same_factored(name: str) -> None:
    shape = {"har_cnn1d": (9, 128), "femnist_dnn": (1, 28, 28), "char_lstm": (80,)}.get(name, (3, 32, 32))
    model = build_model(name, shape, 10)
    torch.manual_seed(0)
    start, x, y = model_state(model), torch.randn(6, *shape), torch.randint(0, 10, (6,))
    kwargs = dict(spec=LocalSpec(epochs=1, batch_size=3, momentum=0.5), lr=0.05, temperature=0.5, context={})
    dense = train_client(model, start, x, y, generator=torch.Generator().manual_seed(1), **kwargs).params
    factored = train_client(factored_linears(model), start, x, y, generator=torch.Generator().manual_seed(1), **kwargs).params
    assert any(isinstance(m, FactoredLinear) for m in factored_linears(model).modules())
    for key in dense:
        torch.testing.assert_close(factored[key], dense[key], rtol=1e-4, atol=1e-6)
