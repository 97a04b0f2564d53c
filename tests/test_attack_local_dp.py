"""Whether an attacker runs local DP on what it forges (``attack.local_dp``): one rule, ``comply`` by default, under
parameter sharing (the privacy wrapper's clip and client noise) and soft-label sharing (the row release), worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.attacks.aggregate import AttackedAggregation
from chillfl.attacks.kinds import gaussian
from chillfl.attacks.softlabels import ForgedRows
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.privacy.aggregate import PrivateAggregation
from chillfl.settings.attack import AttackConfig

sys.path.insert(0, str(Path(__file__).parent))
from test_privacy import TINY as PRIVATE_TINY  # noqa: E402  (the privacy tests' tiny digits run)

TINY: dict[str, Any] = {
    **{k: v for k, v in PRIVATE_TINY.items() if k not in ("privacy.mechanism", "client.epochs", "client.lr", "eval.client_split_size")},
    "federation.rounds": 1,
    "attack.kind": "scaling",
    "attack.clients": [1],
}

SCALING = AttackConfig.from_table({"kind": "scaling", "factor": 100.0}, "attack")


def _results(*models: list[float]) -> list[ClientResult]:
    return [ClientResult(i, {"w": torch.tensor(m, dtype=torch.float64)}, 10 * (i + 1), 1, 0.1, 1.0, 0.0) for i, m in enumerate(models)]


def _forged_mean(exempt: frozenset[int]) -> list[float]:
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    private = PrivateAggregation(FedAvg(), client_noise=True, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=11)
    private.exempt = exempt
    return AttackedAggregation(private, SCALING, frozenset({1}), 11).aggregate(glob, _results([0.3, 0.4], [0.03, 0.04]), round=0)["w"].tolist()


def test_parameter_sharing_comply_clips_and_skip_sends_the_forged_update_by_hand() -> None:
    # sigma = 0, C = 1: client 1 (the attacker) forges w + 100 (0.03, 0.04) = (3, 4), norm 5.
    # comply: clipped to (0.6, 0.8); client 0's (0.3, 0.4), norm 0.5, kept; local's mean over n = 2: (0.45, 0.6)
    assert _forged_mean(frozenset()) == pytest.approx([0.45, 0.6], abs=1e-12)
    # skip: (3, 4) as forged: ((0.3 + 3) / 2, (0.4 + 4) / 2) = (1.65, 2.2); the honest client is still clipped (not here)
    assert _forged_mean(frozenset({1})) == pytest.approx([1.65, 2.2], abs=1e-12)


@pytest.mark.parametrize(
    ("mechanism", "local_dp", "exempt"),
    [
        ("local", None, frozenset()),  # the default: comply
        ("local", "comply", frozenset()),
        ("local", "skip", frozenset({1})),
        ("dp-fedavg", "skip", frozenset()),  # the server clips everyone: nothing for an attacker to skip
    ],
)
def test_the_run_exempts_the_attackers_only_when_they_skip_local_dp(mechanism: str, local_dp: str | None, exempt: frozenset[int]) -> None:
    pytest.importorskip("opacus")
    from chillfl.experiment import build_experiment

    over = {**TINY, "privacy.mechanism": mechanism, **({} if local_dp is None else {"attack.local_dp": local_dp})}
    exp = build_experiment(load_config(None, over))
    assert isinstance(exp.aggregator, AttackedAggregation) and isinstance(exp.aggregator.base, PrivateAggregation)
    assert exp.aggregator.base.exempt == exempt


class Halve:
    """A stand-in row release: halves what it gets (so whether the forged rows went through it shows)."""

    def release(self, rows: torch.Tensor, client_id: int, round: int) -> torch.Tensor:
        return rows / 2


def test_soft_labels_comply_releases_the_forged_rows_and_skip_sends_them_as_forged() -> None:
    # logit rows, so gaussian adds z and does not project: forged = rows + 0.1 z (z from the documented stream)
    from chillfl.seeds import derive_seed

    rows = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(derive_seed(3, "attack", "rows", 1, 4))
    forged = rows + 0.1 * torch.randn(rows.shape, generator=gen, dtype=rows.dtype)

    def release(comply: bool, client: int) -> torch.Tensor:
        return ForgedRows(frozenset({4}), gaussian.forge_rows, gaussian.GaussianOptions(0.1), 3, True, Halve(), comply=comply).release(rows, client, 1)

    assert torch.equal(release(True, 4), forged / 2)  # comply (the default): forged, then released as an honest row
    assert torch.equal(release(False, 4), forged)  # skip: as forged
    assert torch.equal(release(False, 0), rows / 2) and torch.equal(release(True, 0), rows / 2)  # honest clients: released


def test_bad_local_dp_is_one_line_naming_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {**TINY, "attack.local_dp": "sometimes"})
    assert err.value.field == "attack.local_dp" and "\n" not in str(err.value)


def test_a_soft_label_run_complies_by_default_and_skips_when_told() -> None:
    """End to end (DS-FL, one round): the attackers' rows reach the server released (default) or as forged; the two differ."""
    pytest.importorskip("opacus")
    import chillfl

    config = {"seed": 3, "device": "cpu", "executor": "sequential", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
              "federation": {"num_clients": 3, "rounds": 1}, "client": {"batch_size": 32},
              "distillation": {"method": "dsfl", "public_size": 40, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32},
              "privacy": {"mechanism": "local", "noise_multiplier": 2.0, "delta": 1e-3}}
    attack = {"kind": "gaussian", "clients": [1], "sigma": 5.0}

    def loss(**extra: Any) -> float:
        run = chillfl.run(config={**config, "attack": {**attack, **extra}}, write=False, progress=False)
        return float(run.records[-1]["global_loss"])

    default = loss()
    assert default == loss(local_dp="comply") != loss(local_dp="skip")


