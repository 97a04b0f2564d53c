"""Non-finite client uploads: stopped where they arrive, naming the client, or left out under a rule built to withstand
bad clients (``protocols/common.py``); DnC, COMET's k-means++ and ``to_simplex`` survive non-finite or huge input."""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numpy as np
import pytest
import torch

from chillfl.aggregation.base import AroundAggregator, ClientResult
from chillfl.aggregation.dnc import DnC, DnCOptions, dnc_select
from chillfl.aggregation.fedavg import FedAvg
from chillfl.aggregation.registry import tolerates_bad_clients
from chillfl.aggregation.robust import Krum, KrumOptions
from chillfl.attacks.softlabels import to_simplex
from chillfl.capabilities import Capabilities
from chillfl.config import load_config
from chillfl.distillation.comet import _kmeans_pp, kmeans
from chillfl.errors import Diverged
from chillfl.aggregation.uploads import finite_uploads
from chillfl.protocols.common import check_finite_rows
from chillfl.protocols.parameters import ParameterSharing
from chillfl.runner import run_experiment

from test_loss_explosion import TINY


def _result(cid: int, value: float) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor([1.0, value]), "n": torch.tensor(3)}, 10, 1, 0.1, 1.0, 0.5)


def test_a_nonfinite_upload_stops_the_run_naming_the_client() -> None:
    with pytest.raises(Diverged) as err:
        finite_uploads(2, [_result(0, 1.0), _result(5, math.nan)], tolerant=False)
    assert (err.value.round, err.value.client) == (3, 5)
    assert str(err.value).startswith("round 3, client 5: its upload's parameter 'w' is not finite")


def test_a_rule_built_for_bad_clients_leaves_the_upload_out_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        kept, left_out = finite_uploads(0, [_result(0, 1.0), _result(5, math.inf), _result(7, 2.0)], tolerant=True)
    assert [r.client_id for r in kept] == [0, 7] and left_out == [5]
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["round 1: client 5's upload: parameter 'w' is not finite"]
    with pytest.raises(Diverged, match="every other upload"):  # nothing left to aggregate
        finite_uploads(0, [_result(5, math.nan)], tolerant=True)
    assert finite_uploads(0, [], tolerant=False) == ([], [])


class _PluginRule(FedAvg):
    """A user's robust rule: its class declares it (no spec registers it)."""

    capabilities = Capabilities(withstands_bad_clients=True)


def test_which_rules_tolerate_bad_clients_is_their_declaration() -> None:
    """Named in the config (a spec's tolerates, or its capabilities), or passed from Python (its spec's, else its class's
    own capabilities): a plugin's robust rule was not asked, only a built-in spec (rev106a 1)."""
    custom = {"name": "custom"}
    assert tolerates_bad_clients({"name": "dnc", "f": 1}, DnC(0, DnCOptions(f=1))) and tolerates_bad_clients({"name": "krum"}, Krum(KrumOptions(f=1)))
    assert tolerates_bad_clients({"name": "median"}, FedAvg())  # the ROBUST capability
    assert not tolerates_bad_clients({"name": "fedavg"}, FedAvg()) and not tolerates_bad_clients(custom, FedAvg())
    assert tolerates_bad_clients(custom, Krum(KrumOptions(f=1)))  # an instance: the spec that builds it
    assert tolerates_bad_clients(custom, AroundAggregator(Krum(KrumOptions(f=1))))  # a wrapper no spec builds: its base's
    assert tolerates_bad_clients(custom, _PluginRule())  # a plugin class's own declaration
    assert tolerates_bad_clients({"name": f"{__name__}:_PluginRule"}, FedAvg())  # named by path in the config


def test_nonfinite_soft_label_rows_name_the_client_and_row() -> None:
    check_finite_rows(0, 1, torch.ones(3, 2))
    rows = torch.ones(3, 2)
    rows[2, 1] = math.nan
    with pytest.raises(Diverged) as err:
        check_finite_rows(0, 1, rows)
    assert err.value.client == 1 and "soft-labels are not finite (row 2 of 3" in err.value.what


