"""The functional local step equals torch.optim.SGD on an nn.Module, batch for batch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.training.linear_factors import factored_linears
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, batch_order, evaluate, model_state, train_client
from chillfl.training.objective import temperature_cross_entropy


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 5))


@pytest.mark.parametrize("factored", [False, True], ids=["dense", "factored"])
def test_matches_torch_sgd_with_momentum_weight_decay_and_batchnorm(factored):
    model = _model()
    start = model_state(model)
    x, y = torch.randn(37, 1, 6, 6), torch.randint(0, 5, (37,))
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.9, weight_decay=1e-3)
    out = train_client(factored_linears(model) if factored else model, start, x, y, spec=spec, lr=0.05, temperature=0.25, context={}, generator=torch.Generator().manual_seed(7))

    ref = _model()
    ref.load_state_dict(start)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    for idx in batch_order(37, 8, 2, torch.Generator().manual_seed(7)):
        opt.zero_grad()
        temperature_cross_entropy(ref(x[idx]), y[idx], 0.25).backward()
        opt.step()
    assert out.num_steps == 2 * 5  # ceil(37 / 8) = 5 batches per epoch, last one short
    for key, value in ref.state_dict().items():
        torch.testing.assert_close(out.params[key], value, rtol=1e-5, atol=1e-6)
    # the template module's own tensors are untouched
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, start[key])


def test_loss_terms_are_added():
    model = nn.Linear(2, 2, bias=False)
    start = {"weight": torch.zeros(2, 2)}
    x, y = torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)

    def pull(params, context):  # d/dw of sum(w * c) is c
        return (params["weight"] * context["c"]).sum()

    pull.reads = ("c",)  # type: ignore[attr-defined]  # a term names the context keys it reads

    spec = LocalSpec(epochs=1, batch_size=4, terms=(pull,))
    out = train_client(model, start, x, y, spec=spec, lr=0.5, temperature=1.0, context={"c": torch.ones(2, 2)}, generator=torch.Generator().manual_seed(0))
    # x = 0 so the CE gradient w.r.t. W is 0; one step: W = 0 - 0.5 * 1
    torch.testing.assert_close(out.params["weight"], torch.full((2, 2), -0.5))


def test_batch_order_covers_every_sample_each_epoch():
    batches = batch_order(11, 3, 2, torch.Generator().manual_seed(1))
    assert [len(b) for b in batches] == [3, 3, 3, 2, 3, 3, 3, 2]
    assert sorted(torch.cat(batches[:4]).tolist()) == list(range(11))
    assert sorted(torch.cat(batches[4:]).tolist()) == list(range(11))


def test_a_trailing_single_sample_joins_the_previous_batch():
    # 10 = 3 + 3 + 3 + 1: the lone sample would break batch norm, so the last batch has 4
    batches = batch_order(10, 3, 1, torch.Generator().manual_seed(1))
    assert [len(b) for b in batches] == [3, 3, 4]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))
    assert [len(b) for b in batch_order(1, 3, 2, torch.Generator().manual_seed(1))] == [1, 1]


def test_derive_seed_separates_streams_and_is_the_same_in_another_process():
    # a fresh interpreter with another string-hash seed (str hashes differ there): the seeds must not
    code = "from chillfl.seeds import derive_seed; print(derive_seed(0, 'train', 1, 2), derive_seed(0, 'train-other', 1, 2))"
    hash_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert out.stdout.split() == [str(derive_seed(0, "train", 1, 2)), str(derive_seed(0, "train-other", 1, 2))]
    assert len({derive_seed(0, "train", c, r) for c in range(20) for r in range(20)}) == 400
    assert derive_seed(0, "train", 1, 2) != derive_seed(1, "train", 1, 2)


def test_evaluate_accuracy_and_loss():
    model = nn.Linear(2, 2, bias=False)
    state = {"weight": torch.tensor([[1.0, 0.0], [0.0, 1.0]])}
    x = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    y = torch.tensor([0, 1, 1])
    acc, loss = evaluate(model, state, x, y)
    assert acc == 2 / 3
    # per-sample CE: log(1+e^-2) twice, and log(1+e^2) once
    import math

    expected = (2 * math.log(1 + math.exp(-2)) + math.log(1 + math.exp(2))) / 3
    assert abs(loss - expected) < 1e-6


class _Tied(nn.Module):
    """Two layers sharing one weight Parameter (each with its own bias), like tied embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(3, 3)
        self.second = nn.Linear(3, 3)
        self.second.weight = self.first.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def test_tied_weights_train_like_torch_sgd():
    from chillfl.training.local import has_tied_tensors

    torch.manual_seed(0)
    model = _Tied()
    assert has_tied_tensors(model) and not has_tied_tensors(_model())
    start = model_state(model)
    assert sorted(start) == ["first.bias", "first.weight", "second.bias"]  # one entry per tensor
    x, y = torch.randn(12, 3), torch.randint(0, 3, (12,))
    spec = LocalSpec(epochs=1, batch_size=4)
    out = train_client(model, start, x, y, spec=spec, lr=0.1, temperature=0.5, context={}, generator=torch.Generator().manual_seed(3))
    ref = _Tied()
    ref.load_state_dict(start, strict=False)  # "second.weight" is "first.weight"
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for idx in batch_order(12, 4, 1, torch.Generator().manual_seed(3)):
        opt.zero_grad()
        temperature_cross_entropy(ref(x[idx]), y[idx], 0.5).backward()
        opt.step()
    for key in start:
        torch.testing.assert_close(out.params[key], ref.state_dict()[key], rtol=1e-5, atol=1e-6)