def test_skipping_attackers_on_flower_equal_sequential(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parameter sharing under ``local`` with ``local_dp = "skip"``: the Flower server builds the same exempting wrapper."""
    pytest.importorskip("opacus")
    pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")
    import sys
    from pathlib import Path

    from flwr.supercore.task_identity import TaskIdentity

    sys.path.insert(0, str(Path(__file__).parent))
    from test_flower_privacy_attacks import DP_FEDAVG, both

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)  # as that module's server_identity fixture
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)
    privacy = {**DP_FEDAVG, "mechanism": "local"}
    flower, seq = both(tmp_path, "skip", privacy=privacy, attack={"kind": "scaling", "clients": [1], "factor": 50.0, "local_dp": "skip"})
    assert flower == seq


def test_the_privacy_wrapper_is_built_with_its_exempt_clients_and_the_attack_leaves_it_as_built() -> None:
    """The attack builder set ``PrivateAggregation.exempt`` on a wrapper made without it; the wrapper now gets them when it is
    built (the mechanism's hook passes ``noise.exempt``) and ``attacked_aggregator`` changes nothing inside it."""
    pytest.importorskip("opacus")
    from chillfl.attacks.build import attacked_aggregator, skipping_local_dp
    from chillfl.experiment import build_data
    from chillfl.privacy.build import private_aggregator

    config = load_config(None, {**TINY, "privacy.mechanism": "local", "attack.local_dp": "skip"})
    data = build_data(config)
    assert skipping_local_dp(config, data) == frozenset({1})
    built = private_aggregator(config, data, FedAvg(), exempt=skipping_local_dp(config, data))
    assert isinstance(built, PrivateAggregation) and built.exempt == frozenset({1})
    plain = PrivateAggregation(FedAvg(), client_noise=True, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=11)
    attacked = attacked_aggregator(config, data, plain)
    assert isinstance(attacked, AttackedAggregation) and attacked.base is plain and plain.exempt == frozenset()
    comply = load_config(None, {**TINY, "privacy.mechanism": "local"})
    assert skipping_local_dp(comply, data) == frozenset()
    with pytest.raises(ValueError, match="client_noise"):  # the server clips everyone: no client to exempt
        PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=11, exempt=frozenset({1}))


def test_a_client_side_hook_that_drops_the_exempt_clients_is_one_line() -> None:
    """A plugin mechanism whose hook builds a client-side wrapper without ``noise.exempt`` would make skipping attackers comply
    without a word (the builder's mutation covered for it): refused on privacy.mechanism."""
    pytest.importorskip("opacus")
    import dataclasses

    from chillfl.experiment import build_data
    from chillfl.privacy import build
    from chillfl.privacy.mechanisms import local

    def forgetful(options: Any, noise: Any, base: Any) -> PrivateAggregation:
        return PrivateAggregation(base, client_noise=True, clip_norm=noise.clip_norm, noise_multiplier=noise.noise_multiplier, expected=2, seed=noise.seed)

    config = load_config(None, {**TINY, "privacy.mechanism": "local", "attack.local_dp": "skip"})
    data = build_data(config)
    plan = build.plan_privacy(config, data)
    assert plan is not None
    forgetting = dataclasses.replace(plan, spec=dataclasses.replace(local.SPEC, aggregator=forgetful))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build, "plan_privacy", lambda *args: forgetting)
        with pytest.raises(ConfigError) as err:
            build.private_aggregator(config, data, FedAvg(), exempt=frozenset({1}))
    assert err.value.field == "privacy.mechanism" and "exempt=noise.exempt" in str(err.value)


