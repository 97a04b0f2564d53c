"""``[attack]``: what each attacker sends, on tiny tensors worked out by hand; who attacks; the refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.fedavg import FedAvg
from chillfl.attacks import updates
from chillfl.attacks.aggregate import AttackedAggregation, malicious
from chillfl.attacks.build import check_attack
from chillfl.attacks.poison import Trigger, flip_labels, flip_map, poison_rows, poisoned
from chillfl.attacks.select import attackers
from chillfl.attacks.softlabels import ForgedRows, to_simplex
from chillfl.attacks.prototypes import ForgedPrototypes, noisy_means
from chillfl.config import load_config
from chillfl.data import ArrayDataset, FederatedData
from chillfl.errors import ConfigError
from chillfl.seeds import derive_seed
from chillfl.attacks.kinds import gaussian
from chillfl.settings.attack import AttackConfig


def attack(kind: str = "none", **options: Any) -> AttackConfig:
    """``[attack]`` as a config with this table parses it (the kind's other options at their defaults)."""
    return AttackConfig.from_table({"kind": kind, **options}, "attack")


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


W = {"w": t(1.0, 2.0), "count": torch.tensor(7)}
"""The round's global model: one float entry and an integer buffer (which no attack rewrites)."""


def result(cid: int, *values: float, samples: int = 1) -> ClientResult:
    return ClientResult(cid, {"w": t(*values), "count": torch.tensor(8)}, samples, 1, 0.1, 1.0, 0.0)


# ---------------------------------------------------------------- what the attacker sends


def test_sign_flip_sends_the_negated_update() -> None:
    # w = [1, 2], w_i = [2, 0]: u = w_i - w = [1, -2]
    # factor 1: w - u = [1 - 1, 2 + 2] = [0, 4]; factor 2: w - 2u = [1 - 2, 2 + 4] = [-1, 6]
    honest = {"w": t(2.0, 0.0), "count": torch.tensor(8)}
    assert torch.equal(updates.sign_flip(W, honest, 1.0)["w"], t(0.0, 4.0))
    assert torch.equal(updates.sign_flip(W, honest, 2.0)["w"], t(-1.0, 6.0))
    assert int(updates.sign_flip(W, honest, 1.0)["count"]) == 8  # integer buffers travel as trained


def test_scaling_sends_the_boosted_update() -> None:
    # u = [1, -2]; factor 3: w + 3u = [1 + 3, 2 - 6] = [4, -4]
    honest = {"w": t(2.0, 0.0), "count": torch.tensor(8)}
    assert torch.equal(updates.scaling(W, honest, 3.0)["w"], t(4.0, -4.0))


def test_scaling_default_factor_is_clients_over_attackers() -> None:
    # n = 4 clients, m = 1 attacker (client 2): gamma = 4 / 1 = 4; its u = [2, 0] - [1, 2] = [1, -2]
    # sends w + 4u = [1 + 4, 2 - 8] = [5, -6]; the honest clients' models are untouched
    results = [result(0, 1.0, 1.0), result(1, 1.0, 3.0), result(2, 2.0, 0.0), result(3, 5.0, 5.0)]
    out = malicious(attack("scaling"), W, results, frozenset({2}), 0, 0)
    assert torch.equal(out[2].params["w"], t(5.0, -6.0))
    assert [r.params is s.params for r, s in zip(out, results)] == [True, True, False, True]
    # two attackers (2 and 3): gamma = 4 / 2 = 2; client 3's u = [4, 3] -> w + 2u = [9, 8]
    out = malicious(attack("scaling"), W, results, frozenset({2, 3}), 0, 0)
    assert torch.equal(out[2].params["w"], t(3.0, -2.0)) and torch.equal(out[3].params["w"], t(9.0, 8.0))


def test_scaling_by_rows_replaces_a_mean_weighted_by_rows() -> None:
    # rows 10, 30, 20, 40 (N = 100); attacker 2 holds 20: gamma = 100 / 20 = 5 (n / m would be 4), u = [1, -2]
    # sends w + 5u = [6, -8]; FedAvg weighted by rows then gives the attacker 0.2 * 5 = 1 of its update: replacement
    results = [result(0, 1.0, 2.0, samples=10), result(1, 1.0, 2.0, samples=30), result(2, 2.0, 0.0, samples=20), result(3, 1.0, 2.0, samples=40)]
    out = malicious(attack("scaling", weighting="samples"), W, results, frozenset({2}), 0, 0)
    assert torch.equal(out[2].params["w"], t(6.0, -8.0))
    assert torch.allclose(FedAvg().aggregate(W, out, 0)["w"], t(2.0, 0.0))  # the honest clients sent w: the mean is w_2
    # attackers 2 and 3 (60 rows): gamma = 100 / 60; client 3's u = [0, 0] stays w
    out = malicious(attack("scaling", weighting="samples"), W, results, frozenset({2, 3}), 0, 0)
    assert torch.allclose(out[2].params["w"], t(1.0 + 100 / 60, 2.0 - 200 / 60))
    # the default (uniform) is the paper's n / m = 4 whatever the rows; a factor overrides both
    assert torch.equal(malicious(attack("scaling"), W, results, frozenset({2}), 0, 0)[2].params["w"], t(5.0, -6.0))
    assert torch.equal(malicious(attack("scaling", factor=3.0, weighting="samples"), W, results, frozenset({2}), 0, 0)[2].params["w"], t(4.0, -4.0))


def test_gaussian_sends_noise_around_the_global_model() -> None:
    # the honest update is thrown away: w + sigma * z, z ~ N(0, 1) from (seed, "attack", "gaussian", round, client)
    out = malicious(attack("gaussian", sigma=0.5), W, [result(3, 100.0, 100.0)], frozenset({3}), 4, 9)
    z = torch.randn((2,), generator=torch.Generator().manual_seed(derive_seed(9, "attack", "gaussian", 4, 3)))
    assert torch.equal(out[0].params["w"], W["w"] + 0.5 * z)
    again = malicious(attack("gaussian", sigma=0.5), W, [result(3, 0.0, 0.0)], frozenset({3}), 4, 9)
    assert torch.equal(again[0].params["w"], out[0].params["w"])  # same seed, round, client: same noise
    other = malicious(attack("gaussian", sigma=0.5), W, [result(3, 0.0, 0.0)], frozenset({3}), 5, 9)
    assert not torch.equal(other[0].params["w"], out[0].params["w"])  # a new draw each round


def test_z_max_of_baruch_et_al() -> None:
    # n = 10, m = 2: s = floor(10/2 + 1) - 2 = 4, z = Phi^-1((10 - 4) / 10) = Phi^-1(0.6) = 0.2533471
    assert updates.z_max(10, 2) == pytest.approx(0.2533471, abs=1e-6)
    # n = 4, m = 1: s = floor(3) - 1 = 2, Phi^-1(2 / 4) = 0
    assert updates.z_max(4, 1) == pytest.approx(0.0, abs=1e-12)
    # n = 50, m = 12 (the paper's setting, about 24 %): s = 26 - 12 = 14, Phi^-1(36 / 50) = Phi^-1(0.72) = 0.5828415
    assert updates.z_max(50, 12) == pytest.approx(0.5828415, abs=1e-6)


@pytest.mark.parametrize(
    ("n", "m", "among", "z"),
    [
        # the paper's reading, (k - s) / k over k = n clients, s = floor(n/2 + 1) - m clamped to [1, k - 1]:
        # n = 10, m = 6: s = 6 - 6 = 0 -> 1 (the attackers alone hold the majority), Phi^-1(9 / 10) = 1.2815516
        (10, 6, "clients", 1.2815516),
        # n = 2, m = 0: s = floor(2) = 2 -> k - 1 = 1, Phi^-1(1 / 2) = 0; n = 1: no spread to hide in, 0
        (2, 0, "clients", 0.0),
        (1, 0, "clients", 0.0),
        # over the k = n - m benign clients (the re-implementations' (n - m - s) / (n - m)):
        # n = 10, m = 2: k = 8, s = 4, Phi^-1(4 / 8) = 0 (the paper's reading: 0.2533471 above)
        (10, 2, "benign", 0.0),
        # n = 50, m = 12: k = 38, s = 14, Phi^-1(24 / 38) = Phi^-1(0.6315789) = 0.3360381 (the paper's: 0.5828415)
        (50, 12, "benign", 0.3360381),
        # n = 20, m = 4: k = 16, s = 11 - 4 = 7, Phi^-1(9 / 16) = Phi^-1(0.5625) = 0.1573107
        (20, 4, "benign", 0.1573107),
        # n = 10, m = 6: k = 4, s = 0 -> 1, Phi^-1(3 / 4) = 0.6744898; n = 4, m = 3: k = 1, 0
        (10, 6, "benign", 0.6744898),
        (4, 3, "benign", 0.0),
    ],
)
def test_z_max_clamps_and_its_benign_reading_by_hand(n: int, m: int, among: updates.ZShare, z: float) -> None:
    assert updates.z_max(n, m, among) == pytest.approx(z, abs=1e-6)


def test_lie_reads_z_max_over_the_option_z_among() -> None:
    # n = 5 clients, m = 1 attacker (client 4); benign models [1, 3], [3, 7], [1, 3], [3, 7]: mean [2, 5], population std [1, 2]
    # clients (default): s = floor(3.5) - 1 = 2, z = Phi^-1(3 / 5) = 0.2533471: [2 + 0.2533471, 5 + 0.5066942]
    # benign: k = 4, z = Phi^-1((4 - 2) / 4) = 0: the benign mean [2, 5] itself
    results = [result(0, 1.0, 3.0), result(1, 3.0, 7.0), result(2, 1.0, 3.0), result(3, 3.0, 7.0), result(4, 50.0, 50.0)]
    paper = malicious(attack("lie"), W, results, frozenset({4}), 0, 0)[4].params["w"]
    assert torch.allclose(paper, t(2.2533471, 5.5066942), atol=1e-6)
    benign = malicious(attack("lie", z_among="benign"), W, results, frozenset({4}), 0, 0)[4].params["w"]
    assert torch.allclose(benign, t(2.0, 5.0), atol=1e-6)
    with pytest.raises(ConfigError) as err:
        attack("lie", z_among="honest")
    assert err.value.field == "attack.z_among"


def test_lie_sends_mean_plus_z_std_of_the_benign_models() -> None:
    # benign models [1, 3] and [3, 7]: mean [2, 5], population std [1, 2]
    # z = 0.5: [2 + 0.5, 5 + 1] = [2.5, 6]; both attackers send it, whatever they trained
    # (Baruch et al.'s code forges the gradient mean - z std; on models, where d = -lr g, that is mean + z std)
    results = [result(0, 1.0, 3.0), result(1, 3.0, 7.0), result(2, 50.0, 50.0), result(3, -9.0, 0.0)]
    out = malicious(attack("lie", z=0.5), W, results, frozenset({2, 3}), 0, 0)
    assert torch.equal(out[2].params["w"], t(2.5, 6.0)) and torch.equal(out[3].params["w"], t(2.5, 6.0))
    assert out[0].params is results[0].params and out[1].params is results[1].params
    # z = 0 in the config: z_max(4, 2) = Phi^-1((4 - 1) / 4) (s = floor(3) - 2 = 1) = Phi^-1(0.75) = 0.6744898
    out = malicious(attack("lie"), W, results, frozenset({2, 3}), 0, 0)
    expected = t(2.0, 5.0) + 0.6744898 * t(1.0, 2.0)
    assert torch.allclose(out[2].params["w"], expected, atol=1e-6)


def test_lie_with_its_own_reference_uses_the_attackers_honest_models_only() -> None:
    # reference = "own" (Baruch et al.'s non-omniscient attacker): the attackers' honest models [50, 50] and [-10, 0]:
    # mean [20, 25], population std [30, 25]; z = 0.5: [20 + 15, 25 + 12.5] = [35, 37.5], whatever the benign models are
    results = [result(0, 1.0, 3.0), result(1, 3.0, 7.0), result(2, 50.0, 50.0), result(3, -10.0, 0.0)]
    out = malicious(attack("lie", z=0.5, reference="own"), W, results, frozenset({2, 3}), 0, 0)
    assert torch.equal(out[2].params["w"], t(35.0, 37.5)) and torch.equal(out[3].params["w"], t(35.0, 37.5))
    assert out[0].params is results[0].params and out[1].params is results[1].params
    # one attacker: its own spread is 0, so it sends its honest model
    alone = malicious(attack("lie", z=0.5, reference="own"), W, results[:3], frozenset({2}), 0, 0)
    assert torch.equal(alone[2].params["w"], t(50.0, 50.0))
    # the default is still the benign models' (omniscient): [2, 5] + 0.5 [1, 2]
    assert torch.equal(malicious(attack("lie", z=0.5), W, results, frozenset({2, 3}), 0, 0)[2].params["w"], t(2.5, 6.0))


def test_lie_forges_the_model_of_the_papers_forged_gradient() -> None:
    """Baruch et al.'s code forges the gradient g_m = mean(g) - z std(g) and the server steps w - lr g. With w = [1, 2],
    lr = 1 and benign gradients g_1 = [1, 0], g_2 = [3, 4] (mean [2, 2], population std [1, 2]), z = 1:
    g_m = [1, 0], so the model the server ends up with from it is w - g_m = [0, 2]. The benign clients' models are
    w - g = [0, 2] and [-2, -2] (mean [-1, 0], std [1, 2]): the LIE upload is mean + z std = [0, 2], not [-2, -2]."""
    results = [result(0, 0.0, 2.0), result(1, -2.0, -2.0), result(2, 9.0, 9.0)]
    out = malicious(attack("lie", z=1.0), W, results, frozenset({2}), 0, 0)
    assert torch.equal(out[2].params["w"], t(0.0, 2.0))
    # sign = "minus": the mirror image, mean - z std = [-1 - 1, 0 - 2] = [-2, -2]
    mirrored = malicious(attack("lie", z=1.0, sign="minus"), W, results, frozenset({2}), 0, 0)
    assert torch.equal(mirrored[2].params["w"], t(-2.0, -2.0))


def test_lie_works_in_float64_and_sends_each_entrys_dtype() -> None:
    """float32 sums 2^24 + 1 + 1 to 2^24 (the 1s are below its spacing there): a mean of 5592405.5 after rounding, where
    the exact mean 16777218 / 3 = 5592406 is a float32 number. In float64 the attack sends the exact one."""
    from chillfl.attacks import updates

    benign = [{"w": torch.tensor([2.0**24])}, {"w": torch.tensor([1.0])}, {"w": torch.tensor([1.0])}]
    sent = updates.lie(benign, {"w": torch.zeros(1)}, 0.0)["w"]
    assert sent.dtype == torch.float32 and sent.item() == 5592406.0


def test_no_attacker_in_the_round_changes_nothing() -> None:
    results = [result(0, 1.0, 3.0), result(1, 3.0, 7.0)]
    for kind in ("sign_flip", "scaling", "gaussian", "lie"):
        out = malicious(attack(kind), W, results, frozenset({5}), 0, 0)
        assert all(a.params is b.params for a, b in zip(out, results))


def test_attacked_fedavg_averages_what_the_attacker_sent() -> None:
    # clients 0 (honest, [3, 4]) and 1 (sign_flip: trained [2, 0], sends [0, 4]), one sample each:
    # FedAvg's mean = ([3, 4] + [0, 4]) / 2 = [1.5, 4]
    agg = AttackedAggregation(FedAvg(), attack("sign_flip"), frozenset({1}), 0)
    new = agg.aggregate(W, [result(0, 3.0, 4.0), result(1, 2.0, 0.0)], 0)
    assert torch.allclose(new["w"], t(1.5, 4.0))
    assert agg.state_dict() == FedAvg().state_dict()  # no state of its own: its checkpoint is the base's


# ---------------------------------------------------------------- the attackers' data


def test_label_flip() -> None:
    # C = 3: c -> C - 1 - c, [0, 1, 2, 2] -> [2, 1, 0, 0]
    mapping = flip_map((), 3)
    assert mapping == [2, 1, 0]
    assert flip_labels(torch.tensor([0, 1, 2, 2]), mapping).tolist() == [2, 1, 0, 0]
    assert flip_map((1, 0, 2), 3) == [1, 0, 2]
    with pytest.raises(ConfigError) as err:
        flip_map((1, 0), 3)
    assert err.value.field == "attack.label_map"


def test_trigger_stamps_the_bottom_right_square() -> None:
    x = torch.zeros((2, 1, 4, 4))
    out = Trigger(2, 9.0).apply(x)
    assert out[:, :, 2:, 2:].eq(9.0).all() and out.sum() == 2 * 4 * 9.0  # 4 pixels of 9 per image, nothing else
    assert x.sum() == 0  # a new tensor


def _toy_data() -> FederatedData:
    # 8 training rows, labels 0..3 twice; client 0 holds rows 0-3, client 1 rows 4-7
    ds = ArrayDataset("toy", torch.zeros((8, 1, 3, 3)), torch.tensor([0, 1, 2, 3, 0, 1, 2, 3]), torch.zeros((4, 1, 3, 3)), torch.tensor([0, 1, 2, 3]), 4)
    return FederatedData(ds, [np.arange(0, 4), np.arange(4, 8)], [np.zeros(0, np.int64)] * 2, None, np.zeros(0, np.int64))


def test_poisoned_data_touches_only_the_attackers_rows() -> None:
    data = _toy_data()
    flipped = poisoned(data, attack("label_flip"), frozenset({1}), 0)
    assert flipped.dataset.y_train.tolist() == [0, 1, 2, 3, 3, 2, 1, 0]  # client 1: c -> 3 - c
    assert data.dataset.y_train.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]  # the original is never mutated
    back = poisoned(data, attack("backdoor", target=2, poison_fraction=0.5, trigger_size=1), frozenset({0}), 0)
    rows = poison_rows(4, 0.5, 0, 0)  # round(0.5 * 4) = 2 of client 0's 4 rows
    assert len(rows) == 2
    assert back.dataset.y_train[torch.from_numpy(rows)].tolist() == [2, 2]
    stamped = torch.cat([back.client_train(0)[0], back.client_train(1)[0]])[:, 0, 2, 2]  # the 1x1 trigger's pixel; the value: the training inputs' largest, 0 here
    assert torch.equal(stamped, torch.zeros(8)) and torch.equal(back.dataset.y_train[4:], data.dataset.y_train[4:])


