"""A soft-label round batched across clients: predictions as jobs, the batched predictor, equivalence and determinism.

The reference is :func:`chillfl.engine.predict.predict_each` (one client after
another, what the sequential executor runs); the vectorised executor's
:class:`~chillfl.engine.predict.BatchedPredictor` must match it within float
tolerance, with batch norm, shared and per-client inputs, several chunks and
worker threads. End to end, SCARLET with its cache and COMET (which distils
towards the centroid nearest to the client's own predictions) give the same
metrics, the same cache contents and the same ERA targets under both executors.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from torch import nn

from chillfl.config import load_config
from chillfl.protocols.softlabels import CacheSignal, ClientCache, CacheSyncDelta, SoftLabelDownlink
from chillfl.engine.predict import BatchedPredictor, PredictJob, Prediction, outputs, predict_each
from chillfl.engine.protocol import ClientJob, ClientReply, drive
from chillfl.experiment import build_experiment, build_protocol
from chillfl.runner import run_experiment
from chillfl.training.local import evaluate

from float_paths import ABS, REL, lockstep
from lent_pools import pools

K = 4


pytestmark = pytest.mark.usefixtures("one_thread")


def bn_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()


def client_states(model: nn.Module, n: int) -> list[dict[str, torch.Tensor]]:
    """``n`` different states with non-trivial batch-norm running statistics (eval mode must use them)."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        s = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for k, v in s.items():
            if v.is_floating_point():
                s[k] = v + 0.3 * torch.randn(v.shape, generator=gen)
        s["1.running_var"] = s["1.running_var"].abs() + 0.5
        out.append(s)
    return out


# ---------------------------------------------------------------- the batched predictor


@pytest.mark.parametrize("output", ["proba", "logits", "evaluate"])
@pytest.mark.parametrize(("chunk_size", "workers"), [(None, 1), (2, 1), (2, 2)])
def test_batched_predictor_matches_the_reference(output, chunk_size, workers):
    model = bn_cnn()
    states = client_states(model, 5)
    gen = torch.Generator().manual_seed(1)
    shared = torch.randn(13, 1, 8, 8, generator=gen)  # one tensor for every client: broadcast, never copied
    own = [torch.randn(7, 1, 8, 8, generator=gen) for _ in states]  # per client, equal lengths: stacked
    y = [torch.randint(0, 5, (len(x),), generator=gen) for x in (shared, *own)]
    jobs = [PredictJob(c, model, s, shared, output, y[0], batch_size=4) for c, s in enumerate(states)]
    jobs += [PredictJob(10 + c, model, s, x, output, y[1 + c], batch_size=4) for c, (s, x) in enumerate(zip(states, own))]
    predictor = BatchedPredictor(chunk_size=chunk_size, workers=workers)
    assert all(predictor.pays(j) for j in jobs)  # the stacked path runs, not the loop
    try:
        got = predictor(jobs)
    finally:
        predictor.close()
    want = predict_each(jobs)
    assert predictor.fallback_reason is None
    for g, w in zip(got, want):
        if output == "evaluate":
            assert g.values is None and g.acc == w.acc
            assert g.loss == pytest.approx(w.loss, rel=1e-5)
        else:
            assert g.values is not None and w.values is not None and g.values.dtype == torch.float32
            torch.testing.assert_close(g.values, w.values, rtol=REL, atol=ABS)  # two float paths (stacked vs one client)


def test_cpu_stacks_only_small_passes_of_small_models():
    model = bn_cnn()
    state = client_states(model, 1)[0]
    predictor = BatchedPredictor(cpu_max_rows=64, cpu_max_state_bytes=1 << 20)
    assert predictor.pays(PredictJob(0, model, state, torch.zeros(65, 1, 8, 8), batch_size=64))  # a pass is 64 rows
    assert not predictor.pays(PredictJob(0, model, state, torch.zeros(65, 1, 8, 8), batch_size=1024))  # one 65-row pass
    big = nn.Linear(1024, 512)  # 2 MiB of weights
    assert not predictor.pays(PredictJob(0, big, big.state_dict(), torch.zeros(4, 1024)))


