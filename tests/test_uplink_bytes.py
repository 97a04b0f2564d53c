"""The parameter protocol prices what the server reads of each upload (``aggregated_keys``), and sends a returning client only what changed.

A method that aggregates only part of the model (FedPer's base with ``global_head = "keep"``, FedBN's
non-BN entries under ``keep``, FedBABU's body) leaves the other entries with the client: the server never
reads them, so a real client does not send them and they cost no uplink bytes. The numbers below are
worked by hand for :class:`Tiny`'s entries (float32: 4 bytes each; BN's ``num_batches_tracked``: one int64):

* ``body``  Linear(4, 3): weight 4 x 3 + bias 3           = 15 floats = 60 bytes
* ``bn``    BatchNorm1d(3): weight, bias, running mean, var = 12 floats = 48 bytes, + 8 (num_batches_tracked) = 56
* ``head``  Linear(3, 2): weight 3 x 2 + bias 2           =  8 floats = 32 bytes

The whole model is 60 + 56 + 32 = 148 bytes. The downlink sends it whole to a client's first round (it starts from
every entry of it); from its second round on, a client holds the entries the server never computes from the
uploads (they have not changed since it received them), so it is sent the read entries only: the same as the
uplink's model bytes. Every client takes part in every round here, so round 1 sends 148 bytes a client and
round 2 the read entries.
"""

from __future__ import annotations

from typing import Any, Sequence

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.base import ClientResult, Downlink, FedAvg, Params

WHOLE = 60 + 56 + 32
BODY = 60 + 56  # FedPer's / FedBABU's uplink: all but the head
NO_BN = 60 + 32  # FedBN keep's uplink: all but the BN entries
CLIENTS = 3
ROUNDS = 2


class Tiny(nn.Module):
    """Linear -> BatchNorm -> ReLU -> Linear: a body, BN entries and a head, small enough to count by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.head = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.body(x))))


@pytest.fixture(scope="module")
def data() -> chillfl.TensorData:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(150, 4, generator=gen)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return chillfl.TensorData(x[:120], y[:120], x[120:], y[120:], num_classes=2, name="uplink-bytes")


def traffic(algorithm: dict[str, Any] | None, data: chillfl.TensorData, aggregator: Any = None) -> list[tuple[int, int, int]]:
    """(bytes_up, bytes_down, bytes_cumulative) of every round of a tiny run of ``algorithm`` (or a plugin ``aggregator``)."""
    config = {
        "seed": 1, "device": "cpu", "threads": 1, "executor": "sequential",
        "federation": {"num_clients": CLIENTS, "clients_per_round": CLIENTS, "rounds": ROUNDS},
        "client": {"lr": 0.05, "batch_size": 16, "epochs": 1}, "eval": {"client_split_size": 5},
        **({"algorithm": algorithm} if algorithm is not None else {}),
    }
    torch.manual_seed(0)
    out = chillfl.run(model=Tiny(), data=data, config=config, write=False, progress=False, aggregator=aggregator)
    return [(r["bytes_up"], r["bytes_down"], r["bytes_cumulative"]) for r in out.records]


def expected(up: int, later: int | None = None, extra: int = 0) -> list[tuple[int, int, int]]:
    """Every client of every round sends ``up`` bytes; it is sent the whole model in round 1 and ``later`` bytes
    of it after (unset: ``up``, the read entries), plus ``extra`` bytes of context each round; the cumulative sum."""
    downs = [WHOLE + extra] + [(up if later is None else later) + extra] * (ROUNDS - 1)
    out, total = [], 0
    for down in downs:
        total += CLIENTS * (up + down)
        out.append((CLIENTS * up, CLIENTS * down, total))
    return out


@pytest.mark.parametrize(
    ("algorithm", "up"),
    [
        ({"name": "fedavg"}, WHOLE),
        ({"name": "fedper", "global_head": "keep"}, BODY),
        ({"name": "fedrep", "global_head": "keep", "head_epochs": 1}, BODY),
        ({"name": "lg_fedavg", "global_body": "keep"}, 32),  # the head only: the representation (body and BN) stays
        ({"name": "fedbn", "global_bn": "keep"}, NO_BN),
        ({"name": "fedbabu", "finetune_epochs": 0}, BODY),
        # PA3Fed's report (score, grad_norm, alpha): three Python floats, 8 bytes each, beside the body
        ({"name": "pa3fed", "base": "fedper", "base_options": {"global_head": "keep"}}, BODY + 3 * 8),
        ({"name": "local_only"}, 0),  # the server reads nothing: after its first round a client is sent nothing either
    ],
    ids=["fedavg-whole", "fedper-keep-body", "fedrep-keep-body", "lg_fedavg-keep-head", "fedbn-keep-no-bn", "fedbabu-no-head", "pa3fed-over-fedper-keep", "local_only-nothing"],
)
def test_both_directions_price_the_entries_the_server_reads(algorithm: dict[str, Any], up: int, data: chillfl.TensorData) -> None:
    down = BODY if algorithm["name"] == "pa3fed" else None  # the report goes up only
    assert traffic(algorithm, data) == expected(up, down)


@pytest.mark.parametrize(("algorithm", "later"), [({"name": "fedper"}, BODY), ({"name": "fedbn"}, NO_BN),
                                                  ({"name": "fedrep", "head_epochs": 1}, BODY), ({"name": "lg_fedavg"}, 32)],
                         ids=["fedper-average", "fedbn-average", "fedrep-average", "lg_fedavg-average"])
def test_personal_entries_the_server_averages_are_uploaded_but_not_sent_back(algorithm: dict[str, Any], later: int, data: chillfl.TensorData) -> None:
    """Under ``average`` (the default) the server reads the clients' heads / BN entries into the global model: they are
    uploaded (the whole model). A returning client puts its own in place of the global ones (``KeepsEntries``), so
    from its second round it is sent the rest only: FedPer's and FedRep's body (116 bytes), FedBN's non-BN entries (92),
    LG-FedAvg's head (32)."""
    assert traffic(algorithm, data) == expected(WHOLE, later)