# ---------------------------------------------------------------- who attacks


def test_attackers_are_drawn_from_the_seed() -> None:
    a = attackers(attack("scaling", fraction=0.2), 10, 3)
    assert len(a) == 2 and a == attackers(attack("scaling", fraction=0.2), 10, 3)  # round(0.2 * 10) = 2
    assert {frozenset(attackers(attack("scaling"), 10, s)) for s in range(6)} != {a}  # the seed picks them
    assert attackers(attack("scaling", clients=(4, 7)), 10, 3) == {4, 7}
    assert attackers(attack(), 10, 3) == frozenset()


@pytest.mark.parametrize(
    ("fraction", "clients", "count"),
    [(0.25, 10, 2), (0.3, 5, 2), (0.35, 10, 4), (0.15, 10, 2),
     # the written fraction's product, not the float one: 0.35 x 90 = 31.5 -> 32 (the float product 31.499999999999996
     # gave 31), 0.14 x 75 = 10.5 -> 10 (10.500000000000002 gave 11), 0.7 x 45 = 31.5 -> 32 (31.499999999999996 gave 31)
     (0.35, 90, 32), (0.14, 75, 10), (0.7, 45, 32)],
)
def test_the_attacker_count_is_pythons_round_halves_to_even(fraction: float, clients: int, count: int) -> None:
    # docs/attacks.md: round(fraction * num_clients), Python's round: 2.5 -> 2, 1.5 -> 2, 3.5 -> 4
    assert len(attackers(attack("scaling", fraction=fraction), clients, 0)) == count


