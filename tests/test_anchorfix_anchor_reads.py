"""An ``[objective]`` anchor is priced for the entries its terms read, once, and for nothing else.

pFedSim sends a returning client its personalised model with its own head (held): under ``proximal_mu`` the head was
priced both as the start value the client already holds and as the server's value the anchor reads
(:func:`~chillfl.protocols.parameters.anchor_unsent`). The proximal term reads the trainable parameters only, so the
BN buffers FedBN keeps on the client stay held under it; NTD's teacher forward reads every entry, so they are priced."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.config import ObjectiveConfig
from chillfl.protocols.parameters import ParamDownlink, ParameterSharing, anchor_unsent
from chillfl.training.terms import registered_terms
from test_commfix_traffic import CLIENTS, MODEL, ROUNDS, Tiny, data, without_bytes  # noqa: F401

__all__ = ["data"]

HEAD = 3 * 2 * 4 + 2 * 4
"""Bytes of :class:`Tiny`'s head ``fc`` (float32)."""
BN_PARAMS, BN_BUFFERS = 2 * 3 * 4, 2 * 3 * 4 + 8
"""Bytes of :class:`TinyBN`'s BN weight and bias; of its running mean and variance and its int64 batch count."""
MU, NTD = {"proximal_mu": 0.1}, {"terms": ["ntd"]}


class TinyBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.fc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.body(x))))

    def head_name(self) -> str:
        return "fc"


def _run(name: str, data: chillfl.TensorData, objective: dict[str, Any] | None, model: Callable[[], nn.Module] = Tiny,
         per_round: int = CLIENTS, **options: Any) -> list[dict[str, Any]]:
    config: dict[str, Any] = {
        "seed": 1, "device": "cpu", "threads": 1, "executor": "sequential",
        "federation": {"num_clients": CLIENTS, "clients_per_round": per_round, "rounds": ROUNDS},
        "client": {"lr": 0.05, "batch_size": 16, "epochs": 1}, "eval": {"client_split_size": 5, "clients": "all"},
        "algorithm": {"name": name, **options},
    }
    if objective:
        config["objective"] = objective
    torch.manual_seed(0)
    return chillfl.run(model=model(), data=data, config=config, write=False, progress=False).records


def _downlinks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, ParamDownlink]]:
    """(round, client, downlink) of every task the run configures, in order."""
    seen: list[tuple[int, int, ParamDownlink]] = []
    configure: Callable[..., Any] = ParameterSharing.configure

    def recording(self: ParameterSharing, round: int, sampled: Any) -> Any:
        tasks = configure(self, round, sampled)
        seen.extend((t.round, t.client_id, t.downlink) for t in tasks)
        return tasks

    monkeypatch.setattr(ParameterSharing, "configure", recording)
    return seen


def test_a_returning_pfedsim_client_pays_for_its_own_head_once(data: chillfl.TensorData, monkeypatch: pytest.MonkeyPatch) -> None:
    """Personalised: the body it is sent, the server's model its proximal term reads, mu and pFedSim's flag."""
    downlinks = _downlinks(monkeypatch)
    _run("pfedsim", data, MU, warmup=0)
    personalised = [d for r, _, d in downlinks if r > 0]
    assert len(personalised) == CLIENTS * (ROUNDS - 1)
    for d in personalised:
        assert set(d.held) >= {"fc.weight", "fc.bias"}
        assert d.nbytes() == {"params": MODEL - HEAD, "control": MODEL + 8 + 8}


def test_the_proximal_anchor_leaves_the_buffers_a_client_keeps_held(data: chillfl.TensorData) -> None:
    """FedBN: from round 2 a client is sent the body and head (the BN entries it keeps held). Under ``proximal_mu`` also
    the BN weight and bias (the term reads the server's) and mu; under ``ntd`` every BN entry and the term's numbers."""
    plain, mu, ntd = (_run("fedbn", data, objective, TinyBN) for objective in (None, MU, NTD))
    later = [[r["bytes_down"] for r in records[1:]] for records in (plain, mu, ntd)]
    assert later[0] == [CLIENTS * MODEL] * (ROUNDS - 1)
    assert later[1] == [CLIENTS * (MODEL + BN_PARAMS + 8)] * (ROUNDS - 1)
    assert later[2] == [CLIENTS * (MODEL + BN_PARAMS + BN_BUFFERS + 16)] * (ROUNDS - 1)


def _poison_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Move by 7 what a downlink does not price: the held entries of the start, and of the anchor those it neither
    prices (:func:`anchor_unsent`) nor reads: a client that reads none of them runs the same."""
    configure: Callable[..., Any] = ParameterSharing.configure

    def poisoning(self: ParameterSharing, round: int, sampled: Any) -> Any:
        out = []
        for t in configure(self, round, sampled):
            d = t.downlink
            priced = anchor_unsent(self.state, d.start, self.anchor_reads)
            free = {k for k in d.held if k not in priced}
            start = {k: v + 7 if k in d.held else v for k, v in d.start.items()}
            context = {k: ({n: v + 7 if n in free else v for n, v in val.items()} if k in self.anchors else val)
                       for k, val in d.context.items()}
            out.append(replace(t, downlink=replace(d, start=start, context=context)))
        return out

    monkeypatch.setattr(ParameterSharing, "configure", poisoning)


@pytest.mark.parametrize(("name", "model", "objective", "options"), [
    ("pfedsim", Tiny, MU, {"warmup": 0}), ("pfedsim", Tiny, NTD, {"warmup": 0}), ("fedbn", TinyBN, MU, {}),
    ("fedbn", TinyBN, NTD, {}), ("fedper", Tiny, MU, {}),
])
def test_what_a_downlink_holds_is_not_read(name: str, model: Callable[[], nn.Module], objective: dict[str, Any],
                                           options: dict[str, Any], data: chillfl.TensorData, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = without_bytes(_run(name, data, objective, model, per_round=2, **options))
    _poison_unread(monkeypatch)
    assert without_bytes(_run(name, data, objective, model, per_round=2, **options)) == plain


def test_terms_declare_whether_they_read_the_anchors_buffers() -> None:
    from chillfl.training.terms import anchor_reads_buffers

    terms = registered_terms()
    assert not terms["proximal"].anchor_buffers and terms["ntd"].anchor_buffers
    reads = [anchor_reads_buffers(ObjectiveConfig(**table)) for table in (MU, NTD, {**MU, **NTD}, {})]
    assert reads == [False, True, True, False]


def test_anchor_unsent_prices_only_what_the_anchor_reads() -> None:
    state = {"w": torch.ones(2), "running_mean": torch.zeros(3)}
    sent = {"w": torch.full((2,), 2.0), "running_mean": torch.ones(3)}
    assert anchor_unsent(state, sent).keys() == {"w", "running_mean"}
    assert anchor_unsent(state, sent, frozenset({"w"})).keys() == {"w"}
