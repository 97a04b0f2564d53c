"""The note on stderr when a robust rule withstands fewer attackers than ``[attack]`` has: under Poisson sampling (a round's
size varies, so no round size caps its attackers) and for the rules with no ``f`` (trimmed mean, median, geometric median),
whose tolerance follows from their options and the round's size (``AlgorithmSpec.withstands``)."""

from __future__ import annotations

from typing import Any

import pytest

from chillfl.aggregation.base import AroundAggregator
from chillfl.aggregation.geomed import GeoMed
from chillfl.aggregation.robust import Median, MedianOptions, TrimmedMean, TrimmedMeanOptions, beta_trimming, fewer_than_half, trims
from chillfl.api import make_config
from chillfl.config import load_config
from chillfl.experiment import fewer_attackers_note
from chillfl.numeric import floored_share
from chillfl.plugins import CUSTOM

SMALL: dict[str, Any] = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 10, "federation.rounds": 1, "eval.clients": "none"}


def note(**overrides: Any) -> str | None:
    return fewer_attackers_note(load_config(None, {**SMALL, **{k.replace("__", "."): v for k, v in overrides.items()}}))


# 20 clients, 7 a round, round(0.45 * 20) = 9 attackers: the report's DnC run at f = 2
POISSON_RUN = {"federation__num_clients": 20, "federation__clients_per_round": 7, "attack__kind": "sign_flip", "attack__fraction": 0.45}


def test_fixed_sampling_caps_the_attackers_at_a_rounds_size() -> None:
    """7 distinct clients a round hold at most 7 of the 9 attackers; DnC (floor(c f) < 7) takes f <= 6."""
    assert note(algorithm__name="dnc", algorithm__f=2, **POISSON_RUN) == (
        "note: algorithm.f = 2: dnc tolerates 2 attackers, and this run has 9 of 20 clients attacking, at most 7 in a round of 7; "
        "set algorithm.f = 6, the largest dnc accepts here (7 clients per round): none it accepts covers all 7")


def test_poisson_sampling_does_not_cap_the_attackers() -> None:
    """Under Poisson sampling 7 is the expected size: the report's rounds held 9 and 10 clients, one of them 5 attackers.
    The note said "at most 7 in a round of 7"; a round may hold all 9, so f is compared with 9."""
    assert note(algorithm__name="dnc", algorithm__f=2, federation__sampling="poisson", **POISSON_RUN) == (
        "note: algorithm.f = 2: dnc tolerates 2 attackers, and this run has 9 of 20 clients attacking; "
        "Poisson sampling varies a round's size (7 clients expected), so a round may hold all 9; "
        "set algorithm.f = 6, the largest dnc accepts here (7 clients expected per round): none it accepts covers all 9")


@pytest.mark.parametrize(("overrides", "said"), [
    # beta = 0.1 trims floor(0.1 * 10) = 1 a side against round(0.3 * 10) = 3 attackers; beta = 0.3 trims 3
    ({"algorithm__name": "trimmed_mean", "attack__fraction": 0.3},
     "note: trimmed_mean withstands 1 attacker of the 10 clients a round, and this run has 3 of 10 clients attacking; set algorithm.beta = 0.3"),
    # beta = 0 trims nothing: plain FedAvg under 1 attacker
    ({"algorithm__name": "trimmed_mean", "algorithm__beta": 0.0, "attack__fraction": 0.1},
     "note: trimmed_mean withstands no attacker of the 10 clients a round, and this run has 1 of 10 clients attacking; set algorithm.beta = 0.1"),
    # 5 of 10 needs beta = 0.5, outside [0, 0.5)
    ({"algorithm__name": "trimmed_mean", "attack__fraction": 0.5},
     "note: trimmed_mean withstands 1 attacker of the 10 clients a round, and this run has 5 of 10 clients attacking; trimmed_mean cannot withstand 5"),
    # 9 a round (20 clients): 3 attackers need floor(beta 9) >= 3, beta >= 1/3: 0.334 to three decimals
    ({"algorithm__name": "trimmed_mean", "federation__num_clients": 20, "federation__clients_per_round": 9, "attack__fraction": 0.15},
     "note: trimmed_mean withstands no attacker of the 9 clients a round, and this run has 3 of 20 clients attacking; set algorithm.beta = 0.334"),
    # the median withstands ceil(10 / 2) - 1 = 4 of 10; 6 attack
    ({"algorithm__name": "median", "attack__fraction": 0.6},
     "note: median withstands 4 attackers of the 10 clients a round, and this run has 6 of 10 clients attacking; median cannot withstand 6"),
    # exactly half: an even round's median is the mean of two middle values both attackers' own
    ({"algorithm__name": "median", "attack__fraction": 0.5},
     "note: median withstands 4 attackers of the 10 clients a round, and this run has 5 of 10 clients attacking; median cannot withstand 5"),
    ({"algorithm__name": "geomed", "attack__fraction": 0.6},
     "note: geomed withstands 4 attackers of the 10 clients a round, and this run has 6 of 10 clients attacking; geomed cannot withstand 6"),
    # 9 clients a round: 4 withstood, 5 attack of 20 (at most 5 a round)
    ({"algorithm__name": "geomed", "federation__num_clients": 20, "federation__clients_per_round": 9, "attack__fraction": 0.25},
     "note: geomed withstands 4 attackers of the 9 clients a round, and this run has 5 of 20 clients attacking; geomed cannot withstand 5"),
], ids=["trimmed-0.1", "trimmed-0", "trimmed-half", "trimmed-third", "median", "median-half", "geomed", "geomed-9"])
def test_rules_without_f_say_when_the_attackers_exceed_them(overrides: dict[str, Any], said: str) -> None:
    """Trimmed mean, median and geomed said nothing past what they withstand, while Krum said so."""
    assert note(attack__kind="sign_flip", **overrides) == said