@pytest.mark.parametrize(("n", "fraction", "count"), [(10, 0.5, 5), (90, 0.35, 32), (75, 0.14, 10), (3, 0.1, 1)])
def test_the_poisoned_row_count_rounds_the_written_fraction(n: int, fraction: float, count: int) -> None:
    # round(poison_fraction * n), at least one: 31.5 -> 32 and 10.5 -> 10 (halves to even), 0.3 -> 1 (the floor of one row)
    from chillfl.attacks.poison import poison_rows

    rows = poison_rows(n, fraction, 0, 0)
    assert len(rows) == count and len(set(rows.tolist())) == count


@pytest.mark.parametrize(
    ("table", "field"),
    [
        (attack("scaling", fraction=0.01), "attack.fraction"),  # round(0.01 * 10) = 0 attackers
        (attack("scaling", fraction=0.95), "attack.fraction"),  # round(0.95 * 10) = 10: nobody honest (was accepted)
        (attack("scaling", clients=(3, 10)), "attack.clients"),
    ],
)
def test_bad_attackers_are_refused(table: AttackConfig, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        attackers(table, 10, 0)
    assert err.value.field == field


def test_every_client_attacking_is_allowed_by_name_only() -> None:
    assert len(attackers(attack("scaling", fraction=0.9), 10, 0)) == 9
    assert attackers(attack("scaling", clients=tuple(range(10))), 10, 0) == frozenset(range(10))  # named: meant (a free-riding study)


# ---------------------------------------------------------------- the config and the refusals


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"attack.kind": "poison"}, "attack.kind"),
        ({"attack.fraction": 1.0}, "attack.fraction"),
        ({"attack.sigma": 0.0}, "attack.sigma"),
        ({"attack.factor": -1.0}, "attack.factor"),
        ({"attack.clients": [1, 1]}, "attack.clients"),
        ({"attack.poison_fraction": 0.0}, "attack.poison_fraction"),
        ({"attack.unknown": 1}, "attack.unknown"),
    ],
)
def test_bad_options_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert err.value.field == field


