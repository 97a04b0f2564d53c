"""``ipm``, ``min_max``, ``min_sum``: what the attackers send, on tiny updates worked out by hand; the search finds the
boundary of each condition; the fallbacks; the option errors; a run end to end under FedAvg and the median."""

from __future__ import annotations

import json
import math
import typing
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from chillfl import runner
from chillfl.aggregation.base import ClientResult
from chillfl.attacks import updates
from chillfl.attacks.aggregate import malicious
from chillfl.attacks.kinds._agnostic import AgnosticOptions
from chillfl.attacks.kinds.min_sum import MinSumOptions
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment
from chillfl.settings.attack import AttackConfig

TOL = 1e-5


def attack(kind: str, **options: Any) -> AttackConfig:
    return AttackConfig.from_table({"kind": kind, **options}, "attack")


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


W = {"w": t(1.0, 2.0), "count": torch.tensor(7)}
"""The round's global model: one float entry and an integer buffer (which no attack rewrites)."""


def result(cid: int, *values: float, count: int = 8) -> ClientResult:
    return ClientResult(cid, {"w": t(*values), "count": torch.tensor(count)}, 1, 1, 0.1, 1.0, 0.0)


# ---------------------------------------------------------------- ipm


def test_ipm_sends_the_benign_mean_reversed() -> None:
    # w = [1, 2]; benign models [2, 3], [1, 6], [3, 0]: updates [1, 1], [0, 4], [2, -2]; mean = [3, 3] / 3 = [1, 1]
    # epsilon 0.5: w - 0.5 [1, 1] = [0.5, 1.5]; epsilon 100: [1 - 100, 2 - 100] = [-99, -98]
    results = [result(0, 2.0, 3.0), result(1, 1.0, 6.0), result(2, 3.0, 0.0), result(3, 50.0, 50.0, count=3), result(4, -9.0, 0.0, count=4)]
    out = malicious(attack("ipm", epsilon=0.5), W, results, frozenset({3, 4}), 0, 0)
    assert torch.equal(out[3].params["w"], t(0.5, 1.5)) and torch.equal(out[4].params["w"], t(0.5, 1.5))
    assert [int(r.params["count"]) for r in out[3:]] == [3, 4]  # each keeps its own integer buffers
    assert all(out[i].params is results[i].params for i in range(3))  # the benign clients send what they trained
    big = malicious(attack("ipm", epsilon=100.0), W, results, frozenset({3, 4}), 0, 0)
    assert torch.equal(big[3].params["w"], t(-99.0, -98.0))
    assert attack("ipm").options.epsilon == 0.1  # FLPoison's default (the paper's value unchecked: src/chillfl/attacks/kinds/ipm.py)


def test_ipm_without_benign_clients_reverses_the_attackers_own_mean() -> None:
    # attackers only: their updates [1, 1] and [3, -1], mean [2, 0]; epsilon 0.5: [1 - 1, 2 - 0] = [0, 2]
    results = [result(3, 2.0, 3.0), result(4, 4.0, 1.0)]
    out = malicious(attack("ipm", epsilon=0.5), W, results, frozenset({3, 4}), 0, 0)
    assert torch.equal(out[0].params["w"], t(0.0, 2.0)) and torch.equal(out[1].params["w"], t(0.0, 2.0))


# ---------------------------------------------------------------- min_max, min_sum: by hand

ONE_D = {"w": t(1.0), "count": torch.tensor(7)}
"""A 1-D global model w = 1."""


def one_d(kind: str, perturbation: str, **options: Any) -> torch.Tensor:
    """What the attacker (client 3) sends when the benign models are 1, 1, 4: updates d = 0, 0, 3."""
    results = [ClientResult(i, {"w": t(v), "count": torch.tensor(8)}, 1, 1, 0.1, 1.0, 0.0) for i, v in enumerate((1.0, 1.0, 4.0, -20.0))]
    out = malicious(attack(kind, perturbation=perturbation, **options), ONE_D, results, frozenset({3}), 0, 0)
    assert all(out[i].params is results[i].params for i in range(3))
    return out[3].params["w"]


