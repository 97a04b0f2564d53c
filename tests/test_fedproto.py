"""FedProto (Tan et al., AAAI 2022): class means, their aggregation, the distance term, inference, end to end."""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.prototypes.maths import PrototypeLoss, aggregate_means, class_means, nearest_prototype, prototype_distance
from chillfl.settings.prototypes import parse_prototypes

from kd_helpers import BASE, MIXED, check_every_executor, records


def test_class_means_and_counts_by_hand():
    # class 0: rows [1,2] and [3,4] -> mean [2,3], count 2; class 1: none -> zeros, 0; class 2: [5,6], 1
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    means, counts = class_means(values, torch.tensor([0, 0, 2]), 3)
    assert torch.equal(means, torch.tensor([[2.0, 3.0], [0.0, 0.0], [5.0, 6.0]]))
    assert counts.tolist() == [2, 0, 1]


def test_prototype_aggregation_count_weighted_and_uniform_by_hand():
    # client A: class 0 mean [2,3] from 2 samples, no class 1; client B: class 0 [5,0] from 1, class 1 [1,1] from 3.
    # count:   class 0 = (2*[2,3] + 1*[5,0]) / 3 = [9/3, 6/3] = [3, 2];  class 1 = [1, 1];  class 2: nobody -> masked
    # uniform: class 0 = ([2,3] + [5,0]) / 2 = [3.5, 1.5]  (FedProto's official proto_aggregation)
    a = torch.tensor([[2.0, 3.0], [0.0, 0.0], [0.0, 0.0]])
    b = torch.tensor([[5.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    na, nb = torch.tensor([2, 0, 0]), torch.tensor([1, 3, 0])
    protos, mask = aggregate_means([a, b], [na, nb], "count")
    assert torch.allclose(protos, torch.tensor([[3.0, 2.0], [1.0, 1.0], [0.0, 0.0]]))
    assert mask.tolist() == [True, True, False]
    uniform, _ = aggregate_means([a, b], [na, nb], "uniform")
    assert torch.allclose(uniform[0], torch.tensor([3.5, 1.5])) and torch.allclose(uniform[1], torch.tensor([1.0, 1.0]))


def test_distance_term_by_hand():
    # sample 0 (class 0): f - p = [1,0] - [0,0] -> 1; sample 1 (class 1) has no prototype -> 0
    # MSELoss over n*d = 4 elements: (1 + 0) / 4 = 0.25
    features = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    protos = torch.tensor([[0.0, 0.0], [9.0, 9.0]])
    assert prototype_distance(features, torch.tensor([0, 1]), protos, torch.tensor([True, False])).item() == pytest.approx(0.25)
    # both known: (1 + (81 + 49)) / 4 = 131 / 4
    assert prototype_distance(features, torch.tensor([0, 1]), protos, torch.tensor([True, True])).item() == pytest.approx(131 / 4)


def test_fedproto_loss_is_ce_plus_lambda_distance_and_its_gradient_reaches_the_features():
    # logits [0,0] -> CE = ln 2 for either label; distance as above (0.25) with lambda = 2 -> ln 2 + 0.5
    loss = PrototypeLoss(distance_weight=2.0)
    features = torch.tensor([[1.0, 0.0], [0.0, 2.0]], requires_grad=True)
    ctx = {"protos": torch.tensor([[0.0, 0.0], [9.0, 9.0]]), "proto_mask": torch.tensor([True, False])}
    value = loss(torch.zeros(2, 2), torch.tensor([0, 1]), 1.0, features=features, params={}, context=ctx)
    assert value.item() == pytest.approx(math.log(2) + 0.5)
    value.backward()
    # d/df of 2 * sum(diff^2)/4 = diff: [1, 0] for sample 0, 0 for the masked sample 1
    assert torch.allclose(features.grad, torch.tensor([[1.0, 0.0], [0.0, 0.0]]))


def test_nearest_prototype_skips_unknown_classes():
    protos = torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.1, 0.1]])
    feats = torch.tensor([[0.09, 0.09], [0.9, 0.8]])
    assert nearest_prototype(feats, protos, torch.tensor([True, True, True])).tolist() == [2, 1]
    assert nearest_prototype(feats, protos, torch.tensor([True, True, False])).tolist() == [0, 1]


