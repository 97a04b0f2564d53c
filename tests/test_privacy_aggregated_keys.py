"""``dp-fedavg`` and ``local`` clip and noise what the server aggregates (``aggregated_keys``), not the clients' personal entries.

FedPer's head under ``global_head = "keep"`` (and FedBN's BN entries, LG-FedAvg's representation, FedBABU's head)
never reach the global model: clipped with the rest they only shrank the shared update. FedAvg and every rule
that aggregates all entries are untouched (test_privacy.py's by-hand and end-to-end tests pin them).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pytest
import torch

from chillfl.aggregation.base import AggregatorBase, ClientResult, FedAvg, Params, aggregated_keys
from chillfl.aggregation.fedbn import FedBN, FedBNOptions
from chillfl.aggregation.fedper import FedPer, FedPerOptions, head_keys
from chillfl.capabilities import Capabilities
from chillfl.engine.record import Json
from chillfl.privacy.aggregate import AdaptiveClip, PrivateAggregation
from chillfl.seeds import derive_seed

GLOBAL = {"body.w": torch.tensor([0.0], dtype=torch.float64), "head.w": torch.tensor([0.0], dtype=torch.float64)}


def two_clients() -> list[ClientResult]:
    """Updates chosen so that clipping over both entries and over the body alone differ (C = 1):

    client 0: body 4, head 3: ||u|| = 5 -> body 4/5 = 0.8; the body alone, ||4|| = 4 -> 4/4 = 1.0;
    client 1: body 0.5, head 1: ||u|| = sqrt(1.25) > 1 -> body 0.5/sqrt(1.25); the body alone, 0.5 <= 1: unclipped.
    """
    def result(cid: int, body: float, head: float) -> ClientResult:
        return ClientResult(cid, {"body.w": torch.tensor([body], dtype=torch.float64), "head.w": torch.tensor([head], dtype=torch.float64)}, 10, 1, 0.1, 1.0, 0.0)

    return [result(0, 4.0, 3.0), result(1, 0.5, 1.0)]


def head_personal() -> FedBN:
    """FedBN's rule (FedPer's, LG-FedAvg's) with ``head.w`` as the local entry, kept out of the global model."""
    return FedBN(["head.w"], FedBNOptions(global_bn="keep"))


@pytest.mark.parametrize("local", [False, True])
def test_the_personal_head_is_left_out_of_the_clip_by_hand(local: bool) -> None:
    # sigma = 0 (the wrapper's own arithmetic; the config refuses it): no noise, so the result is exact.
    # body-only clip: 1.0 and 0.5; m = n = 2: w' = (1.0 + 0.5) / 2 = 0.75 (clipping both entries gave (0.8 + 0.447) / 2 = 0.624)
    agg = PrivateAggregation(head_personal(), client_noise=local, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=11)
    out = agg.aggregate(GLOBAL, two_clients(), round=0)
    assert out["body.w"].item() == 0.75
    assert out["head.w"].item() == 0.0  # global_bn = "keep": the global model's own
    assert agg.round_metrics()["clipped"] == 0.5  # only client 0's body is over C (both were, clipped with their heads)


class Seen(FedAvg):
    """A plugin's weighted rule that averages ``body.w`` only and keeps what it was given, to look at."""

    capabilities = Capabilities(takes_weights=True)

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Params] = []

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        return ("body.w",)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        self.seen = [dict(r.params) for r in results]
        out = super().aggregate(global_params, results, round, weights)
        return {**out, "head.w": global_params["head.w"]}


@pytest.mark.parametrize("local", [False, True])
def test_a_plugins_declaration_is_what_is_clipped_and_the_rest_passes_as_sent_to_a_trusted_server_only(local: bool) -> None:
    base = Seen()
    agg = PrivateAggregation(base, client_noise=local, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=11)
    out = agg.aggregate(GLOBAL, two_clients(), round=0)
    assert out["body.w"].item() == 0.75
    assert [p["body.w"].item() for p in base.seen] == [1.0, 0.5]  # w + clip(u_i) (n / m = 1)
    # dp-fedavg: as the clients sent them, neither clipped nor noised; local (an untrusted server): the client keeps
    # them, and the server sees only its own global values (it once got the clients' raw heads)
    assert [p["head.w"].item() for p in base.seen] == ([0.0, 0.0] if local else [3.0, 1.0])


class ByHand:
    """An aggregator written against the protocol by hand, declaring nothing: every entry is aggregated (today's behaviour)."""

    def client_half(self) -> None:
        return None

    def downlink(self, client_id: int, round: int, global_params: Params) -> Any:
        raise AssertionError("not called")

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None:
        return None

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        return FedAvg().aggregate(global_params, results, round, weights)

    def round_metrics(self) -> Mapping[str, Json]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


def test_a_rule_that_declares_nothing_is_clipped_over_every_entry() -> None:
    assert aggregated_keys(ByHand(), GLOBAL) == ("body.w", "head.w")
    assert AggregatorBase().aggregated_keys(GLOBAL) == ("body.w", "head.w")
    agg = PrivateAggregation(ByHand(), client_noise=False, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=11)
    out = agg.aggregate(GLOBAL, two_clients(), round=0)
    # both entries clipped together: body (4/5 + 0.5/sqrt(1.25)) / 2, head (3/5 + 1/sqrt(1.25)) / 2
    assert out["body.w"].item() == pytest.approx((0.8 + 0.5 / math.sqrt(1.25)) / 2, rel=1e-12)
    assert out["head.w"].item() == pytest.approx((0.6 + 1.0 / math.sqrt(1.25)) / 2, rel=1e-12)
    assert agg.round_metrics()["clipped"] == 1.0


