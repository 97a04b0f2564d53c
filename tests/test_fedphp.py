"""FedPHP: the mu schedule, the inheritance, the MMD and KD transfers on hand-worked values, the client update through
the real client (:class:`ParameterClient`), a run replayed client by client, executors, resume and option errors.

The client-update case uses x -> head(a x) (a one-weight body ``0.weight`` = a and a bias-free two-class head
``1.weight``), label 0, at T = 1, so each gradient is a line of arithmetic: d CE / dz = softmax(z) - onehot(y), and
d KD / dz = softmax(z) - softmax(z_hpm / tau).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import personal_model
from chillfl.aggregation.fedphp import (
    COUNT,
    HPM,
    LAMBDA,
    PREFIX,
    FedPHP,
    FedPHPOptions,
    TransferTerm,
    expected_participations,
    inherit,
    inheritance,
    mmd,
)
from chillfl.aggregation.registry import algorithm_spec, make_aggregator
from chillfl.training.objective import distillation_kl
from chillfl.cli import main
from chillfl.engine.protocol import ClientJob
from chillfl.errors import ConfigError
from chillfl.executors.sequential import SequentialExecutor
from chillfl.experiment import build_experiment
from chillfl.protocols.common import mean_or_none
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, evaluate
from chillfl.training.terms import StepView
from methods_e2e import assert_executors_agree, records, resumed_records
from test_local_ft import cfg_of, rounds_with_states
from test_personalised import run_client


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


# ---------------------------------------------------------------- the inheritance and its schedule


def test_mu_grows_linearly_with_participations_up_to_mu() -> None:
    # mu_k = min(mu c_k / H, mu): 0 at a first participation (c_k = 0), half-way at c_k = H / 2, capped at mu
    assert inheritance(0, 0.9, 10) == 0.0
    assert inheritance(5, 0.9, 10) == pytest.approx(0.45)
    assert inheritance(10, 0.9, 10) == pytest.approx(0.9)
    assert inheritance(25, 0.9, 10) == 0.9


def test_horizon_is_a_clients_expected_participations() -> None:
    # floor(clients_per_round * rounds / num_clients), at least 1: the authors' CIFAR runs (100 clients, 10 a round,
    # 1000 rounds) -> 100; the tiny run here (4 clients, 3 a round, 3 rounds) -> floor(9/4) = 2; 1 of 10 for 5 rounds -> 1
    assert expected_participations(100, 10, 1000) == 100
    assert expected_participations(4, 3, 3) == 2
    assert expected_participations(10, 1, 5) == 1


def test_inherit_is_the_moving_average_of_float_entries() -> None:
    # mu_k = 0.25: w = 0.25 * h + 0.75 * w -> [0.25 * 4 + 0.75 * 0, 0.25 * 0 + 0.75 * 2] = [1, 1.5];
    # an integer counter (num_batches_tracked) is the trained model's
    out = inherit({"w": t(4.0, 0.0), "n": torch.tensor(3)}, {"w": t(0.0, 2.0), "n": torch.tensor(5)}, 0.25)
    torch.testing.assert_close(out["w"], t(1.0, 1.5))
    assert out["n"].dtype == torch.int64 and int(out["n"]) == 5


# ---------------------------------------------------------------- the transfers


def test_mmd_of_two_points_by_hand() -> None:
    # u = (0, 1): d_01 = 1; sigma = (1 + 1) / (2^2 - 2) = 1; bandwidths sigma / 4 * (1, 2, 4, 8, 16) = (1/4, 1/2, 1, 2, 4)
    # k(0) = 5; k(1) = e^-4 + e^-2 + e^-1 + e^-1/2 + e^-1/4 = 0.0183156 + 0.1353353 + 0.3678794 + 0.6065307 + 0.7788008 = 1.9068618
    # MMD = k_ww + k_hh - 2 k_wh = 10 - 3.8137236 = 6.1862764
    assert float(mmd(t(0.0).view(1, 1), t(1.0).view(1, 1))) == pytest.approx(6.1862764, abs=1e-6)


def test_mmd_of_two_batches_by_hand() -> None:
    # w's (0, 2), h's (0, 0): squared distances 4 between 2 and each 0, else 0: sum 2 * 3 * 4 = 24, sigma = 24 / (16 - 4) = 2
    # bandwidths (0.5, 1, 2, 4, 8): k(0) = 5, k(4) = e^-8 + e^-4 + e^-2 + e^-1 + e^-1/2 = 1.1283959
    # K_ww = [[5, k4], [k4, 5]] (mean (10 + 2 k4) / 4), K_hh = 5, K_wh = K_hw = [[5, 5], [k4, k4]] (the same mean)
    # MMD = 5 - (10 + 2 k4) / 4 = 2.5 - k4 / 2 = 1.9358021; swapping the samples changes nothing
    a, b = t(0.0, 2.0).view(2, 1), t(0.0, 0.0).view(2, 1)
    assert float(mmd(a, b)) == pytest.approx(1.9358021, abs=1e-6)
    assert float(mmd(b, a)) == pytest.approx(1.9358021, abs=1e-6)
    assert float(mmd(a, a)) == 0.0


def test_kd_by_hand() -> None:
    # teacher (4 ln 3, 0) / 4 -> softmax (3/4, 1/4); student (0, 0) -> log softmax (ln 1/2, ln 1/2): KD = ln 2
    # student (ln 3, 0) -> log softmax (ln 3/4, ln 1/4): KD = -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.5623351, the teacher's entropy
    teacher = t(4 * math.log(3), 0.0).view(1, 2)
    assert float(distillation_kl(t(0.0, 0.0).view(1, 2), teacher, 4.0, cross_entropy=True)) == pytest.approx(math.log(2), abs=1e-6)
    assert float(distillation_kl(t(math.log(3), 0.0).view(1, 2), teacher, 4.0, cross_entropy=True)) == pytest.approx(0.5623351, abs=1e-6)


def body_head(a: float, head: tuple[float, float]) -> nn.Module:
    """x -> head (a x): body ``0.weight`` = a, bias-free head ``1.weight`` = head (two classes)."""
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 2, bias=False))
    with torch.no_grad():
        model[0].weight.fill_(a)
        model[1].weight.copy_(t(*head).view(2, 1))
    return model


def state(a: float, head: tuple[float, float]) -> dict[str, torch.Tensor]:
    return {"0.weight": t(a).view(1, 1), "1.weight": t(*head).view(2, 1)}


def test_the_term_is_lambda_times_mmd_to_the_hpms_features_minus_the_base_loss() -> None:
    # x = (1, 2); the HPM's body is 0, so its features are (0, 0); the step's features (0, 2) (as the batch's forward had them)
    # MMD = 1.9358021 (above); base loss 0.5, lambda 0.5: 0.5 * (1.9358021 - 0.5) = 0.7179011
    model = body_head(1.0, (0.0, 0.0))
    x = t(1.0, 2.0).view(2, 1)
    step = StepView(model, x, torch.zeros(2, dtype=torch.long), t(0.0, 2.0).view(2, 1), torch.zeros(2, 2), torch.tensor(0.5), {})
    value = TransferTerm("mmd")({}, {LAMBDA: 0.5, HPM: state(0.0, (1.0, 1.0))}, step)
    assert float(value) == pytest.approx(0.7179011, abs=1e-6)


# ---------------------------------------------------------------- the client update


def test_client_trains_with_kd_from_its_hpm_then_inherits() -> None:
    # w^t: a = 2, head (0, 0); x = 1, y = 0: z = (0, 0), softmax (1/2, 1/2)
    # the HPM: a = 1, head (4 ln 3, 0): z_hpm = (4 ln 3, 0), softmax(z_hpm / 4) = (3/4, 1/4)
    # dz = (1 - lambda)(softmax - onehot) + lambda (softmax - p) = 0.75 (-1/2, 1/2) + 0.25 (-1/4, 1/4) = (-0.4375, 0.4375)
    # head grad = dz * a = (-0.875, 0.875) -> head (0.0875, -0.0875) at lr 0.1; body grad = dz . head = 0 -> a = 2 (uploaded)
    # c_k = 1, H = 2, mu 0.9: mu_k = 0.45; h = 0.45 h + 0.55 w:
    #   a = 0.45 + 1.1 = 1.55; head = (0.45 * 4 ln 3 + 0.55 * 0.0875, 0.55 * -0.0875) = (2.0256270, -0.048125); c_k = 2
    model = body_head(0.0, (0.0, 0.0))
    half = FedPHP(2, FedPHPOptions(lam=0.25, transfer="kd")).client_half()
    spec = LocalSpec(epochs=1, batch_size=8)
    own = {**{PREFIX + k: v for k, v in state(1.0, (4 * math.log(3), 0.0)).items()}, COUNT: torch.tensor(1)}
    reply = run_client(half, model, spec, state(2.0, (0.0, 0.0)), lr=0.1, state=own)
    up = reply.uplink.params
    torch.testing.assert_close(up["0.weight"].flatten(), t(2.0))
    torch.testing.assert_close(up["1.weight"].flatten(), t(0.0875, -0.0875))
    assert reply.state is not None
    torch.testing.assert_close(reply.state[PREFIX + "0.weight"].flatten(), t(1.55))
    torch.testing.assert_close(reply.state[PREFIX + "1.weight"].flatten(), t(0.45 * 4 * math.log(3) + 0.55 * 0.0875, -0.048125))
    assert int(reply.state[COUNT]) == 2
    assert personal_model(half, reply.state, up) == {k[len(PREFIX):]: v for k, v in reply.state.items() if k.startswith(PREFIX)}


def test_first_participation_is_taught_by_the_sent_model_and_keeps_the_trained_one() -> None:
    # no HPM yet: it is w^t = (a = 2, head (0, 0)), whose softened logits are (1/2, 1/2) = the student's: KD's gradient is 0
    # dz = 0.75 (-1/2, 1/2) -> head (0.075, -0.075); mu_k = 0 -> h = w
    model = body_head(0.0, (0.0, 0.0))
    reply = run_client(FedPHP(2, FedPHPOptions(lam=0.25, transfer="kd")).client_half(), model, LocalSpec(epochs=1, batch_size=8),
                       state(2.0, (0.0, 0.0)), lr=0.1)
    assert reply.state is not None
    torch.testing.assert_close(reply.uplink.params["1.weight"].flatten(), t(0.075, -0.075))
    assert all(torch.equal(reply.state[PREFIX + k], v) for k, v in reply.uplink.params.items())
    assert int(reply.state[COUNT]) == 1


# ---------------------------------------------------------------- runs


BASE: dict[str, Any] = {"algorithm": {"name": "fedphp", "lam": 0.3}}


def test_a_run_replayed_client_by_client() -> None:
    """Each client's h_k after the run: its trainings replayed on the sequential path from the rounds' global models, with
    the transfer from its h_k, and the inheritance at mu_k = min(0.9 c_k / 2, 0.9) (H = floor(3 * 3 / 4) = 2); local
    accuracy is the h_k's; the global model is the uploads' FedAvg."""
    cfg = cfg_of(BASE["algorithm"])
    exp, protocol, out, starts = rounds_with_states(cfg)
    spec = replace(exp.spec, terms=(*exp.spec.terms, TransferTerm("mmd")))
    hpms: dict[int, dict[str, torch.Tensor]] = {}
    counts: dict[int, int] = {}
    twice = 0
    for rnd, record in enumerate(out):
        accs = []
        for cid in record["clients"]:
            rows = protocol.evaluation.client_data(cid)
            h = hpms.get(cid, starts[rnd])
            job = ClientJob(cid, starts[rnd], rows.x, rows.y, cfg.lr_at(rnd), 1.0, {LAMBDA: 0.3, HPM: h}, derive_seed(cfg.seed, "train", cid, rnd), spec)
            w = SequentialExecutor(exp.model, spec).run([job])[0].params
            hpms[cid] = inherit(h, w, inheritance(counts.get(cid, 0), 0.9, 2))
            counts[cid] = counts.get(cid, 0) + 1
            twice += counts[cid] == 3  # a client whose mu_k reached 0.9
            assert rows.x_eval is not None and rows.y_eval is not None
            accs.append(evaluate(exp.model, hpms[cid], rows.x_eval, rows.y_eval, cfg.eval.batch_size)[0])
        assert record["local_acc"] == mean_or_none(accs)
    assert twice
    for cid, h in hpms.items():
        kept = protocol.store.load(cid)
        assert kept is not None and int(kept[COUNT]) == counts[cid]
        assert all(torch.equal(kept[PREFIX + k], v) for k, v in h.items()), cid


def test_lambda_zero_trains_fedavgs_global_model() -> None:
    """(1 - 0) CE + 0 R: the uploads, hence the global model and the training losses, are FedAvg's; local accuracy is not."""
    fedphp = records(cfg_of({"name": "fedphp", "lam": 0.0}))
    fedavg = records(cfg_of({"name": "fedavg"}))
    assert [r["train_loss"] for r in fedphp] == [r["train_loss"] for r in fedavg]
    assert [r["local_acc"] for r in fedphp] != [r["local_acc"] for r in fedavg]