# d = 0, 0, 3: mu = 1; max pairwise distance 3 (squared 9); per i, sum_j (d_i - d_j)^2 = 9, 9, 18: max 18.
# sign: p = -sign(1) = -1, d_m = 1 - g; distances |1 - g| (twice) and 2 + g.
#   min-max: 2 + g <= 3 -> g = 1, sends w + d_m = 1 + 1 - 1 = 1.
#   min-sum: 2 (1 - g)^2 + (2 + g)^2 = 6 + 3 g^2 <= 18 -> g = 2, sends 1 + 1 - 2 = 0.
# std (sample: squared deviations 1 + 1 + 4 = 6, / (3 - 1) = 3): p = +sqrt(3), the paper's -std of the gradients
# (g = -d); with x = g sqrt(3), d_m = 1 + x, distances 1 + x (twice) and |x - 2|.
#   min-max: 1 + x <= 3 -> x = 2, g = 2 / sqrt(3), sends 1 + 1 + 2 = 4.
#   min-sum: 2 (1 + x)^2 + (x - 2)^2 = 6 + 3 x^2 <= 18 -> x = 2, g = 2 / sqrt(3), sends 4.
@pytest.mark.parametrize(("kind", "perturbation", "sent"), [("min_max", "sign", 1.0), ("min_sum", "sign", 0.0), ("min_max", "std", 4.0), ("min_sum", "std", 4.0)])
def test_one_d_by_hand(kind: str, perturbation: str, sent: float) -> None:
    assert one_d(kind, perturbation).item() == pytest.approx(sent, abs=4 * TOL * math.sqrt(3))


# Min-Sum with bound = "min" (the authors' code): the right side is min(9, 9, 18) = 9.
#   sign: 6 + 3 g^2 <= 9 -> g = 1, sends 1 + 1 - 1 = 1;  std: 6 + 3 x^2 <= 9 -> x = 1, g = 1 / sqrt(3), sends 1 + 1 + 1 = 3.
@pytest.mark.parametrize(("perturbation", "gamma", "sent"), [("sign", 1.0, 1.0), ("std", 1 / math.sqrt(3), 3.0)])
def test_min_sum_with_the_authors_min_bound_by_hand(perturbation: updates.Perturbation, gamma: float, sent: float) -> None:
    assert one_d("min_sum", perturbation, bound="min").item() == pytest.approx(sent, abs=4 * TOL * math.sqrt(3))
    benign = [{"w": t(v)} for v in (1.0, 1.0, 4.0)]
    _, found = updates.agnostic({"w": t(1.0)}, benign, {"w": t(1.0)}, perturbation, lambda sp, g: updates.min_sum_holds(sp, g, "min"), 10.0, TOL)
    assert gamma - 2 * TOL <= found <= gamma


@pytest.mark.parametrize(
    ("condition", "perturbation", "gamma"),
    [
        (updates.min_max_holds, "sign", 1.0),
        (updates.min_sum_holds, "sign", 2.0),
        (updates.min_max_holds, "std", 2 / math.sqrt(3)),
        (updates.min_sum_holds, "std", 2 / math.sqrt(3)),
    ],
)
def test_one_d_gamma_by_hand(condition: Callable[[updates.Spread, float], bool], perturbation: updates.Perturbation, gamma: float) -> None:
    benign = [{"w": t(v)} for v in (1.0, 1.0, 4.0)]
    _, found = updates.agnostic({"w": t(1.0)}, benign, {"w": t(1.0)}, perturbation, condition, 10.0, TOL)
    assert gamma - 2 * TOL <= found <= gamma  # the search ends just below the boundary, never above it


def test_unit_perturbation_in_two_d_by_hand() -> None:
    # w = [0, 0]; benign updates [0, 0], [0, 0], [6, 8]: mu = [2, 8/3], ||mu|| = 10/3, p = -mu / ||mu|| = -[0.6, 0.8].
    # All lie on the line through 0 along [0.6, 0.8], at t = 0, 0, 10; mu at t = 10/3, d_m at 10/3 - g.
    # min-max: max distance = 10 - (10/3 - g) = 20/3 + g <= 10 (the pairwise max) -> g = 10/3; d_m = 0: sends [0, 0].
    # min-sum: 2 (10/3 - g)^2 + (20/3 + g)^2 = 600/9 + 3 g^2 <= 200 (= 100 + 100, the third's sum) -> g^2 = 400/9,
    #   g = 20/3; d_m at t = -10/3: sends -10/3 [0.6, 0.8] = [-2, -8/3].
    zero = {"w": t(0.0, 0.0)}
    benign = [{"w": t(0.0, 0.0)}, {"w": t(0.0, 0.0)}, {"w": t(6.0, 8.0)}]
    sent, gamma = updates.agnostic(zero, benign, zero, "unit", updates.min_max_holds, 10.0, TOL)
    assert 10 / 3 - 2 * TOL <= gamma <= 10 / 3 and torch.allclose(sent["w"], t(0.0, 0.0), atol=4 * TOL)
    sent, gamma = updates.agnostic(zero, benign, zero, "unit", updates.min_sum_holds, 10.0, TOL)
    assert 20 / 3 - 2 * TOL <= gamma <= 20 / 3 and torch.allclose(sent["w"], t(-2.0, -8 / 3), atol=4 * TOL)
    # min-sum, bound = "min": 600/9 + 3 g^2 <= 100 (the first two's sums) -> g = 10/3, d_m = 0: sends [0, 0]
    sent, gamma = updates.agnostic(zero, benign, zero, "unit", lambda sp, g: updates.min_sum_holds(sp, g, "min"), 10.0, TOL)
    assert 10 / 3 - 2 * TOL <= gamma <= 10 / 3 and torch.allclose(sent["w"], t(0.0, 0.0), atol=4 * TOL)