def test_defaults_as_the_official_code_and_refusals():
    o = parse_prototypes({"method": "fedproto"})
    assert (o.options.lam, o.options.weighting, o.share_model) == (1.0, "count", False)
    assert vars(o.options).keys() == {"lam", "weighting"}  # FedHKD's options are FedHKD's: refused below
    for bad, field in [({"share_model": True}, "prototypes.share_model"), ({"kd_weight": 0.1}, "prototypes.kd_weight"), ({"lam": -1.0}, "prototypes.lam")]:
        with pytest.raises(ConfigError) as err:
            parse_prototypes({"method": "fedproto", **bad})
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        parse_prototypes({"method": "fedprotox"})
    assert err.value.field == "prototypes.method"


def test_fedproto_every_executor_same_model():
    recs = check_every_executor({"model": {"name": "mlp"}, "prototypes": {"method": "fedproto"}})
    last = recs[-1]
    assert last["known_classes"] == 10 and last["global_acc"] is not None and last["local_proto_acc"] is not None
    assert last["bytes_up"] > 0
    # no model travels: an uplink is 10 classes x (64 floats + class id + count) per client at most
    assert last["bytes_up"] <= 3 * 10 * (64 * 4 + 8)


def test_fedproto_every_executor_heterogeneous_models():
    recs = check_every_executor({"model": MIXED, "prototypes": {"method": "fedproto"}})
    assert recs[-1]["local_acc"] is not None and recs[-1]["global_proto_acc"] is not None


def test_fedproto_learns_and_the_distance_term_matters():
    over = {"model": {"name": "mlp"}, "federation.rounds": 4}
    proto = records({**over, "prototypes": {"method": "fedproto"}})
    plain = records({**over, "prototypes": {"method": "fedproto", "lam": 0.0}})
    assert proto[-1]["train_loss"] != plain[-1]["train_loss"]  # lambda changes training
    assert proto[-1]["local_acc"] > 0.3  # 10 classes: well above chance after 4 rounds


def test_mismatched_representation_widths_are_refused_in_one_line():
    cfg = load_config(None, {"dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2})
    cfg = cfg.with_overrides({"prototypes": {"method": "fedproto"}, "model": {"name": "mlp", "assign": ["mlp", "flexchill_cnn", "mlp", "mlp"]}})
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg)
    assert err.value.field == "model.assign" and "mlp: 64, flexchill_cnn: 256" in err.value.message


@pytest.mark.parametrize("method", [{"method": "fedproto"}, {"method": "fedhkd"}])
def test_checkpoint_round_trip_continues_exactly(method):
    """state_dict -> the checkpoint codec -> load_state_dict into a fresh protocol: the remaining rounds are identical."""
    from chillfl.storage.checkpoint import decode_state, encode_state
    from chillfl.executors.sequential import SequentialExecutor
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol

    cfg = load_config(None, {"seed": 5, "dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 3,
                             "client.epochs": 1, "client.batch_size": 32, "client.lr": 0.05, "eval.client_split_size": 20}).with_overrides({"model": {"name": "mlp"}, "prototypes": method})

    def loop(protocol, start, rounds):
        ex = SequentialExecutor(exp.model, exp.spec, protocol.client)
        return list(run_rounds(protocol, ex, seed=5, num_clients=4, clients_per_round=2, rounds=rounds, start=start))

    exp = build_experiment(cfg)
    whole = loop(build_protocol(exp), 0, 3)
    first = build_protocol(exp)
    loop(first, 0, 2)
    second = build_protocol(exp)
    second.load_state_dict(decode_state(encode_state(first.state_dict())))
    assert loop(second, 2, 3) == whole[2:]


def test_prototypes_table_is_parsed_once_per_config(monkeypatch):
    """[prototypes] is parsed when the config is validated, and only then: building and running read ``config.prototype_settings``.

    The config is resolved first, as the CLI and the Python API make it. A run resolves what it gets, and a
    complete config comes back as the same object, so building and running parse nothing.
    """
    from chillfl.resolve import resolved
    from chillfl.runner import run_experiment
    from chillfl.settings import prototypes as settings

    made: list[str] = []
    real = settings.PrototypeSettings

    def counted(*args):
        made.append(args[0])
        return real(*args)

    monkeypatch.setattr(settings, "PrototypeSettings", counted)  # parse_prototypes builds every settings object through this name
    cfg = resolved(load_config(None, {**BASE, "prototypes.method": "fedproto", "federation.rounds": 1}))
    made.clear()
    assert resolved(cfg) is cfg
    made.clear()
    assert isinstance(cfg.prototype_settings, real)
    assert len(run_experiment(cfg, write=False, progress=False).records) == 1
    assert made == [], f"[prototypes] parsed again while building and running: {made}"