@pytest.mark.slow  # the process pool's start: seconds
@pytest.mark.parametrize("transfer", ["mmd", "kd"])
def test_under_every_executor(transfer: str) -> None:
    """sequential == processes bitwise, vectorized within the repo's rounding tolerance."""
    seq = assert_executors_agree(cfg_of({**BASE["algorithm"], "transfer": transfer}, **{"federation.rounds": 2}))
    assert all(r["local_acc"] is not None for r in seq)


def test_resume_is_bitwise(tmp_path: Path) -> None:
    cfg = cfg_of({**BASE["algorithm"], "transfer": "kd"})
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


# ---------------------------------------------------------------- options and declarations


@pytest.mark.parametrize("option, value", [("lam", "1.5"), ("mu", "-0.1"), ("transfer", '"l2"'), ("kd_temperature", "0.0"), ("horizon", "0")])
def test_bad_options_exit_2_with_one_line_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n[algorithm]\nname = "fedphp"\n{option} = {value}\n')
    assert main(["run", str(config), "-q", "dataset.name=digits", "federation.num_clients=4", "model.name=mlp"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: algorithm.{option}:")
    assert not (tmp_path / "out").exists()


def test_horizon_is_the_runs_or_the_options() -> None:
    model = body_head(1.0, (0.0, 0.0))
    built, _ = make_aggregator("fedphp", {}, num_clients=4, model=model, seed=0)  # no run: H = 1, mu from the second participation
    assert isinstance(built, FedPHP) and built.horizon == 1
    built, _ = make_aggregator("fedphp", {"horizon": 7}, num_clients=4, model=model, seed=0)
    assert isinstance(built, FedPHP) and built.horizon == 7
    built, _ = make_aggregator("fedphp", {}, num_clients=4, model=model, seed=0, rounds=3, clients_per_round=3)
    assert isinstance(built, FedPHP) and built.horizon == 2


def test_declarations() -> None:
    caps = algorithm_spec("fedphp").capabilities
    assert caps.personal_model and caps.takes_weights and caps.not_a_base and caps.private_steps
    assert FedPHPOptions() == FedPHPOptions(lam=0.1, mu=0.9, transfer="mmd", kd_temperature=4.0, horizon=None)  # the authors' defaults
    with pytest.raises(ConfigError) as err:  # a model without a classifier head has no representation to transfer
        make_aggregator("fedphp", {"horizon": 1}, num_clients=4, model=nn.Sequential(nn.Flatten()), seed=0)
    assert err.value.field == "model.name"


def test_pa3fed_refuses_it() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg_of({"name": "pa3fed", "base": "fedphp"}))
    assert err.value.field == "algorithm.base" and "FedPHP's clients run their own local trainings" in err.value.message
