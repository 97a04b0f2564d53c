"""A method whose returning clients train entries from their own kept values while its server averages those entries
all the same (FedBN's batch norm under ``global_bn = "average"``, FedPer's, FedRep's head, LG-FedAvg's body under
``"average"``) is refused with a model attack on ``attack.kind``: the attack forged each attacker's entries from the
sent values, not the ones it trained from (an attacker whose kept BN weight 3 trained to 3.5, sent 1 by the server,
uploaded 2 * 1 - 3.5 = -1.5 under ``sign_flip``: 4.5 from its start, where its honest step was 0.5). A ``[privacy]``
clip of those entries stays read from the sent values: the release is the average the method defines, and its
sensitivity is the clip norm."""

from __future__ import annotations

import pytest
import torch

import chillfl

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.fedbn import FedBN
from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.privacy.aggregate import PrivateAggregation
from test_plugfix3_starts import ATTACK, BASE, plugin  # noqa: F401  (plugin: the fixture writing the plugin module)

SIGN_FLIP = 'attack={kind="sign_flip", clients=[0]}'


@pytest.mark.parametrize(("args", "entry"), [(["algorithm.name=fedbn", "model.batch_norm=true"], "features.1.weight"),
                                             (["algorithm.name=fedper"], "fc2.weight")])
def test_a_model_attack_on_averaged_kept_entries_is_one_line_on_attack_kind(args: list[str], entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *args, SIGN_FLIP, "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    name = args[0].split("=")[1]
    assert line.startswith(f"chillfl: error: attack.kind: 'sign_flip' forges each attacker's upload from its update w - start, and algorithm '{name}' "
                           f"averages entries its returning clients train from their own kept values, not the sent ones (entry '{entry}')")


@pytest.mark.parametrize("args", [["algorithm.name=fedbn", "model.batch_norm=true", 'algorithm.global_bn="keep"', SIGN_FLIP],
                                  ["algorithm.name=fedper", 'algorithm.global_head="keep"', SIGN_FLIP],
                                  ["algorithm.name=fedbn", "model.batch_norm=true", 'attack={kind="label_flip", clients=[0]}']])
def test_kept_entries_left_out_of_the_average_or_a_data_attack_run(args: list[str]) -> None:
    assert main(["run", *args, "--dry-run"]) == 0


@pytest.mark.usefixtures("plugin")
def test_a_plugin_half_keeping_an_averaged_head_is_refused_with_a_model_attack() -> None:
    """A plugin's ``KeepsEntries`` half (its head, +1 in ``prepare``) under FedAvg, which averages every entry: the
    attacker trained its head from its own; before, the start check let the kept head through and it was forged from
    the sent one."""
    err = pytest.raises(ConfigError, chillfl.run, config={**BASE, **ATTACK, "algorithm": {"name": "plugfix3_pick:KeepsHead"}}, write=False, progress=False)
    assert err.value.field == "attack.kind" and "(entry 'head.weight')" in err.value.message and "\n" not in err.value.message


def result(cid: int, lin: float, bn: float) -> ClientResult:
    return ClientResult(cid, {"lin": torch.tensor([lin]), "bn": torch.tensor([bn])}, 1, 1, 0.1, 1.0, 0.0)


def private(clip: float) -> PrivateAggregation:
    agg = PrivateAggregation(FedBN({"bn"}), client_noise=False, clip_norm=clip, noise_multiplier=0.0, expected=2, seed=0)
    for cid in (0, 1):
        agg.downlink(cid, 0, G)
    return agg


G = {"lin": torch.tensor([0.0]), "bn": torch.tensor([1.0])}


def test_dp_fedavg_clips_averaged_kept_entries_from_the_sent_values_by_hand() -> None:
    # client 0 kept bn 1.7 and trained it to 1.8 (the server never saw 1.7); lin 0 -> 0.6. Its update from the sent model:
    # (0.6, 0.8), norm 1, clipped to 0.5: (0.3, 0.4). Client 1 sends the model as it was: update 0.
    # No noise, qW = 2: lin = 0 + 0.3 / 2 = 0.15, bn = 1 + 0.4 / 2 = 1.2
    out = private(0.5).aggregate(G, [result(0, 0.6, 1.8), result(1, 0.0, 1.0)], 0)
    torch.testing.assert_close(out["lin"], torch.tensor([0.15]))
    torch.testing.assert_close(out["bn"], torch.tensor([1.2]))
    # unclipped, the release is FedBN's own average of the uploaded entries, (1.8 + 1.0) / 2 = 1.4: read from the client's
    # kept 1.7 instead, it would be the round's mean kept value plus the clipped steps, the kept values never clipped
    plain = FedBN({"bn"}).aggregate(G, [result(0, 0.6, 1.8), result(1, 0.0, 1.0)], 0)
    unclipped = private(100.0).aggregate(G, [result(0, 0.6, 1.8), result(1, 0.0, 1.0)], 0)
    torch.testing.assert_close(plain["bn"], torch.tensor([1.4]))
    torch.testing.assert_close(unclipped["bn"], plain["bn"])
    torch.testing.assert_close(unclipped["lin"], plain["lin"])