SOFT = {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20}}
PROTO = {"prototypes": {"method": "fedproto"}}


@pytest.mark.parametrize(
    ("kind", "protocol"),
    [(k, protocol) for k in ("sign_flip", "scaling", "lie") for protocol in (SOFT, PROTO)],
)
def test_update_attacks_are_refused_where_no_update_travels(kind: str, protocol: dict[str, Any]) -> None:
    config = load_config(None, {"attack.kind": kind}).with_overrides(protocol)
    with pytest.raises(ConfigError) as err:
        check_attack(config)
    assert err.value.field == "attack.kind" and kind in err.value.message


@pytest.mark.parametrize("kind", ["label_flip", "backdoor"])
@pytest.mark.parametrize("protocol", [SOFT, PROTO, {}])
def test_data_attacks_apply_under_every_protocol(kind: str, protocol: dict[str, Any]) -> None:
    check_attack(load_config(None, {"attack.kind": kind}).with_overrides(protocol))


def test_gaussian_soft_labels_stay_probabilities() -> None:
    # [-0.2, 0.6, 0.6]: the negative entry -> 0, then / 1.2 -> [0, 0.5, 0.5]; [-1, -1]: nothing left -> uniform [0.5, 0.5]
    assert torch.allclose(to_simplex(t(-0.2, 0.6, 0.6)[None]), t(0.0, 0.5, 0.5)[None])
    assert torch.equal(to_simplex(t(-1.0, -1.0)[None]), t(0.5, 0.5)[None])
    rows = t(0.25, 0.75)[None]
    z = torch.randn((1, 2), generator=torch.Generator().manual_seed(derive_seed(3, "attack", "rows", 1, 4)))
    forged = ForgedRows(frozenset({4}), gaussian.forge_rows, gaussian.GaussianOptions(0.1), 3, logits=False)
    assert torch.equal(forged.release(rows, 4, 1), to_simplex(rows + 0.1 * z))  # attacker 4, round 1
    assert forged.release(rows, 5, 1) is rows  # an honest client's rows, as predicted
    assert torch.equal(ForgedRows(frozenset({4}), gaussian.forge_rows, gaussian.GaussianOptions(0.1), 3, logits=True).release(rows, 4, 1), rows + 0.1 * z)  # logits: not projected