# ---------------------------------------------------------------- the search finds the boundary


def test_gamma_search_of_algorithm_1() -> None:
    # the boundary at 3.3: found within tol below it; never holds: 0; always holds: the moves sum to < gamma_init,
    # so it ends just below 2 gamma_init = 20
    assert 3.3 - TOL <= updates.gamma_search(lambda g: g <= 3.3, 10.0, TOL) <= 3.3
    assert updates.gamma_search(lambda g: False, 10.0, TOL) == 0.0
    assert 20.0 - 2 * TOL <= updates.gamma_search(lambda g: True, 10.0, TOL) < 20.0
    assert updates.gamma_search(lambda g: g <= 1 / 3, 10.0, 1e-300) == pytest.approx(1 / 3, abs=1e-12)  # a tol below float resolution still ends


def _direct(benign: list[torch.Tensor], sent: torch.Tensor) -> tuple[bool, bool]:
    """Both conditions on flat float64 updates, computed from their definitions (not through :class:`updates.Spread`)."""
    d = torch.stack(benign)
    to_m = torch.stack([(sent - x).norm() for x in d])
    pair = torch.stack([torch.stack([(x - y).norm() for y in d]) for x in d])
    return bool(to_m.max() <= pair.max()), bool(to_m.square().sum() <= pair.square().sum(1).max())


@pytest.mark.parametrize("perturbation", updates.PERTURBATIONS)
@pytest.mark.parametrize(("which", "condition"), [(0, updates.min_max_holds), (1, updates.min_sum_holds)], ids=["min_max", "min_sum"])
def test_the_condition_holds_at_gamma_and_fails_just_above(perturbation: updates.Perturbation, which: int, condition: Callable[[updates.Spread, float], bool]) -> None:
    gen = torch.Generator().manual_seed(3)
    w = {"a": torch.randn((3, 2), generator=gen, dtype=torch.float64), "b": torch.randn(4, generator=gen, dtype=torch.float64)}
    benign = [{k: v + 0.5 * torch.randn(v.shape, generator=gen, dtype=torch.float64) + 0.3 for k, v in w.items()} for _ in range(5)]
    sent, gamma = updates.agnostic(w, benign, w, perturbation, condition, 10.0, TOL)
    flat = [torch.cat([(m[k] - w[k]).reshape(-1) for k in w]) for m in benign]
    mu = torch.stack(flat).mean(0)
    p = {"std": torch.stack(flat).std(0), "unit": -mu / mu.norm(), "sign": -mu.sign()}[perturbation]
    assert torch.allclose(torch.cat([(sent[k] - w[k]).reshape(-1) for k in w]), mu + gamma * p)  # what is sent: w + mu + gamma p
    assert 0 < gamma < 20
    assert _direct(flat, mu + gamma * p)[which]  # holds at the gamma found
    assert not _direct(flat, mu + (gamma + 2 * TOL) * p)[which]  # and fails just above it: the boundary


@pytest.mark.parametrize("perturbation", updates.PERTURBATIONS)
@pytest.mark.parametrize("condition", [updates.min_max_holds, updates.min_sum_holds], ids=["min_max", "min_sum"])
def test_the_update_sent_is_the_papers_forged_gradient_reversed(perturbation: updates.Perturbation, condition: Callable[[updates.Spread, float], bool]) -> None:
    """The paper forges gradients g (FedSGD: the server steps w - lr g): g_m = mu_g + gamma p_g with p_g = -std(g),
    -mu_g / ||mu_g|| or -sign(mu_g) (the authors' code: ``mal_update = model_re - lamda * deviation``). An upload here is a
    model, its update d = -lr g after one step: at lr = 1 the model sent must be w - g_m. Reversing every update reverses
    mu, and p with it for unit and sign, but a spread does not reverse: in update space the paper's p is +std(d)."""
    gen = torch.Generator().manual_seed(5)
    w = {"a": torch.randn(6, generator=gen, dtype=torch.float64)}
    grads = torch.randn(5, 6, generator=gen, dtype=torch.float64) + 0.3
    sent, gamma = updates.agnostic(w, [{"a": w["a"] - g} for g in grads], w, perturbation, condition, 10.0, TOL)
    mu_g = grads.mean(0)
    p_g = {"std": -grads.std(0), "unit": -mu_g / mu_g.norm(), "sign": -mu_g.sign()}[perturbation]
    assert 0 < gamma < 20 and torch.allclose(sent["a"], w["a"] - (mu_g + gamma * p_g))