@pytest.mark.parametrize("overrides", [
    {"algorithm__name": "trimmed_mean", "algorithm__beta": 0.3, "attack__fraction": 0.3},  # trims 3 of 3
    {"algorithm__name": "trimmed_mean", "attack__fraction": 0.1},  # the default beta = 0.1 trims the 1 attacker
    {"algorithm__name": "median", "attack__fraction": 0.4},  # 4 of 10: an honest majority
    {"algorithm__name": "geomed", "attack__fraction": 0.4},
    {"algorithm__name": "median", "federation__num_clients": 20, "federation__clients_per_round": 9, "attack__fraction": 0.2},  # 4 of 9
], ids=["trimmed-enough", "trimmed-default", "median", "geomed", "median-9"])
def test_an_honest_majority_says_nothing(overrides: dict[str, Any]) -> None:
    assert note(attack__kind="sign_flip", **overrides) is None


def test_no_attack_says_nothing() -> None:
    assert note(algorithm__name="median") is None


def test_poisson_uncaps_the_median_too() -> None:
    """20 clients, 7 expected a round, 9 attackers: every one may be in a Poisson round."""
    run = {**POISSON_RUN, "algorithm__name": "median"}
    assert note(**run) == ("note: median withstands 3 attackers of the 7 clients a round, and this run has 9 of 20 clients attacking, "
                           "at most 7 in a round of 7; median cannot withstand 7")
    assert note(federation__sampling="poisson", **run) == (
        "note: median withstands 3 attackers of the 7 clients expected a round, and this run has 9 of 20 clients attacking; "
        "Poisson sampling varies a round's size (7 clients expected), so a round may hold all 9; median cannot withstand 9")


@pytest.mark.parametrize(("attackers", "clients", "beta"), [(3, 10, 0.3), (1, 8, 0.125), (1, 7, 0.143), (3, 9, 0.334), (4, 9, 0.445),
                                                            (499, 1000, 0.499), (4999, 10000, 0.4999), (0, 5, 0.0)])
def test_the_suggested_beta_trims_the_attackers(attackers: int, clients: int, beta: float) -> None:
    """a / n rounded up to three decimals (more where those reach 0.5): it trims them and stays below 0.5."""
    assert beta_trimming(TrimmedMeanOptions(), attackers, clients) == ("beta", beta)
    assert floored_share(beta, clients) >= attackers and trims(TrimmedMeanOptions(beta), clients) >= attackers and beta < 0.5


@pytest.mark.parametrize(("attackers", "clients"), [(5, 10), (5, 9), (1, 2), (1, 1)])
def test_no_beta_below_half_trims_half(attackers: int, clients: int) -> None:
    assert beta_trimming(TrimmedMeanOptions(), attackers, clients) is None


@pytest.mark.parametrize(("clients", "withstood"), [(1, 0), (2, 0), (3, 1), (4, 1), (9, 4), (10, 4), (11, 5)])
def test_fewer_than_half(clients: int, withstood: int) -> None:
    assert fewer_than_half(MedianOptions(), clients) == withstood


@pytest.mark.parametrize(("aggregator", "said"), [
    (Median(), "note: median withstands 2 attackers of the 6 clients a round, and this run has 3 of 6 clients attacking; median cannot withstand 3"),
    (TrimmedMean(TrimmedMeanOptions(beta=0.0)),
     "note: trimmed_mean withstands no attacker of the 6 clients a round, and this run has 3 of 6 clients attacking; trimmed_mean cannot withstand 3"),
    (GeoMed(), "note: geomed withstands 2 attackers of the 6 clients a round, and this run has 3 of 6 clients attacking; geomed cannot withstand 3"),
], ids=["median", "trimmed", "geomed"])
def test_an_instance_from_python_gets_the_note(aggregator: Any, said: str) -> None:
    """Read through the spec that builds the instance, its options named ``aggregator.options``."""
    run_config = make_config({"federation": {"num_clients": 6, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"},
                              "attack": {"kind": "sign_flip", "clients": [0, 1, 2]}, "algorithm": {"name": CUSTOM}})
    assert fewer_attackers_note(run_config, AroundAggregator(aggregator)) == said


def test_an_instance_from_python_gets_the_suggested_option() -> None:
    run_config = make_config({"federation": {"num_clients": 6, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"},
                              "attack": {"kind": "sign_flip", "clients": [0, 1]}, "algorithm": {"name": CUSTOM}})
    assert fewer_attackers_note(run_config, TrimmedMean(TrimmedMeanOptions(beta=0.1))) == (
        "note: trimmed_mean withstands no attacker of the 6 clients a round, and this run has 2 of 6 clients attacking; "
        "set aggregator.options.beta = 0.334")
