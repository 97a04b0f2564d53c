"""FedALA: the blend, the weight step and the stop rule on hand-worked values, ALA through the real client update, and a run.

The client-update case uses x -> b (a x) (two one-weight layers: ``0.weight`` = a is the lower layer, ``1.weight`` = b
the higher one) and the loss f = 1/2 (z - 1)^2 (``half_mse``), so each gradient is a line of arithmetic.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import Local, Train
from chillfl.aggregation.fedala import (
    FedALA,
    FedALAOptions,
    blend,
    client_order,
    converged,
    higher_keys,
    sample_batches,
    weight_step,
)
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, evaluate
from methods_e2e import assert_executors_agree, cli_option_error, config
from test_personalised import half_mse, run_client


def two_layers() -> nn.Module:
    return nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False))


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


def test_blend_takes_global_lower_layers_and_weights_the_higher_ones() -> None:
    # local (a, b) = (1, [1, 2]), global (5, [3, 6]), W = [0.5, 1]:
    # a = 5 (global); b = [1 + (3 - 1) 0.5, 2 + (6 - 2) 1] = [2, 6]; the buffer stays the local model's
    local = {"a": t(1.0), "b": t(1.0, 2.0), "buf": t(7.0)}
    glob = {"a": t(5.0), "b": t(3.0, 6.0), "buf": t(9.0)}
    out = blend(local, glob, {"b": t(0.5, 1.0)}, ["b"], frozenset({"a", "b"}))
    torch.testing.assert_close(out["a"], t(5.0))
    torch.testing.assert_close(out["b"], t(2.0, 6.0))
    torch.testing.assert_close(out["buf"], t(7.0))


def test_weight_step_is_clipped_gradient_times_the_difference() -> None:
    # eta grad = before - after = [0.1, -0.2]; theta - theta_i = [3 - 1, 6 - 2] = [2, 4]
    # W = [1 - 0.1 * 2, 1 + 0.2 * 4] = [0.8, 1.8] -> clipped to [0.8, 1]
    out = weight_step({"b": t(1.0, 1.0)}, {"b": t(3.0, 6.0)}, {"b": t(2.9, 6.2)}, {"b": t(1.0, 2.0)}, {"b": t(3.0, 6.0)})
    torch.testing.assert_close(out["b"], t(0.8, 1.0))


def test_stop_rule_needs_more_than_num_pre_loss_losses_of_small_spread() -> None:
    assert not converged([1.0] * 10, 10, 0.1)  # 10 losses: not more than num_pre_loss
    assert converged([5.0] + [1.0] * 10, 10, 0.1)  # the last 10 have std 0
    # last 3 of [0, 0, 0.3, 0.6]: [0, 0.3, 0.6], mean 0.3, population std sqrt((0.09 + 0 + 0.09) / 3) = 0.2449 >= 0.1
    assert not converged([0.0, 0.0, 0.3, 0.6], 3, 0.1)


def test_weight_step_clips_below_at_zero() -> None:
    # eta grad = 0.2, theta - theta_i = 1: W = 0.1 - 0.2 * 1 = -0.1 -> clipped to 0 (the blend never extrapolates past theta_i)
    out = weight_step({"b": t(0.1)}, {"b": t(3.0)}, {"b": t(2.8)}, {"b": t(1.0)}, {"b": t(2.0)})
    torch.testing.assert_close(out["b"], t(0.0))


def test_stop_rule_is_the_population_std_strictly_below_the_threshold() -> None:
    # last 2 of [9, 0, 0.2]: mean 0.1, population std sqrt((0.01 + 0.01) / 2) = 0.1 < 0.12 (the sample std, 0.1414, is not)
    assert converged([9.0, 0.0, 0.2], 2, 0.12)
    # equal losses have std 0, which is not < a threshold of 0: strictly below
    assert not converged([1.0, 1.0, 1.0], 2, 0.0)


def test_sample_size_rounds_down_and_drop_last_keeps_a_full_last_batch() -> None:
    # 50 % of 7 samples = 3.5 -> 3 rows (the reference's int()), one batch of 10
    assert [len(b) for b in sample_batches(7, 50, 10, torch.Generator().manual_seed(0))] == [3]
    # 60 % of 10 = 6 rows in batches of 3: the last one is full, so drop_last keeps it
    assert [len(b) for b in sample_batches(10, 60, 3, torch.Generator().manual_seed(0), drop_last=True)] == [3, 3]


def test_sample_batches_is_a_contiguous_slice_in_order() -> None:
    # 80 % of 10 samples = 8 rows from some start lo in [0, 2], in batches of 3: 3 + 3 + 2
    batches = sample_batches(10, 80, 3, torch.Generator().manual_seed(0))
    rows = torch.cat(batches)
    assert [len(b) for b in batches] == [3, 3, 2]
    assert torch.equal(rows, torch.arange(int(rows[0]), int(rows[0]) + 8)) and 0 <= int(rows[0]) <= 2


def test_drop_last_leaves_out_the_short_last_batch_unless_it_is_the_only_one() -> None:
    # the same draw as without it (8 rows from lo in [0, 2]), the short 2-row tail left out: 3 + 3 (the reference's loader)
    kept = sample_batches(10, 80, 3, torch.Generator().manual_seed(0))
    dropped = sample_batches(10, 80, 3, torch.Generator().manual_seed(0), drop_last=True)
    assert [len(b) for b in dropped] == [3, 3] and all(torch.equal(a, b) for a, b in zip(dropped, kept))
    # 20 % of 10 = 2 rows < one batch of 3: kept (the reference would have no batch and fail)
    assert [len(b) for b in sample_batches(10, 20, 3, torch.Generator().manual_seed(0), drop_last=True)] == [2]


@pytest.mark.parametrize(("drop_last", "w"), [(False, 0.632), (True, 0.8)])
def test_drop_last_reaches_the_weight_learning(drop_last: bool, w: float) -> None:
    # theta_i = (a, b) = (1, 1), global (2, 3), W = 1, eta 0.01, the samples x = 1, 1, 1 in batches of 2 (in the client's
    # shuffled order: the same rows whatever it is): [1, 1] and [1]
    # batch [1, 1] at theta_hat = (2, 3): z = 6, dz = 5, grad b = 5 * a x = 10 -> W = 1 - 0.01 * 10 * (3 - 1) = 0.8, b = 2.6
    # batch [1] at (2, 2.6): z = 5.2, dz = 4.2, grad b = 4.2 * 2 * 1 = 8.4 -> W = 0.8 - 0.01 * 8.4 * 2 = 0.632
    # drop_last leaves the short batch [1] out: W = 0.8
    model = two_layers()
    options = FedALAOptions(layer_idx=1, eta=0.01, rand_percent=100, max_init_epochs=1, drop_last=drop_last)
    state = {"fedala.model.0.weight": t(1.0).view(1, 1), "fedala.model.1.weight": t(1.0).view(1, 1)}
    reply = run_client(FedALA(model, options).client_half(), model, LocalSpec(epochs=1, batch_size=2, base_loss=half_mse),
                       {"0.weight": t(2.0).view(1, 1), "1.weight": t(3.0).view(1, 1)}, lr=0.1, state=state, x=t(1.0, 1.0, 1.0).view(3, 1))
    assert reply.state is not None
    torch.testing.assert_close(reply.state["fedala.weight.1.weight"].flatten(), t(w))


def test_the_slices_are_cut_from_the_clients_rows_in_a_fixed_shuffled_order() -> None:
    # 10 rows sorted by label (a data set read class folder by class folder): 0..4 of label 0, 5..9 of label 1. A contiguous
    # 50 % slice of the rows themselves would be 5 consecutive ones, from lo in [0, 5]: all one label at lo = 0 or 5. Cut from
    # the client's fixed permutation, the slice is 5 consecutive rows of that permutation: the same permutation every
    # round (the round's draw moves only the slice), another for another client or run seed.
    order = client_order(10, 3, 0)
    assert sorted(order.tolist()) == list(range(10)) and torch.equal(order, client_order(10, 3, 0))
    assert not torch.equal(order, client_order(10, 3, 1)) and not torch.equal(order, client_order(10, 4, 0))
    for round_seed in range(6):
        plain = torch.cat(sample_batches(10, 50, 2, torch.Generator().manual_seed(round_seed)))
        cut = torch.cat(sample_batches(10, 50, 2, torch.Generator().manual_seed(round_seed), order=order))
        lo = int(plain[0])  # the same draw of lo
        assert torch.equal(plain, torch.arange(lo, lo + 5)) and torch.equal(cut, order[lo : lo + 5])
    # the client's ALA asks for its weight steps on those rows: driven by hand, its first request is the first batch of the cut
    model = two_layers()
    half = FedALA(model, FedALAOptions(layer_idx=1, rand_percent=50, max_init_epochs=1), seed=3).client_half()
    state = {"fedala.model.0.weight": t(1.0).view(1, 1), "fedala.model.1.weight": t(1.0).view(1, 1)}
    y = torch.tensor([0] * 5 + [1] * 5)
    local = Local(0, torch.ones(10, 1), y, {"0.weight": t(2.0).view(1, 1), "1.weight": t(3.0).view(1, 1)}, {}, 0.1, state, 5, LocalSpec(epochs=1, batch_size=2))
    request = next(half.train(local))  # type: ignore[attr-defined]
    generator = torch.Generator().manual_seed(derive_seed(5, "fedala"))
    expected = sample_batches(10, 50, 2, generator, order=client_order(10, 3, 0))[0]
    assert isinstance(request, Train) and request.rows is not None and torch.equal(request.rows, expected)


def test_higher_keys_are_the_last_parameter_tensors() -> None:
    assert higher_keys(two_layers(), 1) == ["1.weight"]
    with pytest.raises(ValueError, match="leaves no lower layer"):
        higher_keys(two_layers(), 2)


def test_first_participation_skips_ala_and_starts_from_the_global_model() -> None:
    # no local model: start at the global (a, b) = (2, 3); z = 6, dz = 5; grad a = 5 b = 15, grad b = 5 a = 10
    # lr 0.1: a = 2 - 1.5 = 0.5, b = 3 - 1 = 2; no W yet
    model = two_layers()
    half = FedALA(model, FedALAOptions(layer_idx=1)).client_half()
    reply = run_client(half, model, LocalSpec(epochs=1, batch_size=8, base_loss=half_mse), {"0.weight": t(2.0).view(1, 1), "1.weight": t(3.0).view(1, 1)}, lr=0.1)
    torch.testing.assert_close(reply.uplink.params["0.weight"].flatten(), t(0.5))
    torch.testing.assert_close(reply.uplink.params["1.weight"].flatten(), t(2.0))
    assert reply.state is not None and set(reply.state) == {"fedala.model.0.weight", "fedala.model.1.weight"}


def test_ala_learns_the_weight_then_trains_from_the_blend() -> None:
    # theta_i = (a, b) = (1, 1), global (2, 3), W starts at 1 (first ALA), eta 0.01, one epoch of one batch (x = 1):
    # theta_hat = (2, 1 + (3 - 1) 1) = (2, 3); z = 6, dz = 5, grad b = dz a = 10
    # W = 1 - 0.01 * 10 * (3 - 1) = 0.8; theta_hat = (2, 1 + 2 * 0.8) = (2, 2.6)
    # the run's step from (2, 2.6), lr 0.1: z = 5.2, dz = 4.2; grad a = 4.2 * 2.6 = 10.92, grad b = 4.2 * 2 = 8.4
    # -> a = 2 - 1.092 = 0.908, b = 2.6 - 0.84 = 1.76 (uploaded and kept)
    model = two_layers()
    half = FedALA(model, FedALAOptions(layer_idx=1, eta=0.01, rand_percent=100, max_init_epochs=1)).client_half()
    state = {"fedala.model.0.weight": t(1.0).view(1, 1), "fedala.model.1.weight": t(1.0).view(1, 1)}
    reply = run_client(half, model, LocalSpec(epochs=1, batch_size=8, base_loss=half_mse), {"0.weight": t(2.0).view(1, 1), "1.weight": t(3.0).view(1, 1)},
                       lr=0.1, state=state, x_eval=torch.ones(1, 1), y_eval=torch.zeros(1, dtype=torch.long))
    assert reply.state is not None
    torch.testing.assert_close(reply.state["fedala.weight.1.weight"].flatten(), t(0.8))
    torch.testing.assert_close(reply.uplink.params["0.weight"].flatten(), t(0.908))
    torch.testing.assert_close(reply.uplink.params["1.weight"].flatten(), t(1.76))
    torch.testing.assert_close(reply.state["fedala.model.1.weight"].flatten(), t(1.76))


def test_ala_steps_ignore_the_runs_weight_decay_and_extra_terms() -> None:
    # the case above with weight_decay 0.5 and a proximal term (mu 1 around 0) in the run's training: ALA's step is the
    # plain loss's (grad b = 10, W = 0.8 as above); with the decay it would be 10 + 0.5 * 3 = 11.5 (W = 0.77), with the
    # term 10 + 1 * 3 = 13 (W = 0.74)
    from chillfl.training.objective import ProximalTerm

    model = two_layers()
    half = FedALA(model, FedALAOptions(layer_idx=1, eta=0.01, rand_percent=100, max_init_epochs=1)).client_half()
    state = {"fedala.model.0.weight": t(1.0).view(1, 1), "fedala.model.1.weight": t(1.0).view(1, 1)}
    spec = LocalSpec(epochs=1, batch_size=8, weight_decay=0.5, base_loss=half_mse, terms=(ProximalTerm(),))
    context = {"mu": 1.0, "global_params": {"0.weight": t(0.0).view(1, 1), "1.weight": t(0.0).view(1, 1)}}
    reply = run_client(half, model, spec, {"0.weight": t(2.0).view(1, 1), "1.weight": t(3.0).view(1, 1)}, lr=0.1, state=state, context=context)
    assert reply.state is not None
    torch.testing.assert_close(reply.state["fedala.weight.1.weight"].flatten(), t(0.8))


@pytest.mark.parametrize(("weights", "w"), [(None, 0.49088), (1.0, 0.8)])
def test_first_ala_runs_until_the_last_batches_losses_settle_later_ones_one_epoch(weights: float | None, w: float) -> None:
    # theta_i = (a, b) = (1, 1), global (2, 3), eta 0.01, two rows in batches of 1: first x = 1, then x = 0 (placed so in
    # the client's fixed order). The x = 0 batch has z = 0, loss 1/2 and no gradient: each epoch's loss (its last
    # batch's) is 1/2, so with num_pre_loss 2 and threshold 1e-6 the first ALA stops after 3 epochs (of max_init_epochs 4).
    # An epoch's x = 1 step at b = 1 + 2 W: z = 2 b, dz = z - 1, grad b = 2 dz, W <- W - 0.01 * 2 dz * 2 = W - 0.04 dz:
    # W = 1: b = 3, dz = 5 -> 0.8; b = 2.6, dz = 4.2 -> 0.632; b = 2.264, dz = 3.528 -> 0.49088 (3 epochs: the first ALA)
    # (its x = 1 losses 12.5, 8.82, 6.22 vary: had they counted, it would run 4 epochs, W = 0.3723392).
    # A later ALA (W kept, here 1) runs one epoch: 0.8.
    model = two_layers()
    options = FedALAOptions(layer_idx=1, eta=0.01, rand_percent=100, num_pre_loss=2, threshold=1e-6, max_init_epochs=4)
    x = torch.zeros(2, 1)
    x[client_order(2, 0, 0)[0]] = 1.0
    state = {"fedala.model.0.weight": t(1.0).view(1, 1), "fedala.model.1.weight": t(1.0).view(1, 1)}
    if weights is not None:
        state["fedala.weight.1.weight"] = t(weights).view(1, 1)
    reply = run_client(FedALA(model, options).client_half(), model, LocalSpec(epochs=1, batch_size=1, base_loss=half_mse),
                       {"0.weight": t(2.0).view(1, 1), "1.weight": t(3.0).view(1, 1)}, lr=0.1, state=state, x=x)
    assert reply.state is not None
    torch.testing.assert_close(reply.state["fedala.weight.1.weight"].flatten(), t(w))


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="algorithm.rand_percent"):
        build_experiment(config(**{"algorithm.name": "fedala", "algorithm.rand_percent": 0}))
    with pytest.raises(ConfigError, match="algorithm.eta"):
        build_experiment(config(**{"algorithm.name": "fedala", "algorithm.eta": -1.0}))


def test_a_layer_idx_too_large_for_the_model_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the digits MLP has 4 parameter tensors: layer_idx = 4 would leave no lower layer (it was a ValueError's traceback)
    assert cli_option_error(tmp_path, capsys, "fedala", "algorithm.layer_idx=4") == (
        2, ["chillfl: error: algorithm.layer_idx: MLP has 4 parameter tensors; layer_idx = 4 leaves no lower layer"], False)


def test_run_agrees_across_executors_and_local_accuracy_is_the_local_models() -> None:
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor
    from chillfl.protocols.common import mean_or_none
    from chillfl.protocols.parameters import ParameterSharing

    cfg = config(**{"algorithm.name": "fedala", "model.name": "mlp"})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    executor = make_executor(exp, protocol)
    try:
        records = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=exp.data.num_clients, clients_per_round=3, rounds=3))
    finally:
        executor.close()
    accs = []
    for cid in records[-1]["clients"]:
        state = protocol.store.load(cid)
        assert state is not None and any(k.startswith("fedala.weight.") for k in state) == (cid in records[0]["clients"] or cid in records[1]["clients"])
        own = {k[len("fedala.model."):]: v for k, v in state.items() if k.startswith("fedala.model.")}
        data = protocol.evaluation.client_data(cid)
        assert data.x_eval is not None and data.y_eval is not None
        accs.append(evaluate(exp.model, own, data.x_eval, data.y_eval, cfg.eval.batch_size)[0])
    assert records[-1]["local_acc"] == mean_or_none(accs)