def _poisoned(cid: int, value: float) -> Any:
    """ParameterSharing.server_update with client ``cid``'s uploaded model carrying ``value``: a client's own upload gone
    non-finite with a finite training loss (``client.lr`` high enough to blow the weights up)."""
    original = ParameterSharing.server_update

    def update(self: ParameterSharing, round: int, tasks: Sequence[Any], replies: Sequence[Any]) -> Any:
        for task, reply in zip(tasks, replies):
            if task.client_id == cid:
                key = next(k for k, v in reply.uplink.params.items() if v.is_floating_point())
                bad = reply.uplink.params[key].clone()
                bad.view(-1)[0] = value
                reply.uplink.params[key] = bad
        return original(self, round, tasks, replies)
    return update


def test_a_run_stops_at_the_round_and_client_whose_upload_is_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ParameterSharing, "server_update", _poisoned(1, math.nan))
    config = load_config(None, {**TINY, "federation.clients_per_round": 4, "federation.rounds": 1})
    with pytest.raises(Diverged) as err:
        run_experiment(config, write=False, progress=False)
    assert (err.value.round, err.value.client) == (1, 1) and "upload's parameter" in err.value.what


def test_dnc_leaves_the_nan_upload_out_and_records_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ParameterSharing, "server_update", _poisoned(1, math.inf))
    config = load_config(None, {**TINY, "federation.clients_per_round": 4, "federation.rounds": 1, "algorithm.name": "dnc", "algorithm.f": 1})
    record = run_experiment(config, write=False, progress=False).records[0]
    assert record["uploads_left_out"] == [1] and 1 not in record["agg_selected"]
    assert math.isfinite(record["global_loss"])


def test_dnc_keeps_no_nonfinite_or_huge_row() -> None:
    flat = torch.tensor([[0.0, 1.0], [0.1, 1.1], [math.nan, 0.0], [0.2, 0.9], [-0.1, 1.0]], dtype=torch.float64)
    assert dnc_select(flat, DnCOptions(f=1, iterations=1), 0, 0) == [0, 1, 3, 4]  # the NaN row is the one removed
    assert 2 not in dnc_select(flat, DnCOptions(f=0, iterations=1), 0, 0)  # f = 0 keeps every finite row
    huge = flat.clone()
    huge[2] = torch.tensor([1e300, -1e300])  # a scaling attack's: the SVD of the centred rows overflowed
    assert dnc_select(huge, DnCOptions(f=1, iterations=1), 0, 0) == [0, 1, 3, 4]
    assert dnc_select(torch.full((2, 2), math.nan, dtype=torch.float64), DnCOptions(iterations=1), 0, 0) == [0, 1]


def test_kmeans_pp_draws_a_nonfinite_point_instead_of_crashing() -> None:
    x = np.array([[0.0, 0.0], [1.0, 0.0], [math.inf, 0.0], [0.0, 1.0]])
    centres = _kmeans_pp(x, 2, np.random.default_rng(0))
    assert not np.isfinite(centres).all()  # the infinitely far point is the second centre
    big = np.array([[0.0], *[[1.2e154]] * 10, [1.0]])  # each squared distance finite (<= 1.44e308), their sum not
    with np.errstate(over="raise"):
        assert len(_kmeans_pp(big, 3, np.random.default_rng(0))) == 3
    assert kmeans(torch.tensor([[0.0], [math.nan], [1.0]]), 2, np.random.default_rng(0)).labels.shape == (3,)


def test_to_simplex_does_not_overflow_float32() -> None:
    rows = torch.tensor([[3e38, 3e38, -1.0], [1.0, 3.0, 0.0], [math.inf, 1.0, math.inf]], dtype=torch.float32)
    out = to_simplex(rows)
    assert out.dtype == torch.float32 and bool(torch.isfinite(out).all())
    assert torch.allclose(out, torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.75, 0.0], [0.5, 0.0, 0.5]]))
    noised = torch.randn(200, 10, generator=torch.Generator().manual_seed(0)) * 1e38
    assert bool(torch.isfinite(to_simplex(noised)).all()) and torch.allclose(to_simplex(noised).sum(-1), torch.ones(200))