def test_gaussian_prototypes_noise_the_held_classes_only() -> None:
    # counts [2, 0]: class 0's row gets sigma * z, class 1's (not held, all zero) stays 0
    means, counts = torch.ones((2, 3)), torch.tensor([2, 0])
    means[1] = 0.0
    z = torch.randn((2, 3), generator=torch.Generator().manual_seed(11))
    out = noisy_means(means, counts, 0.5, 11)
    assert torch.equal(out[0], 1.0 + 0.5 * z[0]) and torch.equal(out[1], torch.zeros(3))


def test_forged_prototypes_rewrite_only_the_attackers_replies() -> None:
    from chillfl.engine.protocol import ClientReply
    from chillfl.protocols.prototypes import KnowledgeUplink
    from chillfl.prototypes.spec import ClassRows

    def reply(cid: int) -> ClientReply[KnowledgeUplink, None]:
        return ClientReply(cid, KnowledgeUplink(ClassRows(torch.ones((2, 3)), torch.tensor([1, 1])), None, 2, 1, 0.0))

    honest, attacker = reply(0), reply(1)
    out = ForgedPrototypes(frozenset({1}), gaussian.forge_prototypes, gaussian.GaussianOptions(0.5), 3)(4, [honest, attacker])
    assert out[0] is honest
    z = torch.randn((2, 3), generator=torch.Generator().manual_seed(derive_seed(3, "attack", "prototypes", 4, 1)))
    assert torch.equal(out[1].uplink.rows.means, 1.0 + 0.5 * z)
    assert torch.equal(attacker.uplink.rows.means, torch.ones((2, 3)))  # the received reply is not mutated