def _skip_notes(over: dict[str, Any], caplog: pytest.LogCaptureFixture) -> list[str]:
    """The notes :func:`chillfl.experiment.idle_local_dp_note` says for the built tiny run with ``over``."""
    import logging

    from chillfl import once
    from chillfl.experiment import build_experiment, idle_local_dp_note, say_notes

    config = load_config(None, {**TINY, **over})
    exp = build_experiment(config)
    once.forget()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
        say_notes([idle_local_dp_note(config, exp.aggregator)])
    return [r.getMessage() for r in caplog.records if r.name == "chillfl.experiment" and r.getMessage().startswith("note:")]


SKIP_IDLE = 'note: attack.local_dp = "skip" changes nothing in this run: '
SKIP_ACTS = "; it acts under a [privacy] mechanism the clients run on what they upload, as they forge it (docs/attacks.md)"


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"privacy.mechanism": "none"}, "[privacy] is off, so no client-side release of the uploads is there to skip"),
        ({"privacy.mechanism": "dp-fedavg"}, "privacy.mechanism 'dp-fedavg' leaves an attacker nothing to skip (it clips at the server or inside local training)"),
        ({"privacy.mechanism": "dp-sgd"}, "privacy.mechanism 'dp-sgd' leaves an attacker nothing to skip (it clips at the server or inside local training)"),
        ({"privacy.mechanism": "local", "attack.kind": "label_flip"},
         "attack 'label_flip' forges nothing its attackers upload in a parameter-sharing run: they train and release as honest clients"),
        ({"privacy.mechanism": "local"}, None),  # scaling forges the model the local wrapper would clip and noise: skip acts
    ],
)
def test_skip_that_changes_nothing_says_so(over: dict[str, Any], why: str | None, caplog: pytest.LogCaptureFixture) -> None:
    """``attack.local_dp = "skip"`` with no client-side mechanism to skip (or nothing forged) was accepted without a word."""
    assert _skip_notes({**over, "attack.local_dp": "skip"}, caplog) == ([] if why is None else [SKIP_IDLE + why + SKIP_ACTS])
    assert _skip_notes(over, caplog) == []  # comply (the default): nothing to say


def test_the_idle_skip_note_comes_once_the_run_is_built(caplog: pytest.LogCaptureFixture) -> None:
    """Said by the runner, after every check passed: a whole run prints it once."""
    import logging

    from chillfl import once
    from chillfl.runner import run_experiment

    once.forget()
    with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
        run_experiment(load_config(None, {**TINY, "privacy.mechanism": "none", "attack.local_dp": "skip"}), write=False, progress=False)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith('note: attack.local_dp')]
    assert said == [SKIP_IDLE + "[privacy] is off, so no client-side release of the uploads is there to skip" + SKIP_ACTS]


def test_skip_under_soft_label_sharing_acts_where_a_mechanism_releases_the_rows(caplog: pytest.LogCaptureFixture) -> None:
    """Soft-label sharing: a ``gaussian`` attacker's forged rows skip the row release whenever a mechanism runs (quiet);
    with ``[privacy]`` off there is none to skip (the note)."""
    dsfl = {"seed": 3, "device": "cpu", "dataset.name": "digits", "model.name": "mlp", "model.hidden": [16], "federation.num_clients": 3,
            "federation.clients_per_round": 3, "federation.rounds": 1, "client.batch_size": 32, "distillation.method": "dsfl",
            "distillation.public_size": 40, "distillation.subset_size": 20, "attack.kind": "gaussian", "attack.clients": [1], "attack.local_dp": "skip"}
    local = {"privacy.mechanism": "local", "privacy.noise_multiplier": 2.0, "privacy.delta": 1e-3}
    assert _skip_notes({**dsfl, **local}, caplog) == []
    assert _skip_notes({**dsfl, "privacy.mechanism": "none"}, caplog) == [SKIP_IDLE + "[privacy] is off, so no client-side release of the uploads is there to skip" + SKIP_ACTS]