def test_perturbation_options_match_the_maths() -> None:
    assert typing.get_args(typing.get_type_hints(AgnosticOptions)["perturbation"]) == updates.PERTURBATIONS
    assert attack("min_max").options == AgnosticOptions("std", 10.0, 1e-5)
    assert attack("min_sum").options == MinSumOptions("std", 10.0, 1e-5, "max")  # the paper's bound by default
    assert typing.get_args(typing.get_type_hints(MinSumOptions)["bound"]) == typing.get_args(updates.Bound)


def test_float32_entries_come_back_float32() -> None:
    benign = [{"w": t(1.0, 2.0)}, {"w": t(2.0, 0.0)}, {"w": t(0.0, 5.0)}]
    sent, _ = updates.agnostic(W, benign, W, "std", updates.min_sum_holds, 10.0, TOL)
    assert sent["w"].dtype == torch.float32 and updates.ipm(W, benign, W, 0.1)["w"].dtype == torch.float32


# ---------------------------------------------------------------- fallbacks


@pytest.mark.parametrize("kind", ["min_max", "min_sum"])
def test_fewer_than_two_benign_updates_use_every_honest_update_of_the_round(kind: str) -> None:
    # one benign update (client 0) and two attackers: the reference is all three, as if benign
    results = [result(0, 2.0, 3.0), result(3, 1.0, 6.0), result(4, 3.0, 0.0)]
    out = malicious(attack(kind, perturbation="sign"), W, results, frozenset({3, 4}), 0, 0)
    condition = updates.min_max_holds if kind == "min_max" else updates.min_sum_holds
    expected, _ = updates.agnostic(W, [r.params for r in results], W, "sign", condition, 10.0, TOL)
    assert torch.equal(out[1].params["w"], expected["w"]) and torch.equal(out[2].params["w"], expected["w"])
    assert not torch.equal(out[1].params["w"], results[1].params["w"])
    # a round of one client, an attacker: nothing to hide among, it sends its honest model
    alone = malicious(attack(kind), W, [result(3, 1.0, 6.0)], frozenset({3}), 0, 0)
    assert torch.equal(alone[0].params["w"], t(1.0, 6.0))


@pytest.mark.parametrize("kind", ["ipm", "min_max", "min_sum"])
def test_no_attacker_in_the_round_changes_nothing(kind: str) -> None:
    results = [result(0, 1.0, 3.0), result(1, 3.0, 7.0)]
    out = malicious(attack(kind), W, results, frozenset({5}), 0, 0)
    assert all(a.params is b.params for a, b in zip(out, results))


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("kind", "option", "value"),
    [
        ("ipm", "epsilon", 0.0),
        ("ipm", "epsilon", -1.0),
        ("ipm", "epsilon", math.inf),
        ("min_max", "perturbation", "gauss"),
        ("min_max", "gamma_init", 0.0),
        ("min_sum", "tol", -1e-5),
        ("min_sum", "perturbation", 3),
        ("min_sum", "bound", "mean"),
        ("lie", "reference", "all"),
    ],
)
def test_bad_options_are_one_line_naming_the_field(kind: str, option: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"attack.kind": kind, f"attack.{option}": value})
    assert err.value.field == f"attack.{option}" and "\n" not in str(err.value)


def test_an_option_of_the_wrong_kind_names_its_owners() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"attack.kind": "ipm", "attack.perturbation": "sign"})
    assert err.value.field == "attack.perturbation" and "min_max, min_sum" in err.value.message


# ---------------------------------------------------------------- end to end

TINY: dict[str, Any] = {
    "seed": 0,
    "threads": 1,
    "device": "cpu",
    "dataset.name": "digits",
    "partition.name": "iid",
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 10,
    "federation.clients_per_round": 10,
    "federation.rounds": 2,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.1,
    "eval.clients": "none",
    "checkpoint.every": 0,
}


def _records(tmp_path: Path, name: str, **overrides: Any) -> list[dict[str, Any]]:
    config = load_config(None, {**TINY, "out_dir": str(tmp_path), "name": name, **overrides})
    folder = run_experiment(config, progress=False).folder
    assert folder is not None
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("algorithm", ["fedavg", "median"])
def test_each_attack_runs_end_to_end(algorithm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    clean = _records(tmp_path, "clean", **{"algorithm.name": algorithm})
    for kind in ("ipm", "min_max", "min_sum"):
        lines = _records(tmp_path, kind, **{"algorithm.name": algorithm, "attack.kind": kind, "attack.fraction": 0.2})
        assert len(lines) == 2 and all(len(r["attackers"]) == 2 for r in lines)  # round(0.2 * 10) = 2, all sampled
        assert all(math.isfinite(r["global_loss"]) and 0.0 <= r["global_acc"] <= 1.0 for r in lines)
        assert [r["global_loss"] for r in lines] != [r["global_loss"] for r in clean]  # the forged models reached the aggregator
