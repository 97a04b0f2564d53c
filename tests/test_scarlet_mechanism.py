"""SCARLET's mechanism, taken apart (issue 29): with D = 0 and beta = 1 it is DS-FL with ERA replaced by the plain mean.

SCARLET differs from DS-FL in two places only: Enhanced ERA (Eq. 4) instead of
ERA (Eq. 2), and the cache (Algorithm 2). With D = 0 nothing is served from the
cache, and beta = 1 makes Eq. 4 the identity on the clients' mean, so the
server targets of every round must equal those of DS-FL with
``aggregation = "mean"``, bit for bit -- and so must the whole run.
"""

from __future__ import annotations

import pytest
import torch

from chillfl.config import load_config
from chillfl.distillation.methods.dsfl import DSFL
from chillfl.distillation.methods.scarlet import SCARLET
from chillfl.protocols.softlabels import SoftLabelUplink
from chillfl.distillation.era import mean_soft_labels, power_sharpen
from chillfl.protocols.softlabels import SoftLabelMethod, make_method
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment
from chillfl.settings.distillation import parse_distillation


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**distillation) -> dict:
    over = {
        "dataset.name": "digits", "partition.name": "dirichlet", "partition.alpha": 0.3, "model.name": "flexchill_cnn",
        "federation.num_clients": 4, "federation.rounds": 3, "client.epochs": 1, "client.batch_size": 32, "client.lr": 0.05,
        "eval.client_split_size": 20, "distillation.public_size": 120, "distillation.subset_size": 40,
        "distillation.server_epochs": 1, "distillation.distill_batch_size": 32,
    }
    over.update({f"distillation.{k}": v for k, v in distillation.items()})
    return over


def random_uplinks(seed: int, k: int = 5, n: int = 30, c: int = 10) -> tuple[torch.Tensor, list[SoftLabelUplink]]:
    gen = torch.Generator().manual_seed(seed)
    probs = torch.softmax(3 * torch.randn(k, n, c, generator=gen), dim=-1)  # float32 softmax outputs, as clients upload
    idx = torch.arange(n)
    return idx, [SoftLabelUplink(client_id=j, round=1, indices=idx, soft_labels=probs[j]) for j in range(k)]


def method(name: str, **options) -> SoftLabelMethod:
    return make_method(parse_distillation({"method": name, "public_size": 30, "subset_size": 30, **options}), 10, 0)


def test_beta_one_is_the_plain_mean_bit_for_bit():
    idx, ups = random_uplinks(0)
    stack = torch.stack([u.soft_labels for u in ups])
    mean = mean_soft_labels(stack)
    assert torch.equal(power_sharpen(mean, 1.0), mean)
    scarlet = method("scarlet", beta=1.0).aggregate(1, idx, ups)
    dsfl_mean = method("dsfl", aggregation="mean").aggregate(1, idx, ups)
    assert torch.equal(scarlet.rows, dsfl_mean.rows) and torch.equal(scarlet.server_rows, dsfl_mean.server_rows)
    assert torch.equal(dsfl_mean.rows, mean)
    # ERA is not the mean (T = 0.1 sharpens), and beta = 2 is not either: the ablation separates them
    assert not torch.equal(method("dsfl").aggregate(1, idx, ups).rows, mean)
    assert not torch.equal(method("scarlet", beta=2.0).aggregate(1, idx, ups).rows, mean)


def test_dsfl_aggregation_option_is_checked():
    with pytest.raises(ConfigError, match="distillation.aggregation"):
        parse_distillation({"method": "dsfl", "public_size": 30, "subset_size": 30, "aggregation": "median"})


