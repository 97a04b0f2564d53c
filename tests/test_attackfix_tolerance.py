"""The note on stderr when a robust rule withstands fewer attackers than ``[attack]`` has, under Poisson sampling: a round's
size varies, so no round size caps its attackers."""

from __future__ import annotations

from typing import Any

from chillfl.config import load_config
from chillfl.experiment import fewer_attackers_note

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
