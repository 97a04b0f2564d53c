"""The rows a soft-label or prototype method uploads are checked for NaN/inf with one reduction and one host sync a
round (``protocols/common.rows_all_finite``), not one a client; a bad upload still stops the run naming the round, the
first bad client and its row or class, as ``check_finite_rows`` did."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import pytest
import torch

from chillfl.config import load_config
from chillfl.errors import Diverged
from chillfl.protocols import common, prototypes
from chillfl.protocols.prototypes import PrototypeSharing
from chillfl.protocols.softlabels import server as softlabels
from chillfl.protocols.softlabels.server import SoftLabelProtocol
from chillfl.prototypes.spec import ClassRows
from chillfl.runner import run_experiment

from test_loss_explosion import TINY

SOFT = {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32}}
FOUR = {**TINY, "federation.clients_per_round": 4, "federation.rounds": 2}
"""Every client each round: four uploads a round, two rounds."""


class Syncs(torch.Tensor):
    """A CPU tensor that counts its host syncs (``bool()``, ``.item()``): what a GPU round waits on. Ops on it give it back."""

    seen: list[str] = []

    def __bool__(self) -> bool:
        Syncs.seen.append("bool")
        return bool(self.as_subclass(torch.Tensor))

    def item(self) -> Any:
        Syncs.seen.append("item")
        return self.as_subclass(torch.Tensor).item()


def _syncs(values: torch.Tensor) -> torch.Tensor:
    return values.as_subclass(Syncs)


def test_one_sync_for_every_clients_rows() -> None:
    Syncs.seen = []
    blocks = [_syncs(torch.full((5, 3), float(c))) for c in range(20)]
    assert common.rows_all_finite(blocks) and Syncs.seen == ["bool"]  # one for the 20 clients (check_finite_rows: one each)
    Syncs.seen = []
    assert not common.rows_all_finite([*blocks[:3], _syncs(torch.tensor([[1.0, math.nan]]))]) and Syncs.seen == ["bool"]
    assert common.rows_all_finite([]) and common.rows_all_finite([torch.zeros(0, 3), torch.ones(2, dtype=torch.long)])


def test_a_huge_finite_row_is_a_false_alarm_the_exact_look_clears() -> None:
    huge = torch.tensor([[3e38, 3e38], [0.0, 1.0]])  # finite; its float32 sum overflows
    assert not common.rows_all_finite([huge])
    common.check_finite_rows(0, 3, huge)  # passes: not refused


def test_held_rows_mask_the_classes_a_client_does_not_hold() -> None:
    means = torch.tensor([[1.0, 2.0], [math.nan, 0.0], [3.0, 4.0]])  # class 1 not held: its row is not read
    counts = torch.tensor([4, 0, 2])
    assert prototypes.held_rows_finite([ClassRows(means, counts), ClassRows(torch.ones(3, 2), torch.ones(3, dtype=torch.long))])
    assert not prototypes.held_rows_finite([ClassRows(means, torch.tensor([4, 1, 2]))])  # now it is held
    extra = {"soft": torch.tensor([[0.5, 0.5], [0.5, 0.5], [math.inf, 0.0]])}
    assert not prototypes.held_rows_finite([ClassRows(means, counts, extra)])  # a method's own rows too
    assert not prototypes.held_rows_finite([ClassRows(torch.ones(2, 2), counts)])  # not maskable: the exact look decides


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> tuple[list[int], list[int]]:
    """(calls of the round's one check ``name``, calls of the per-client check) in ``module``, counted."""
    batched: list[int] = []
    exact: list[int] = []
    whole, original = vars(module)[name], module.check_finite_rows

    def once(*args: Any) -> bool:
        batched.append(1)
        return bool(whole(*args))

    def each(*args: Any) -> None:
        exact.append(1)
        original(*args)

    monkeypatch.setattr(module, name, once)
    monkeypatch.setattr(module, "check_finite_rows", each)
    return batched, exact


@pytest.mark.parametrize("module, name, overrides", [(softlabels, "rows_all_finite", SOFT),
                                                    (prototypes, "held_rows_finite", {"prototypes": {"method": "fedproto"}})])
def test_a_clean_round_checks_every_client_at_once(module: Any, name: str, overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    batched, exact = _counted(monkeypatch, module, name)
    run_experiment(load_config(None, FOUR).with_overrides(overrides), write=False, progress=False)
    assert (len(batched), len(exact)) == (2, 0)  # one a round, none a client (was: four a round, one a client)


def _poison(protocol: Any, poisons: dict[int, Callable[[Any], None]]) -> Callable[..., Any]:
    """``protocol.server_update`` with the uploads of the clients in ``poisons`` rewritten by theirs, where they arrive."""
    original = protocol.server_update

    def update(self: Any, round: int, tasks: Sequence[Any], replies: Sequence[Any]) -> Any:
        for task, reply in zip(tasks, replies):
            if task.client_id in poisons:
                poisons[task.client_id](reply.uplink)
        return original(self, round, tasks, replies)
    return update


def _nan_row(row: int) -> Callable[[Any], None]:
    def poison(uplink: Any) -> None:
        uplink.soft.soft_labels[row, 0] = math.nan
    return poison


def test_nonfinite_soft_labels_name_the_first_bad_client_and_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The message the per-client check gave (this test passes on it too): the round, the first bad client, its row."""
    monkeypatch.setattr(SoftLabelProtocol, "server_update", _poison(SoftLabelProtocol, {3: _nan_row(5), 1: _nan_row(2)}))
    with pytest.raises(Diverged) as err:
        run_experiment(load_config(None, FOUR).with_overrides(SOFT), write=False, progress=False)
    assert (err.value.round, err.value.client) == (1, 1)  # the first bad client in reply order, as before
    assert str(err.value).startswith("round 1, client 1: its uploaded soft-labels are not finite (row 2 of 20; an [attack]'s")


def test_nonfinite_prototypes_name_the_first_bad_client_and_class(monkeypatch: pytest.MonkeyPatch) -> None:
    classes: list[int] = []

    def nan_class(uplink: Any) -> None:
        classes.append(int(torch.nonzero(uplink.rows.counts > 0).flatten()[0]))  # its first held class
        uplink.rows.means[classes[-1], 1] = math.inf

    monkeypatch.setattr(PrototypeSharing, "server_update", _poison(PrototypeSharing, {3: nan_class, 2: nan_class}))
    with pytest.raises(Diverged) as err:
        run_experiment(load_config(None, FOUR).with_overrides({"prototypes": {"method": "fedproto"}}), write=False, progress=False)
    assert (err.value.round, err.value.client) == (1, 2)
    assert f"its uploaded class prototypes are not finite (class {classes[0]}; an [attack]'s" in str(err.value)