def test_scarlet_d0_beta1_server_targets_equal_dsfl_mean_bit_for_bit(monkeypatch):
    targets: dict[str, list[torch.Tensor]] = {"dsfl": [], "scarlet": []}
    for key, cls in (("dsfl", DSFL), ("scarlet", SCARLET)):
        original = cls.aggregate

        def spy(self, round, indices, uplinks, _original=original, _key=key):
            out = _original(self, round, indices, uplinks)
            targets[_key].append(out.server_rows.clone())
            return out

        monkeypatch.setattr(cls, "aggregate", spy)
    scarlet = run_experiment(load_config(None, tiny(method="scarlet", beta=1.0, cache_duration=0)), write=False, progress=False)
    dsfl = run_experiment(load_config(None, tiny(method="dsfl", aggregation="mean")), write=False, progress=False)
    assert len(targets["scarlet"]) == len(targets["dsfl"]) == 3
    for a, b in zip(targets["scarlet"], targets["dsfl"]):
        assert a.shape == (40, 10) and torch.equal(a, b)
    assert scarlet.records == dsfl.records  # hence the whole run: server accuracy, bytes, entropy, every round
    assert torch.equal(torch.cat([v.flatten().float() for v in scarlet.model_state.values()]),
                       torch.cat([v.flatten().float() for v in dsfl.model_state.values()]))


def test_cached_age_on_hand_values():
    from chillfl.protocols.softlabels import ServerCache

    cache = ServerCache(duration=3)
    row = lambda n: torch.full((n, 2), 0.5)  # noqa: E731
    assert cache.update(1, [0, 1], row(2)).cached_age is None  # round 1: everything fresh
    assert cache.update(2, [0, 2], row(1)).cached_age == 1.0  # 0 stored at 1: age 1; 2 fresh
    assert cache.update(4, [0, 1, 2], row(0)).cached_age == pytest.approx((3 + 3 + 2) / 3)  # all valid (4 - 1 <= 3)
    assert cache.update(5, [0, 2], row(1)).cached_age == 3.0  # 0 expired (5 - 1 > 3) -> fresh; 2 stored at 2: age 3


def test_cache_age_is_recorded_only_where_the_cache_exists():
    scarlet = run_experiment(load_config(None, tiny(method="scarlet", cache_duration=2)), write=False, progress=False).records
    assert scarlet[0]["cache_age_mean"] is None and scarlet[0]["cache_hit_ratio"] == 0.0
    assert scarlet[1]["cache_hit_ratio"] > 0.0  # round 2 serves part of P^2 from round 1's entries
    for r in scarlet[1:]:
        assert r["cache_hit_ratio"] == 0.0 or 1.0 <= r["cache_age_mean"] <= 2.0
    dsfl = run_experiment(load_config(None, tiny(method="dsfl")), write=False, progress=False).records
    assert not any("cache_age_mean" in r or "cache_hit_ratio" in r for r in dsfl)


def test_authors_request_rule_in_a_run():
    # D = 1 under the authors' rule (request unless t_c + 1 > t): every drawn sample is requested, as with D = 0, yet an
    # entry stored in the round before is still signalled CACHED (t - t_c = 1 <= D), so the cache fills and ages as the
    # default's, and every client's rebuilt zhat matches the server's (sync_verified; CacheOutOfSyncError otherwise).
    over = {rule: {**tiny(method="scarlet", cache_duration=1, cache_request=rule), "federation.rounds": 2, "model.name": "mlp", "model.hidden": [16]} for rule in ("valid", "authors")}
    runs = {rule: run_experiment(load_config(None, o), write=False, progress=False).records for rule, o in over.items()}
    assert [r["public_requested"] for r in runs["authors"]] == [40, 40]
    assert runs["valid"][1]["public_requested"] < 40  # the default serves round 2's repeats from the cache
    assert [r["cache_size"] for r in runs["authors"]] == [r["cache_size"] for r in runs["valid"]]
    assert [r["cache_age_mean"] for r in runs["authors"]] == [r["cache_age_mean"] for r in runs["valid"]]
    assert all(r["sync_verified"] == 4 for r in runs["authors"][1:])
    assert runs["authors"][1]["bytes_up"] > runs["valid"][1]["bytes_up"]