def test_a_backdoor_trigger_larger_than_the_images_names_trigger_size() -> None:
    from chillfl.experiment import build_experiment

    # the demo's digits are 8x8 images: a 9x9 square does not fit, and the option that sizes it is what to change
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {"attack.kind": "backdoor", "attack.trigger_size": 9, "federation.num_clients": 4}))
    assert err.value.field == "attack.trigger_size" and "9x9" in err.value.message and "at most 8" in err.value.message


def _three_channel_data() -> FederatedData:
    # 4 training rows of 3 x 3 x 3: channel c of row r holds (c + 1) * r / 3, so channel c's largest is c + 1
    # (1, 2, 3): a trigger white on every channel stamps 1, 2 and 3, not the overall largest 3 on all three
    x = torch.arange(4, dtype=torch.float32).reshape(4, 1, 1, 1) / 3 * torch.tensor([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1)
    x = x.expand(4, 3, 3, 3).clone()
    ds = ArrayDataset("rgb", x, torch.tensor([0, 1, 0, 1]), torch.zeros((2, 3, 3, 3)), torch.tensor([0, 1]), 2)
    return FederatedData(ds, [np.arange(0, 4)], [np.zeros(0, np.int64)], None, np.zeros(0, np.int64))


def test_a_pixel_trigger_is_each_channels_largest_value() -> None:
    from chillfl.attacks.kinds import backdoor, dba

    data = _three_channel_data()
    back = poisoned(data, attack("backdoor", target=1, poison_fraction=1.0, trigger_size=1), frozenset({0}), 0)
    assert back.client_train(0)[0][:, :, 2, 2].tolist() == [[1.0, 2.0, 3.0]] * 4  # the bottom-right pixel, per channel
    x, y = backdoor.probe(backdoor.BackdoorOptions(target=1, trigger_size=2), data)  # the test rows of label 0, triggered
    assert y.tolist() == [1] and x[0, :, 1:, 1:].tolist() == [[[1.0, 1.0]] * 2, [[2.0, 2.0]] * 2, [[3.0, 3.0]] * 2]
    assert x[0, :, 0, :].eq(0).all() and x[0, :, :, 0].eq(0).all()  # nothing outside the square
    # dba, one part of one pixel at (0, 0): the same per-channel values on that pixel
    opts = dba.DbaOptions(target=1, poison_fraction=1.0, parts=1, bar_length=1)
    out = dba.poison(opts, data, frozenset({0}), 0)
    assert out.client_train(0)[0][:, :, 0, 0].tolist() == [[1.0, 2.0, 3.0]] * 4
    x, _ = dba.probe(opts, data)
    assert x[0, :, 0, 0].tolist() == [1.0, 2.0, 3.0]


def test_a_one_channel_trigger_keeps_the_largest_value() -> None:
    # 1 channel (and no channel dim at all): one value, the training inputs' largest, as before per-channel values
    x = torch.tensor([[[[0.0, 4.0], [1.0, 2.0]]]])
    assert Trigger(1, (4.0,)).apply(torch.zeros((1, 1, 2, 2))).tolist() == [[[[0.0, 0.0], [0.0, 4.0]]]]
    from chillfl.attacks.poison import channel_max

    assert channel_max(x) == (4.0,) and channel_max(x[:, 0]) == (4.0,)


@pytest.mark.parametrize(("over", "line"), [
    ({"attack.kind": "backdoor", "attack.trigger_size": 9},
     "attack.trigger_size: 'backdoor' stamps a 9x9 pixel square, larger than the 8x8 images: set it to at most 8"),
    ({"attack.kind": "dba", "attack.bar_length": 9},
     "attack.bar_length: 'dba' stamps 1 bar of 9 pixels in a 1x9 corner, larger than the 8x8 images: set a shorter bar_length or a smaller gap"),
])
def test_a_trigger_too_large_for_the_images_says_its_size_once(over: dict[str, Any], line: str) -> None:
    """It said "a 9x9 pixel square (9x9 pixels)" and "1 bars ... in a 1x9 corner (1x9 pixels)"."""
    from chillfl.experiment import build_experiment

    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, **over}))
    assert str(err.value) == line