def test_averaged_personal_entries_stay_clipped() -> None:
    """``global_bn = "average"`` (FedPer's ``global_head``, LG-FedAvg's ``global_body``): the global model's local entries are the
    clients' average, sent to first-time clients and evaluated, so leaving them out of the clip would release them unnoised."""
    fedbn = FedBN(["head.w"], FedBNOptions(global_bn="average"))
    assert fedbn.aggregated_keys(GLOBAL) == ("body.w", "head.w")
    out = PrivateAggregation(fedbn, client_noise=False, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=11).aggregate(GLOBAL, two_clients(), round=0)
    assert out["head.w"].item() == pytest.approx((0.6 + 1.0 / math.sqrt(1.25)) / 2, rel=1e-12)


def test_wrappers_forward_their_bases_declaration() -> None:
    from chillfl.aggregation.pa3fed import PA3Fed

    private = PrivateAggregation(head_personal(), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=11)
    assert aggregated_keys(private, GLOBAL) == ("body.w",)
    assert aggregated_keys(PA3Fed(head_personal()), GLOBAL) == ("body.w",)


def test_fedper_declares_the_rule_its_aggregate_runs() -> None:
    from chillfl.models.registry import build_model

    model = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)
    glob = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    head = head_keys(model)
    kept = FedPer(model, FedPerOptions(global_head="keep"))
    assert kept.aggregated_keys(glob) == tuple(k for k in glob if k not in head)
    assert FedPer(model).aggregated_keys(glob) == tuple(glob)
    results = [ClientResult(i, {k: torch.full_like(v, float(i + 1)) for k, v in glob.items()}, 10, 1, 0.1, 1.0, 0.0) for i in range(2)]
    out = kept.aggregate(glob, results, 0)
    assert [k for k in glob if not torch.equal(out[k], glob[k])] == list(kept.aggregated_keys(glob))


def test_adaptive_clipping_counts_the_aggregated_part() -> None:
    # the bits b_i = 1[||u_i|| <= C] on the body alone: client 0 is over (b = 0), client 1 is not (b = 1): centred sum 0
    # (with the heads both were over: -1). C_1 = exp(-eta ((0 + e sigma_b) / m + 1/2 - gamma)), e from the round's count stream
    rule = AdaptiveClip(quantile=0.5, lr=0.2, count_noise=1.0)
    agg = PrivateAggregation(head_personal(), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=11, adaptive=rule)
    agg.aggregate(GLOBAL, two_clients(), round=0)
    e = torch.randn((), generator=torch.Generator().manual_seed(derive_seed(11, "privacy", "count", 0)), dtype=torch.float64).item()
    assert agg.clip_norm == pytest.approx(math.exp(-0.2 * (e / 2 + 0.5 - 0.5)), rel=1e-12)


# ---------------------------------------------------------------- end to end


class BodyNorms(FedPer):
    """FedPer (head kept out of the global model) that reports, per client, the norm of the body update it was given and its head's sum."""

    capabilities = Capabilities(takes_weights=True, personal_model=True)

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model, FedPerOptions(global_head="keep"))
        self._metrics: dict[str, Json] = {}

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        body = [k for k in global_params if k not in self.bn_keys and global_params[k].is_floating_point()]
        norms = [math.sqrt(sum(float(((r.params[k].double() - global_params[k].double()) ** 2).sum()) for k in body)) for r in results]
        heads = {str(r.client_id): sum(float(r.params[k].double().sum()) for k in sorted(self.bn_keys)) for r in results}
        self._metrics = {"body_norms": norms, "head_sums": heads}
        return super().aggregate(global_params, results, round, weights)

    def round_metrics(self) -> Mapping[str, Json]:
        return dict(self._metrics)


def test_fedper_under_dp_fedavg_clips_its_body_to_c_and_sends_its_head_untouched() -> None:
    pytest.importorskip("opacus")
    import chillfl
    from chillfl.models.registry import build_model

    clip = 0.01  # far below every client's body update (lr 0.05, 3 steps): every client is clipped, its body to exactly C
    config = {"seed": 3, "device": "cpu", "threads": 1, "executor": "sequential", "dataset": {"name": "digits"},
              "model": {"name": "mlp", "hidden": [16]},
              "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 2},
              "client": {"epochs": 1, "batch_size": 32, "lr": 0.05}, "eval": {"client_split_size": 20},
              "checkpoint": {"client_models": True},
              "privacy": {"mechanism": "dp-fedavg", "clip_norm": clip, "noise_multiplier": 1e-6, "delta": 1e-3}}
    template = build_model("mlp", (64,), 10, {"hidden": [16]}, seed=0)  # FedPer reads the head's names only
    out = chillfl.run(config=config, aggregator=BodyNorms(template), write=False, progress=False)
    for record in out.records:
        assert record["agg_clipped"] == 1.0
        # w + clip(u_i) + z / n: the body's norm is C up to the noise (sigma C = 1e-8 per entry) and float32 rounding;
        # clipped with the head, it was C ||body|| / ||u_i||, well below
        assert record["agg_body_norms"] == pytest.approx([clip] * 4, rel=1e-3)
    # the last round's heads reached the server as trained: the clients' own heads (what they keep), neither clipped nor noised
    last = out.records[-1]["agg_head_sums"]
    head = head_keys(template)
    assert out.client_states and set(last) == {str(c) for c in out.client_states}
    for cid, personal in out.client_states.items():
        assert last[str(cid)] == sum(float(personal[k].double().sum()) for k in sorted(head))