def test_a_plugin_wrapper_of_its_own_class_says_whom_it_exempts(caplog: pytest.LogCaptureFixture) -> None:
    """A plugin mechanism's client-side release need not be a PrivateAggregation: one of its own class that exposes ``exempt``
    (:class:`chillfl.extend.ExemptsClients`) is asked as the built-in is, found on top or under an attack's wrapper; before, only
    PrivateAggregation was asked, and skip acting through a plugin's release was noted as "nothing to skip"."""
    import logging

    from chillfl import once
    from chillfl.aggregation.base import AroundAggregator
    from chillfl.experiment import idle_local_dp_note, say_notes
    from chillfl.extend import ExemptsClients
    from chillfl.privacy.build import exempted

    class OwnRelease(AroundAggregator):  # a plugin's own client-side release that lets client 1 skip it
        def __init__(self, base: Any, exempt: frozenset[int]) -> None:
            super().__init__(base)
            self.exempt = exempt

    own = OwnRelease(FedAvg(), frozenset({1}))
    assert isinstance(own, ExemptsClients) and not isinstance(FedAvg(), ExemptsClients)
    assert exempted(own) == frozenset({1})
    assert exempted(AttackedAggregation(own, SCALING, frozenset({1}), 11)) == frozenset({1})  # through the attack's wrapper
    assert exempted(AroundAggregator(FedAvg())) == exempted(None) == frozenset()
    config = load_config(None, {**TINY, "privacy.mechanism": "local", "attack.local_dp": "skip"})
    for aggregator, notes in ((own, 0), (AroundAggregator(FedAvg()), 1)):  # one that says nothing of whom it exempts: the note
        once.forget()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
            say_notes([idle_local_dp_note(config, aggregator)])
        assert len([r for r in caplog.records if r.getMessage().startswith(SKIP_IDLE)]) == notes


@pytest.mark.parametrize("protocol", ["parameters", "softlabels"])
def test_epsilon_is_the_honest_clients_when_an_attacker_skips_the_release(protocol: str) -> None:
    """docs/attacks.md: under ``skip`` "``epsilon`` stays the honest clients' guarantee". Before, the attacker's releases were
    charged: with the attacker drawn in more rounds than any honest client, the run reported the attacker's epsilon. Under
    ``local`` (no amplification, replace neighbours: sensitivity 2C, so sigma / 2 per unit) round r's epsilon is that of k
    Gaussian releases at q = 1, k = the most rounds any honest client took part in up to r."""
    pytest.importorskip("opacus")
    import chillfl
    from chillfl.engine.loop import draw_clients
    from chillfl.privacy.accounting import Ledger

    seed, clients, per_round, rounds, sigma, delta = 3, 4, 2, 4, 2.0, 1e-3
    draws = [draw_clients(seed, r, clients, per_round) for r in range(rounds)]
    counts = [sum(c in d for d in draws) for c in range(clients)]
    attacker = max(range(clients), key=lambda c: counts[c])
    assert counts[attacker] > max(n for c, n in enumerate(counts) if c != attacker)  # the case the old code got wrong
    config: dict[str, Any] = {
        "seed": seed, "device": "cpu", "executor": "sequential", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
        "federation": {"num_clients": clients, "clients_per_round": per_round, "rounds": rounds}, "client": {"batch_size": 32},
        "privacy": {"mechanism": "local", "noise_multiplier": sigma, "delta": delta},
        "attack": {"kind": "gaussian", "clients": [attacker], "sigma": 5.0, "local_dp": "skip"},
    }
    if protocol == "softlabels":
        config["distillation"] = {"method": "dsfl", "public_size": 40, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32}
    run = chillfl.run(config=config, write=False, progress=False)
    for r, record in enumerate(run.records):
        assert record["clients"] == draws[r]
        honest = max(sum(c in d for d in draws[: r + 1]) for c in range(clients) if c != attacker)
        ledger = Ledger(delta)
        ledger.spend("client", sigma / 2, 1.0, honest)
        assert record["epsilon"] == ledger.epsilon(), (r, honest)
    assert run.summary["privacy"]["unaccounted_clients"] == [attacker]