def test_a_report_is_still_priced_beside_the_read_entries(data: chillfl.TensorData) -> None:
    """SCAFFOLD reads every entry and sends its control variates both ways: c down, Delta c_i up, one float per parameter.

    Tiny's parameters (BN's running statistics and count are buffers, without a control variate):
    15 + 6 + 8 = 29 floats = 116 bytes each way, beside the whole model.
    """
    control = (15 + 6 + 8) * 4
    assert traffic({"name": "scaffold"}, data) == expected(WHOLE + control, WHOLE, extra=control)


class BodyOnly(FedAvg):
    """A plugin's rule, no relative of FedBN: it averages ``body.*`` and keeps every other entry, and says so."""

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        return tuple(k for k in global_params if k.startswith("body."))

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        out = super().aggregate(global_params, results, round, weights)
        return {k: out[k] if k.startswith("body.") else global_params[k] for k in global_params}


def test_the_uplink_asks_the_aggregator_not_the_method(data: chillfl.TensorData) -> None:
    """Whatever declares :class:`~chillfl.aggregation.base.AggregatesPart` is priced by it: the body only, 60 bytes."""
    assert traffic(None, data, aggregator=BodyOnly()) == expected(60)


class BodyOnlyZeroingTheHead(BodyOnly):
    """Averages ``body.*`` as :class:`BodyOnly`, but sets the head to zeros in round 1 without reading an upload."""

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        out = super().aggregate(global_params, results, round, weights)
        return {k: torch.zeros_like(v) if k.startswith("head.") else v for k, v in out.items()}


def test_an_unread_entry_the_server_changed_is_sent_again(data: chillfl.TensorData) -> None:
    """The head is outside ``aggregated_keys`` but the rule moved it: round 2 sends it (60 + 32 = 92), the BN entries not."""
    assert traffic(None, data, aggregator=BodyOnlyZeroingTheHead()) == expected(60, later=60 + 32)


class BodyOnlyWithOwnBias(BodyOnly):
    """:class:`BodyOnly` that starts every client from a head bias of its own (``Downlink.params``)."""

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(params={"head.bias": torch.full_like(global_params["head.bias"], float(client_id))})


def test_a_start_entry_sent_to_one_client_is_priced(data: chillfl.TensorData) -> None:
    """An entry the aggregator sends a client on its own (``Downlink.params``) is priced though unread: 60 + 8 = 68."""
    assert traffic(None, data, aggregator=BodyOnlyWithOwnBias()) == expected(60, later=60 + 8)


def test_a_client_is_sent_its_kept_entries_until_its_first_reply(data: chillfl.TensorData) -> None:
    """FedPer, 2 of 3 clients a round: a client's downlink is whole until it has finished a round, the body after."""
    config = {
        "seed": 3, "device": "cpu", "threads": 1, "executor": "sequential", "algorithm": {"name": "fedper"},
        "federation": {"num_clients": CLIENTS, "clients_per_round": 2, "rounds": 4},
        "client": {"lr": 0.05, "batch_size": 16, "epochs": 1}, "eval": {"client_split_size": 5},
    }
    torch.manual_seed(0)
    out = chillfl.run(model=Tiny(), data=data, config=config, write=False, progress=False)
    finished: set[int] = set()
    for r in out.records:
        sampled = r["clients"]
        assert r["bytes_down"] == sum(BODY if c in finished else WHOLE for c in sampled)
        assert r["bytes_up"] == WHOLE * len(sampled)
        finished |= set(sampled)
    assert len(finished) == CLIENTS and any(r["bytes_down"] == WHOLE + BODY for r in out.records)  # a newcomer beside a returning client