def test_reference_prediction_is_the_plain_forward_pass():
    # proba rows sum to 1 and equal softmax(model(x)) in eval mode; evaluate is training.local.evaluate
    model = bn_cnn()
    state = client_states(model, 1)[0]
    x = torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    model.load_state_dict(state)
    with torch.no_grad():
        z = model(x)
    (p, lg, ev) = predict_each([PredictJob(0, model, state, x, kind, y, batch_size=4) for kind in ("proba", "logits", "evaluate")])
    torch.testing.assert_close(p.values, torch.softmax(z, -1))
    torch.testing.assert_close(lg.values, z)
    assert (ev.acc, ev.loss) == evaluate(model, state, x, y, 4)
    assert outputs(model, state, x[:0]).shape == (0, 0)


def test_empty_inputs_give_the_reference_answer():
    model = bn_cnn()
    state = client_states(model, 1)[0]
    empty = torch.zeros(0, 1, 8, 8)
    got = BatchedPredictor()([PredictJob(0, model, state, empty, "evaluate", torch.zeros(0, dtype=torch.long))])
    assert math.isnan(got[0].acc) and math.isnan(got[0].loss)


class ItemNet(nn.Module):
    """A forward pass with a data-dependent Python branch: it has no vmap batching rule."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.fc(x)
        return z if float(z.sum()) > -1e9 else -z


@pytest.mark.usefixtures("no_strict_fallbacks")  # a fallback on purpose
def test_unbatchable_model_falls_back_to_the_reference_once(caplog):
    model = ItemNet()
    states = [{k: v + i for k, v in model.state_dict().items()} for i in range(3)]
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(3))
    jobs = [PredictJob(c, model, s, x) for c, s in enumerate(states)]
    predictor = BatchedPredictor()
    with caplog.at_level(logging.WARNING, logger="chillfl.engine.predict"):
        first, second = predictor(jobs), predictor(jobs)
    assert predictor.fallback_reason is not None
    assert sum("cannot be vmapped" in r.message for r in caplog.records) == 1  # one warning, then the loop
    for a, b, w in zip(first, second, predict_each(jobs)):
        assert torch.equal(a.values, w.values) and torch.equal(b.values, w.values)


# ---------------------------------------------------------------- drive() batches prediction stages


def test_drive_hands_each_stage_of_predictions_to_the_predictor_as_one_group():
    model = bn_cnn()
    states = client_states(model, 3)
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(4))
    groups: list[list[int]] = []

    def predictor(jobs):
        groups.append([j.client_id for j in jobs])
        return predict_each(jobs)

    def program(cid):
        first = yield PredictJob(cid, model, states[cid], x, "proba")
        second = yield PredictJob(cid, model, states[cid], x, "logits")
        assert isinstance(first, Prediction) and isinstance(second, Prediction)
        return ClientReply(cid, (first.values, second.values))

    def no_training(_spec, jobs: list[ClientJob]):
        raise AssertionError("no training job was yielded")

    replies = drive([program(c) for c in range(3)], no_training, predictor)
    assert groups == [[0, 1, 2], [0, 1, 2]]  # one group per stage, clients in task order
    for c, reply in enumerate(replies):
        torch.testing.assert_close(reply.uplink[0], torch.softmax(reply.uplink[1], -1))
        torch.testing.assert_close(reply.uplink[1], outputs(model, states[c], x, logits=True))


# ---------------------------------------------------------------- the client cache's batched rebuild


def test_client_cache_rebuild_by_hand():
    # round 1: indices [5, 7, 9] all NEWLY_CACHED with rows a, b, c -> cache {5: a, 7: b, 9: c}, zhat = [a, b, c]
    # round 2: [7, 9, 4] signals CACHED, EXPIRED, NEWLY_CACHED with fresh rows [d, e] -> zhat = [b, d, e];
    #          9 leaves the cache, 4 enters with e: cache {5: a, 7: b, 4: e}
    cache = ClientCache(0)
    cache.apply_sync(CacheSyncDelta(0, 0, torch.zeros(0, dtype=torch.long), torch.zeros((0, 2)), torch.zeros(0, dtype=torch.long)))
    a, b, c, d, e = (torch.tensor([v, 1 - v]) for v in (0.1, 0.2, 0.3, 0.4, 0.5))
    new, cached, expired = CacheSignal.NEWLY_CACHED, CacheSignal.CACHED, CacheSignal.EXPIRED
    fresh1 = torch.stack([a, b, c])
    rows1 = cache.rebuild(SoftLabelDownlink(1, torch.tensor([5, 7, 9]), torch.tensor([new] * 3, dtype=torch.uint8), fresh1))
    torch.testing.assert_close(rows1, fresh1)
    fresh1.zero_()  # the cache kept its own copy
    fresh2 = torch.stack([d, e])
    rows2 = cache.rebuild(SoftLabelDownlink(2, torch.tensor([7, 9, 4]), torch.tensor([cached, expired, new], dtype=torch.uint8), fresh2))
    torch.testing.assert_close(rows2, torch.stack([b, d, e]))
    assert sorted(cache.entries()) == [4, 5, 7]
    torch.testing.assert_close(cache.entries()[4], e)
    torch.testing.assert_close(cache.entries()[5], a)


# ---------------------------------------------------------------- end to end: batched round = sequential round


def tiny(method: str, **extra) -> dict:
    over = {
        "dataset.name": "digits",
        "partition.name": "dirichlet",
        "partition.alpha": 0.3,
        "model.name": "flexchill_cnn",
        "model.batch_norm": True,
        "federation.num_clients": K,
        "federation.rounds": 3,
        "client.epochs": 1,
        "client.batch_size": 32,
        "client.lr": 0.05,
        "eval.client_split_size": 20,
        "distillation.method": method,
        "distillation.public_size": 120,
        "distillation.subset_size": 40,
        "distillation.server_epochs": 1,
        "distillation.distill_batch_size": 32,
    }
    over.update({f"distillation.{k}": v for k, v in extra.items()})
    return over


@pytest.mark.parametrize(("method", "extra"), [("scarlet", {"cache_duration": 2}), ("comet", {"granularity": "sample"})])
def test_batched_round_matches_sequential_with_batch_norm(method, extra, batch_sizes):
    """Batched predictions (the vectorised executor) give the sequential executor's round, in lockstep
    (tests/float_paths.py): each round the sequential executor runs the very tasks the vectorised one runs, and
    their replies (soft labels, client models and caches, counts, requests) agree within rounding, counts exactly.
    Whole runs are not compared: over 3 rounds COMET's per-sample distillation amplified the two float paths'
    rounding to 4e-3 in a batch-norm mean with one thread on a 2-core AMD EPYC (under 1e-6 with two)."""
    calls = batch_sizes(BatchedPredictor, "__call__")
    records = lockstep(load_config(None, tiny(method, **extra)))
    # every round: local accuracy and uploads of all K clients as one group each; COMET's own predictions from round 2
    # on; the sequential executor, which runs the same tasks here, predicts one client at a time (no call)
    assert calls[:2] == [K, K] and len(calls) == 2 * 3 + (2 if method == "comet" else 0)
    assert [r["round"] for r in records] == [1, 2, 3] and records[-1]["bytes_cumulative"] > 0


def test_same_seed_is_bitwise_the_same_per_executor():
    over = {**tiny("scarlet", cache_duration=2), "federation.clients_per_round": 3, "federation.rounds": 2}
    runs = {ex: run_experiment(load_config(None, {**over, "executor": ex}), write=False, progress=False, pools=pools()).records for ex in ("sequential", "processes", "vectorized")}
    assert runs["sequential"] == runs["processes"]  # both run the reference predictions
    assert runs["vectorized"] == run_experiment(load_config(None, {**over, "executor": "vectorized"}), write=False, progress=False).records
    assert runs["sequential"][-1]["local_acc"] is not None and runs["sequential"][-1]["global_acc"] is not None


def test_public_rows_are_gathered_once_per_index_set():
    exp = build_experiment(load_config(None, tiny("scarlet", cache_duration=2)))
    protocol = build_protocol(exp)
    try:
        client = protocol.client
        i, j = torch.tensor([3, 1, 4]), torch.tensor([2, 7])
        first = client.public_rows(i)
        assert torch.equal(first, client.x_public[i])
        assert client.public_rows(torch.tensor([3, 1, 4])) is first  # equal values: the same tensor, whoever asks
        assert torch.equal(client.public_rows(j), client.x_public[j])
        assert client.public_rows(i) is first  # two index sets are kept (a round's I^{t-1} and I_req^t)
    finally:
        protocol.close()


def test_stack_uplinks_places_rows_by_index():
    # requested I = [8, 2, 5]; client 0 sends all three in order; client 1 only [5, 8] (Selective-FD keeps a subset)
    # -> stack[1] = [row of 8, zeros, row of 5], keep[1] = [T, F, T]; a client sending index 3 was never asked: error
    from chillfl.protocols.softlabels import SoftLabelUplink
    from chillfl.protocols.softlabels import stack_uplinks

    idx = torch.tensor([8, 2, 5])
    all3 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    some = torch.tensor([[0.2, 0.8], [0.9, 0.1]])  # rows for 5, then 8
    ups = [SoftLabelUplink(0, 1, idx, all3), SoftLabelUplink(1, 1, torch.tensor([5, 8]), some, send_indices=True)]
    stack, keep = stack_uplinks(idx, ups, 2)
    torch.testing.assert_close(stack[0], all3)
    torch.testing.assert_close(stack[1], torch.tensor([[0.9, 0.1], [0.0, 0.0], [0.2, 0.8]]))
    assert keep.tolist() == [[True, True, True], [True, False, True]]
    with pytest.raises(KeyError):
        stack_uplinks(idx, [SoftLabelUplink(2, 1, torch.tensor([3]), torch.tensor([[0.5, 0.5]]), send_indices=True)], 2)


def test_groups_that_do_not_pay_run_the_reference_loop_bitwise_on_worker_threads():
    model = bn_cnn()
    states = client_states(model, 5)
    x = torch.randn(9, 1, 8, 8, generator=torch.Generator().manual_seed(5))
    jobs = [PredictJob(c, model, s, x, "proba", batch_size=16) for c, s in enumerate(states)]
    predictor = BatchedPredictor(workers=2, cpu_max_rows=4)  # 9-row passes: too large to stack here
    try:
        assert not predictor.pays(jobs[0])
        got = predictor(jobs)
    finally:
        predictor.close()
    for g, w in zip(got, predict_each(jobs)):
        assert torch.equal(g.values, w.values)


def test_batched_evaluation_of_nan_logits_gives_a_nan_accuracy_as_the_reference_does():
    """A client whose state evaluates to NaN logits (a batch-norm variance below 0) had its argmax counted as predictions
    on the stacked path; evaluate() (the reference) gives NaN, and so does the stacked path now, for that client alone."""
    model = bn_cnn()
    states = client_states(model, 3)
    var = next(k for k in states[1] if k.endswith("running_var"))
    states[1] = {**states[1], var: -torch.ones_like(states[1][var])}
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(9, 1, 8, 8, generator=gen), torch.zeros(9, dtype=torch.long)
    jobs = [PredictJob(c, model, s, x, "evaluate", y, batch_size=4) for c, s in enumerate(states)]
    predictor = BatchedPredictor()
    assert all(predictor.pays(j) for j in jobs)
    try:
        got = predictor(jobs)
    finally:
        predictor.close()
    want = predict_each(jobs)
    assert math.isnan(got[1].acc) and math.isnan(want[1].acc)
    assert got[0].acc == want[0].acc and got[2].acc == want[2].acc and not math.isnan(got[0].acc)