def test_dropout_on_the_cpu_is_seeded_from_the_clients_stream_without_torch_manual_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU step's dropout masks come from the CPU generator seeded from the client's stream, the bits that
    ``torch.manual_seed`` gave; the accelerator backends' generators are left alone (no ``torch.manual_seed``, whose
    queued seeds cost a Python stack trace a client job) and the caller's CPU generator state is untouched."""
    import chillfl.training.local as local

    g = torch.Generator().manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.5), nn.Linear(16, 4))
    x, y = torch.randn(24, 6, generator=g), torch.randint(0, 4, (24,), generator=g)

    def train() -> dict[str, torch.Tensor]:
        out = train_client(model, model_state(model), x, y, spec=LocalSpec(epochs=1, batch_size=8), lr=0.1, temperature=1.0, context={},
                           generator=torch.Generator().manual_seed(11))
        return out.params

    monkeypatch.setattr(local, "seed_dropout", lambda seed, device: torch.manual_seed(seed))
    reference = train()  # as it was: torch.manual_seed inside the CPU-only fork
    monkeypatch.undo()
    monkeypatch.setattr(torch, "manual_seed", lambda seed: pytest.fail("torch.manual_seed on a CPU step"))
    before = torch.random.get_rng_state()
    got = train()
    assert torch.equal(torch.random.get_rng_state(), before)
    assert reference.keys() == got.keys() and all(torch.equal(reference[k], got[k]) for k in reference)
    monkeypatch.undo()
    torch.manual_seed(0)
    other = train_client(model, model_state(model), x, y, spec=LocalSpec(epochs=1, batch_size=8), lr=0.1, temperature=1.0, context={},
                         generator=torch.Generator().manual_seed(12))  # another client's stream: other masks, other weights
    assert not all(torch.equal(other.params[k], got[k]) for k in got)


@pytest.mark.parametrize("rows_x", [23, 25], ids=["x-shorter", "x-longer"])
def test_inputs_and_labels_of_different_lengths_are_refused(rows_x: int) -> None:
    """Batches are drawn over ``len(y)``: a longer ``x`` trained silently on misaligned pairs (a shorter one failed on an index)."""
    g = torch.Generator().manual_seed(5)
    model = nn.Sequential(nn.Linear(6, 4))
    x, y = torch.randn(rows_x, 6, generator=g), torch.randint(0, 4, (24,), generator=g)
    with pytest.raises(ValueError, match=rf"x has {rows_x} rows but y has 24"):
        train_client(model, model_state(model), x, y, spec=LocalSpec(epochs=1, batch_size=8), lr=0.1, temperature=1.0, context={},
                     generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("clean", "marked"), [(23, 24), (24, 23), (25, 25)], ids=["clean-short", "marks-short", "both-long"])
def test_a_stamp_that_does_not_pair_with_the_rows_is_refused(clean: int, marked: int) -> None:
    """An augmented step reads row i's clean input and mark by its index: a stamp of other rows stamped other rows."""
    from chillfl.attacks.poison import Trigger
    from chillfl.data.stamp import RowStamp

    g = torch.Generator().manual_seed(5)
    model = nn.Sequential(nn.Linear(6, 4))
    x, y = torch.randn(24, 6, generator=g), torch.randint(0, 4, (24,), generator=g)
    stamp = RowStamp(torch.zeros(clean, 6), torch.zeros(marked, dtype=torch.bool), Trigger(1, 1.0))
    with pytest.raises(ValueError, match=rf"the stamp has {clean} clean rows and {marked} marks for 24 rows"):
        train_client(model, model_state(model), x, y, spec=LocalSpec(epochs=1, batch_size=8), lr=0.1, temperature=1.0, context={},
                     generator=torch.Generator().manual_seed(0), stamp=stamp)


def test_a_job_of_rows_that_do_not_pair_is_refused_before_any_executor_reads_it() -> None:
    """The vectorised executor gathers a chunk's rows itself: the check is the job's, not only ``train_client``'s."""
    from chillfl.attacks.poison import Trigger
    from chillfl.data.stamp import RowStamp
    from chillfl.engine.protocol import ClientJob

    y = torch.zeros(24, dtype=torch.long)
    with pytest.raises(ValueError, match="x has 23 rows but y has 24"):
        ClientJob(0, {}, torch.zeros(23, 6), y, 0.1, 1.0, {}, 0)
    with pytest.raises(ValueError, match="the stamp has 25 clean rows and 25 marks for 24 rows"):
        ClientJob(0, {}, torch.zeros(24, 6), y, 0.1, 1.0, {}, 0, stamp=RowStamp(torch.zeros(25, 6), torch.zeros(25, dtype=torch.bool), Trigger(1, 1.0)))
    ClientJob(0, {}, torch.zeros(24, 6), y, 0.1, 1.0, {}, 0, stamp=RowStamp(torch.zeros(24, 6), torch.zeros(24, dtype=torch.bool), Trigger(1, 1.0)))
