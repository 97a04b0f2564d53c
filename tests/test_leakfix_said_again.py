"""A call's privacy warnings are said again by the next call (docs/python-api.md, "Many calls in one process"): the
Poisson-sampling ``privacy.delta`` warning and the INFO line with the sigma ``target_epsilon`` picked were said from
cached functions, so a notebook's second identical ``chillfl.run`` was silent about them."""

from __future__ import annotations

from typing import Any

import pytest

import chillfl

pytest.importorskip("opacus")

TINY: dict[str, Any] = {
    "seed": 3, "device": "cpu", "threads": 1, "dataset.name": "digits", "model.name": "mlp", "model.hidden": [8],
    "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.min_clients": 2,
    "federation.sampling": "poisson", "federation.rounds": 1, "client.epochs": 1, "client.batch_size": 64, "client.lr": 0.05,
    "eval.client_split_size": 20, "privacy.mechanism": "dp-fedavg", "privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.5,
    "privacy.delta": 1e-3,
}


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *sections, option = key.split(".")
        table = out
        for section in sections:
            table = table.setdefault(section, {})
        table[option] = value
    return out


def said(caplog: pytest.LogCaptureFixture, text: str, **over: Any) -> list[str]:
    """The lines holding ``text`` that one ``chillfl.run`` said at INFO and above."""
    caplog.clear()
    with caplog.at_level("INFO", logger="chillfl"):
        chillfl.run(config=nested({**TINY, **over}), write=False, progress=False)
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_the_poisson_delta_warning_is_said_by_each_call(caplog: pytest.LogCaptureFixture) -> None:
    first = said(caplog, "privacy.delta: with Poisson sampling")
    again = said(caplog, "privacy.delta: with Poisson sampling")
    assert len(first) == 1 and again == first  # once a call (the check runs at each of a build's plans), each call


def test_the_sigma_target_epsilon_picked_is_said_by_each_call(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.privacy import build

    monkeypatch.setattr(build, "noise_for", lambda *args, **kwargs: 2.5)  # the accountant's answer (its search is slow)
    over = {"privacy.target_epsilon": 8.0, "privacy.noise_multiplier": 0.0, "federation.sampling": "fixed"}
    first = said(caplog, "noise_multiplier (sigma) =", **over)
    again = said(caplog, "noise_multiplier (sigma) =", **over)
    assert len(first) == 1 and again == first
