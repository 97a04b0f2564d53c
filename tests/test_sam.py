"""Sharpness-aware local steps (FedSAM / FedASAM, :mod:`chillfl.training.sam`): the perturbation and one step by hand,
batch norm's statistics moved once, the config's checks, and a run under every executor."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from chillfl.config import ClientConfig
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.local import LocalSpec, train_client
from chillfl.training.sam import perturbation

from float_paths import assert_records_close
from methods_e2e import config, records


def test_perturbation_by_hand() -> None:
    w = {"a": torch.tensor([3.0, -4.0])}
    g = [torch.tensor([3.0, 4.0])]
    # SAM: ||g|| = 5, e = rho g / ||g|| = 0.5 [3, 4] / 5 = [0.3, 0.4]
    assert torch.allclose(perturbation(w, g, 0.5, False)[0], torch.tensor([0.3, 0.4]))
    # ASAM: T g = |w| g = [9, 16], ||T g|| = sqrt(81 + 256) = sqrt(337); e = rho |w|^2 g / ||T g|| = 0.5 [27, 64] / sqrt(337)
    s = math.sqrt(337)
    assert torch.allclose(perturbation(w, g, 0.5, True)[0], torch.tensor([13.5 / s, 32.0 / s]))
    # the norm runs over every parameter: a second tensor [0, 12] makes ||g|| = 13
    two = perturbation({"a": w["a"], "b": torch.zeros(2)}, [g[0], torch.tensor([0.0, 12.0])], 1.3, False)
    assert torch.allclose(two[0], torch.tensor([0.3, 0.4])) and torch.allclose(two[1], torch.tensor([0.0, 1.2]))
    # a zero gradient moves nothing (the 1e-12 guard), and so does ASAM at w = 0
    assert torch.equal(perturbation(w, [torch.zeros(2)], 0.5, False)[0], torch.zeros(2))
    assert torch.equal(perturbation({"a": torch.zeros(2)}, g, 0.5, True)[0], torch.zeros(2))


def test_asam_eta_by_hand() -> None:
    w = {"a": torch.tensor([3.0, -4.0])}
    g = [torch.tensor([3.0, 4.0])]
    # Kwon et al.'s T = |w| + eta, eta = 1: T = [4, 5], T g = [12, 20], ||T g|| = sqrt(544); e = 0.5 T^2 g / ||T g|| = [24, 50] / sqrt(544)
    s = math.sqrt(544)
    assert torch.allclose(perturbation(w, g, 0.5, True, eta=1.0)[0], torch.tensor([24.0 / s, 50.0 / s]))
    # at w = 0, T = eta I: e = rho eta^2 g / (eta ||g||) = eta times SAM's [0.3, 0.4]: a weight at 0 moves
    assert torch.allclose(perturbation({"a": torch.zeros(2)}, g, 0.5, True, eta=0.5)[0], torch.tensor([0.15, 0.2]))
    # one stacked client gives the same
    stacked = perturbation({"a": w["a"][None]}, [g[0][None]], 0.5, True, stacked=True, eta=1.0)[0]
    assert torch.allclose(stacked[0], torch.tensor([24.0 / s, 50.0 / s]))
    # and SAM ignores eta
    assert torch.allclose(perturbation(w, g, 0.5, False, eta=1.0)[0], torch.tensor([0.3, 0.4]))


def _one_step(rho: float, adaptive: bool = False, eta: float = 0.0) -> torch.Tensor:
    model = nn.Linear(1, 2, bias=False)
    start = {"weight": torch.zeros(2, 1)}
    spec = LocalSpec(epochs=1, batch_size=1, optim=ClientConfig(sam_rho=rho, sam_adaptive=adaptive, sam_eta=eta).optim())
    out = train_client(model, start, torch.ones(1, 1), torch.tensor([0]), spec=spec, lr=1.0, temperature=1.0, context={},
                       generator=torch.Generator().manual_seed(0))
    return out.params["weight"].flatten()


def test_one_step_by_hand() -> None:
    # logits z = [a, b] (x = 1), y = 0, CE at T = 1: dL/da = p0 - 1, dL/db = p1.
    # At a = b = 0: p = [1/2, 1/2], g = [-1/2, 1/2], ||g|| = 1/sqrt(2).
    # Plain SGD, lr 1: w' = [1/2, -1/2].
    assert torch.allclose(_one_step(0.0), torch.tensor([0.5, -0.5]))
    # SAM, rho = 0.1: e = 0.1 g / ||g|| = [-r, r], r = 0.1 / sqrt(2) = 0.0707107.
    # At w + e: p0 = 1 / (1 + e^(2r)) = 1 / (1 + 1.1519087) = 0.4647035, g_SAM = [p0 - 1, 1 - p0]; w' = -g_SAM.
    p0 = 1 / (1 + math.exp(2 * 0.1 / math.sqrt(2)))
    assert p0 == pytest.approx(0.4647035, abs=1e-7)
    assert torch.allclose(_one_step(0.1), torch.tensor([1 - p0, p0 - 1]), atol=1e-7)
    # ASAM at w = 0: T = |w| = 0, no perturbation: the plain step
    assert torch.allclose(_one_step(0.1, adaptive=True), torch.tensor([0.5, -0.5]))
    # ASAM with eta = 1 at w = 0: T = I, SAM's step
    assert torch.allclose(_one_step(0.1, adaptive=True, eta=1.0), torch.tensor([1 - p0, p0 - 1]), atol=1e-7)


def test_batch_norm_statistics_move_once_a_step() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(8, 3), torch.tensor([0, 1] * 4)

    def run(rho: float) -> dict[str, torch.Tensor]:
        spec = LocalSpec(epochs=1, batch_size=8, optim=ClientConfig(sam_rho=rho).optim())
        return train_client(model, start, x, y, spec=spec, lr=0.1, temperature=1.0, context={}, generator=torch.Generator().manual_seed(0)).params

    plain, sam = run(0.0), run(0.5)
    # the running statistics come from the first forward, at w: the same as a plain step's, counted once
    for key in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        assert torch.equal(plain[key], sam[key]), key
    assert int(sam["1.num_batches_tracked"]) == 1
    assert not torch.equal(plain["0.weight"], sam["0.weight"])  # the step itself differs


@pytest.mark.parametrize(
    ("over", "field"),
    [({"sam_rho": -0.1}, "client.sam_rho"), ({"sam_rho": math.inf}, "client.sam_rho"), ({"sam_adaptive": True}, "client.sam_adaptive"),
     ({"sam_rho": 0.1, "sam_eta": 0.01}, "client.sam_eta"), ({"sam_rho": 0.1, "sam_adaptive": True, "sam_eta": -1.0}, "client.sam_eta")],
)
def test_bad_options_name_their_field(over: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(**{f"client.{k}": v for k, v in over.items()})
    assert info.value.field == field


def test_dp_sgd_with_sam_is_refused_on_sam_rho() -> None:
    pytest.importorskip("opacus")
    cfg = config(**{"model": {"name": "mlp", "hidden": [16]}, "client.sam_rho": 0.05, "privacy.mechanism": "dp-sgd", "privacy.noise_multiplier": 1.0})
    with pytest.raises(ConfigError) as info:
        build_experiment(cfg)
    assert info.value.field == "client.sam_rho"


def test_fedsam_end_to_end_under_every_executor() -> None:
    base = config(**{"model": {"name": "mlp", "hidden": [16]}, "federation.rounds": 2})
    cfg = base.with_overrides({"client": {"sam_rho": 0.05}})
    seq = records(cfg)
    assert len(seq) == 2 and all(math.isfinite(r["train_loss"]) for r in seq)
    plain = records(base)
    assert seq[-1]["train_loss"] != plain[-1]["train_loss"]
    # processes run the sequential step: bitwise; the vectorised executor vmaps it over clients: equal up to float rounding
    assert records(cfg.with_overrides({"executor": "processes", "threads": 1})) == seq
    vec = records(cfg.with_overrides({"executor": "vectorized"}))
    assert_records_close(seq, vec)
    assert records(cfg.with_overrides({"executor": "vectorized"})) == vec  # and bitwise repeatable
    asam = records(cfg.with_overrides({"client.sam_adaptive": True}))
    assert asam[-1]["train_loss"] != seq[-1]["train_loss"]
