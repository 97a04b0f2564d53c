"""Every protocol fills a round record's core fields through one builder (``ServerBook.round_record``), the same way.

Before, the three protocols built them by hand and had drifted: soft-label records (DS-FL, SCARLET, ...) had no
``client_train_loss``, so ``python -m chillfl.metrics.stability`` printed a row of ``-`` for them without a word, and a
round whose clients had no samples recorded NaN, 0.0 or the unweighted mean as ``train_loss``, by protocol.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import chillfl
from chillfl.experiment import build_experiment, build_protocol
from chillfl.protocols.book import ServerBook
from methods_e2e import config

KINDS: dict[str, dict[str, Any]] = {
    "parameters": {},
    "prototypes": {"prototypes.method": "fedproto"},
    "soft labels": {"distillation.method": "dsfl", "distillation.public_size": 40, "distillation.subset_size": 20,
                    "distillation.server_epochs": 1, "distillation.distill_batch_size": 32},
}
CORE = frozenset({"round", "clients", "lr", "train_loss", "temperature_mean", "client_train_loss", "bytes_up", "bytes_down", "bytes_cumulative",
                  "local_acc", "local_loss", "local_clients"})
"""The keys every protocol's trained round records (``eval.clients = "sampled"``)."""


def tiny(kind: str, **over: Any) -> Any:
    return config(**{"model.name": "mlp", "federation.rounds": 2, **KINDS[kind], **over})


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_protocol_kind_records_the_same_core_keys_and_per_client_losses(kind: str) -> None:
    """Each kind's rounds hold every key of :data:`CORE`: the same set for all three (soft labels had no ``client_train_loss``)."""
    cfg = tiny(kind)
    sizes = build_experiment(cfg).data.train_sizes()
    records = chillfl.run(config=cfg, write=False, progress=False).records
    assert len(records) == 2
    assert [CORE - set(r) for r in records] == [set(), set()]
    for r in records:
        losses = r["client_train_loss"]
        assert sorted(losses, key=int) == [str(c) for c in r["clients"]]
        weights = [int(sizes[c]) for c in r["clients"]]
        assert r["train_loss"] == math.fsum(w * losses[str(c)] for c, w in zip(r["clients"], weights)) / math.fsum(weights)


def test_every_protocol_builds_its_record_through_the_book(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    original = ServerBook.round_record

    def watched(self: ServerBook, round: int, *args: Any, **kwargs: Any) -> Any:
        built.append(round)
        return original(self, round, *args, **kwargs)

    monkeypatch.setattr(ServerBook, "round_record", watched)
    for kind in KINDS:
        built.clear()
        chillfl.run(config=tiny(kind), write=False, progress=False)
        assert built == [0, 1], kind


def test_one_empty_round_rule_no_number_made_up() -> None:
    from chillfl.protocols.book import ClientLoss  # here: the old tree had no builder, and the module's other tests show how it failed

    book = build_protocol(build_experiment(tiny("parameters"))).book
    assert isinstance(book, ServerBook)
    # clients reported, none had a sample: no train_loss (it was NaN, 0.0 or the unweighted mean, 2.0, by protocol)
    record = book.round_record(0, [0, 1], 0.1, [ClientLoss(0, 1.0, 0, 1.0), ClientLoss(1, 3.0, 0, 2.0)])
    assert record.train_loss is None and "train_loss" not in record.to_json()
    assert record.client_train_loss == {"0": 1.0, "1": 3.0} and record.temperature_mean == 1.5
    # nobody reported (an aggregator's released round): no loss, no temperature, no per-client table, no client measured
    empty = book.round_record(0, [], 0.1, []).to_json()
    assert not {"train_loss", "temperature_mean", "client_train_loss", "local_acc"} & set(empty)
    assert empty["clients"] == [] and empty["bytes_up"] == 0
    # samples: the weighted mean, (1 * 1.0 + 3 * 3.0) / 4
    assert book.round_record(0, [0, 1], 0.1, [ClientLoss(0, 1.0, 1, 1.0), ClientLoss(1, 3.0, 3, 2.0)]).train_loss == 2.5
