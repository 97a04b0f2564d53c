"""The before-run refusal of a forging attack on a method that averages entries its returning clients train from their
own kept values: FedCAC's kept batch-norm buffers are declared (before, a model attack stopped it in round 2 with round
1 on disk); a method reporting its clients' starts (``ChoosesStart``) is refused all the same, as a reported start is the
sent model the half then puts its kept values into; and the refusal names the option that lifts it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.base import ClientResult, Params
from chillfl.aggregation.fedbn import FedBN
from chillfl.aggregation.fedcac import FedCAC
from chillfl.capabilities import Capabilities
from chillfl.cli import main
from chillfl.errors import ConfigError
from test_plugfix3_starts import ATTACK, BASE

SIGN_FLIP = 'attack={kind="sign_flip", clients=[0]}'
HEAD = frozenset({"head.weight", "head.bias"})
REFUSED = "averages entries its returning clients train from their own kept values"


def test_fedcac_with_batch_norm_and_a_model_attack_is_refused_before_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "algorithm.name=fedcac", "model.batch_norm=true", SIGN_FLIP, "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("chillfl: error: attack.kind: 'sign_flip' forges") and REFUSED in line and "(entry 'features.1.running_mean')" in line
    # FedCAC has no option that leaves them out: the line offers what it can do (rev117c 4)
    assert "use a data-poisoning kind, or a model without those entries (no batch norm, where they are its statistics) or a method that leaves them out of its average" in line


def test_fedcac_without_buffers_or_with_a_data_attack_runs() -> None:
    assert main(["run", "algorithm.name=fedcac", SIGN_FLIP, "--dry-run"]) == 0
    assert main(["run", "algorithm.name=fedcac", "model.batch_norm=true", 'attack={kind="label_flip", clients=[0]}', "--dry-run"]) == 0


def test_fedcac_keeps_the_buffers_it_learns_from_the_model() -> None:
    """Linear (0.weight, 0.bias) then BatchNorm1d: its affine weight and bias are parameters (critical or not), its
    three buffers are the client's own; an instance passed from Python learns them from the run's model too."""
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    agg = FedCAC(2, [n for n, _ in model.named_parameters()])
    assert agg.client_half().kept_entries() == frozenset()  # type: ignore[attr-defined]
    agg.learn_parameters(model)
    assert agg.client_half().kept_entries() == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}  # type: ignore[attr-defined]
    # the half's start: the sent parameters, the client's own buffers (as before: only now declared)
    own = {"fedcac.theta.1.running_mean": torch.tensor([5.0, 5.0]), "fedcac.theta.0.bias": torch.tensor([9.0, 9.0])}
    sent = {"0.bias": torch.tensor([1.0, 1.0]), "1.running_mean": torch.tensor([0.0, 0.0])}
    start, _ = agg.client_half().prepare(own, sent, {})
    torch.testing.assert_close(start["0.bias"], torch.tensor([1.0, 1.0]))
    torch.testing.assert_close(start["1.running_mean"], torch.tensor([5.0, 5.0]))


class ClusteredKeep(FedBN):
    """A plugin's FedBN that reports its clients' starts (``ChoosesStart``): the sent model, its head then replaced by
    the client's kept one."""

    capabilities = Capabilities(personal_model=True, takes_weights=True)

    def client_start(self, result: ClientResult, global_params: Params) -> Params | None:
        return None


def test_a_reported_start_does_not_lift_the_kept_entries_refusal() -> None:
    config: dict[str, Any] = {**BASE, **ATTACK}
    err = pytest.raises(ConfigError, chillfl.run, config=config, aggregator=ClusteredKeep(HEAD), write=False, progress=False)
    assert err.value.field == "attack.kind" and REFUSED in err.value.message and "(entry 'head." in err.value.message
    assert 'global_bn = "keep"' in err.value.message


@pytest.mark.parametrize(("args", "option"), [(["algorithm.name=fedbn", "model.batch_norm=true"], "algorithm.global_bn"),
                                              (["algorithm.name=fedper"], "algorithm.global_head"),
                                              (["algorithm.name=fedrep"], "algorithm.global_head"),
                                              (["algorithm.name=lg_fedavg"], "algorithm.global_body"),
                                              (["algorithm.name=pa3fed", "algorithm.base=fedbn", "model.batch_norm=true"], "algorithm.base_options.global_bn")])
def test_the_refusal_names_the_option_that_keeps_the_entries_out_of_the_average(args: list[str], option: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *args, SIGN_FLIP, "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert REFUSED in line and f'use a data-poisoning kind, or set {option} = "keep" (those entries left out of the average, kept by the clients alone)' in line
    assert main(["run", *args, f'{option}="keep"', SIGN_FLIP, "--dry-run"]) == 0  # and that option lifts it


def test_a_half_naming_no_option_names_none() -> None:
    from chillfl.aggregation.base import keep_option

    assert keep_option(FedCAC(2, ["w"]).client_half()) is None
    assert keep_option(FedBN({"bn"}).client_half()) == ("global_bn", "keep")