def test_nonfinite_prototypes_stop_the_run_naming_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.protocols.prototypes import PrototypeSharing
    original = PrototypeSharing.server_update

    poisoned: list[int] = []

    def update(self: PrototypeSharing, round: int, tasks: Sequence[Any], replies: Sequence[Any]) -> Any:
        for task, reply in zip(tasks, replies):
            if task.client_id == 2:
                means = reply.uplink.rows.means
                poisoned.append(int(torch.nonzero(reply.uplink.rows.counts > 0).flatten()[-1]))  # its last held class
                means[poisoned[-1], 0] = math.nan
        return original(self, round, tasks, replies)

    monkeypatch.setattr(PrototypeSharing, "server_update", update)
    config = load_config(None, {**TINY, "federation.clients_per_round": 4, "federation.rounds": 1, "prototypes.method": "fedproto"})
    with pytest.raises(Diverged) as err:
        run_experiment(config, write=False, progress=False)
    assert (err.value.round, err.value.client) == (1, 2) and "uploaded class prototypes are not finite" in err.value.what
    assert f"(class {poisoned[0]};" in err.value.what  # the class, not its place among the held ones (rev106a 4)


def test_a_forged_inf_upload_names_its_client_too(caplog: pytest.LogCaptureFixture) -> None:
    """The forging attacks write their models inside the attack's aggregator wrapper, after the server's check: the
    wrapper checks them as the server does (a mean stopped on 'global model parameter ... is not finite', naming nobody)."""
    attack = {"attack.kind": "scaling", "attack.factor": 1e300, "attack.clients": [1]}
    config = load_config(None, {**TINY, "federation.clients_per_round": 4, "federation.rounds": 1, **attack})
    with pytest.raises(Diverged) as err:
        run_experiment(config, write=False, progress=False)
    assert (err.value.round, err.value.client) == (1, 1) and "upload's parameter" in err.value.what
    krum = load_config(None, {**TINY, "federation.num_clients": 6, "federation.clients_per_round": 6, "federation.rounds": 1, "algorithm.name": "krum", "algorithm.f": 1, **attack})
    with caplog.at_level(logging.WARNING):
        record = run_experiment(krum, write=False, progress=False).records[0]
    assert math.isfinite(record["global_loss"]) and "client 1's upload" in caplog.text


@pytest.mark.parametrize("rule", [{"algorithm.name": "median"}, {"algorithm.name": "geomed"}, {"algorithm.name": "centered_clip"}])
def test_every_robust_rule_leaves_the_nan_upload_out(rule: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The ROBUST capability (withstands_bad_clients), not only a spec's ``tolerates``: median, geomed and the clipping rules
    stopped the run on a client's NaN (or, median, absorbed it unsaid)."""
    monkeypatch.setattr(ParameterSharing, "server_update", _poisoned(1, math.nan))
    config = load_config(None, {**TINY, "federation.clients_per_round": 4, "federation.rounds": 1, **rule})
    record = run_experiment(config, write=False, progress=False).records[0]
    assert record["uploads_left_out"] == [1] and math.isfinite(record["global_loss"])


def test_to_simplex_keeps_ordinary_rows_bit_for_bit_and_nan_rows_nan() -> None:
    """Rows whose sum does not overflow are computed as before (a gaussian soft-label attack's run reproduces across
    versions; the float64 path changed 825 of 1,000 rows in the last bit), and a NaN row stays NaN for the server to
    refuse, naming the client (it came out uniform: rev106a 5)."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.softmax(torch.randn(1000, 10, generator=gen), -1) + 0.3 * torch.randn(1000, 10, generator=gen)
    clamped = rows.clamp_min(0)
    total = clamped.sum(-1, keepdim=True)
    before = torch.where(total > 0, clamped / total.clamp_min(torch.finfo(rows.dtype).tiny), torch.full_like(clamped, 0.1))
    assert torch.equal(to_simplex(rows), before)
    mixed = torch.tensor([[math.nan, 0.1, 0.2], [3e38, 3e38, 1.0], [0.2, -0.1, 0.6]])
    out = to_simplex(mixed)
    assert bool(torch.isnan(out[0]).all()) and torch.allclose(out[1], torch.tensor([0.5, 0.5, 0.0]))
    assert torch.equal(out[2], to_simplex(mixed[2:]).squeeze(0))
