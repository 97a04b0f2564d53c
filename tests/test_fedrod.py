"""FedRoD: the balanced-softmax generic step, the detached personal head, and the model local accuracy measures.

Model x -> G (a x) + P (a x): a one-weight body ``0.weight`` = a and a 2-class bias-free head ``1.weight`` = G,
with the personal head P of the same shape. Three samples, x = 1, labels (0, 0, 1): class counts n = (2, 1).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import personal_model
from chillfl.aggregation.fedrod import LOG_PRIOR, NO_SAMPLE, FedRoD, FedRoDOptions, RoDLoss, combined, log_prior
from chillfl.training.local import LocalSpec, evaluate
from test_perfedavg import client_reply, close

SPEC = LocalSpec(epochs=1, batch_size=8)


def body_and_head(a: float, g: tuple[float, float]) -> nn.Module:
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 2, bias=False))
    with torch.no_grad():
        model[0].weight.fill_(a)
        model[1].weight.copy_(torch.tensor(g).view(2, 1))
    return model


def data() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(3, 1), torch.tensor([0, 0, 1])


def start(a: float, g: tuple[float, float]) -> dict[str, torch.Tensor]:
    return {"0.weight": torch.tensor([[a]]), "1.weight": torch.tensor(g).view(2, 1)}


def test_balanced_generic_step_and_detached_personal_step_by_hand() -> None:
    # a = 1, G = (1, 0), P = (0, 0), lr 0.6; one step on the 3 samples (z = a = 1).
    # BSM: logits G z + log n = (1 + ln 2, 0): softmax (2e / (2e + 1), 1 / (2e + 1)) = (0.844638, 0.155362);
    #   dL/dlogits, batch mean: ((2 (0.844638 - 1) + 0.844638) / 3, -same) = (0.177971, -0.177971)
    #   G <- G - 0.6 (0.177971, -0.177971) z = (0.893217, 0.106783); a <- 1 - 0.6 (0.177971 * 1 + (-0.177971) * 0) = 0.893217
    # P: logits G z (detached) + P z = (1, 0): softmax (e / (e + 1), 1 / (e + 1)) = (0.731059, 0.268941);
    #   dL/dlogits mean: ((2 (0.731059 - 1) + 0.731059) / 3, -same) = (0.0643919, -0.0643919)
    #   P <- -0.6 (0.0643919, -0.0643919) = (-0.0386351, 0.0386351); none of it reaches a or G (z and G(z) detached)
    # personal model: head G + P = (0.854582, 0.145418)
    model = body_and_head(1.0, (1.0, 0.0))
    x, y = data()
    half = FedRoD(model).client_half()
    reply = client_reply(half, model, SPEC, start(1.0, (1.0, 0.0)), lr=0.6, x=x, y=y, x_eval=x, y_eval=y,
                         state={"fedrod.p.weight": torch.zeros(2, 1)})
    close(reply.uplink.params["0.weight"], 0.893217, atol=1e-5)
    close(reply.uplink.params["1.weight"], 0.893217, 0.106783, atol=1e-5)
    assert set(reply.state) == {"fedrod.p.weight"}
    close(reply.state["fedrod.p.weight"], -0.0386351, 0.0386351, atol=1e-6)
    # local accuracy is body + G + P's: the model with head G + P
    personal = start(0.893217, (0.854582, 0.145418))
    acc, loss = evaluate(model, personal, x, y)
    assert reply.local_acc == acc and reply.local_loss == pytest.approx(loss, rel=1e-4)
    saved = personal_model(half, reply.state, reply.uplink.params)
    assert saved is not None
    close(saved["1.weight"], 0.854582, 0.145418, atol=1e-5)


def test_plain_generic_loss_and_first_participation() -> None:
    # balanced = false: G's loss is CE(G z): the (1, 0) softmax above, gradient (0.0643919, -0.0643919)
    #   -> G = (1 - 0.0386351, 0.0386351); a <- 1 - 0.6 * 0.0643919 = 0.961365
    model = body_and_head(1.0, (1.0, 0.0))
    x, y = data()
    reply = client_reply(FedRoD(model, FedRoDOptions(balanced=False)).client_half(), model, SPEC, start(1.0, (1.0, 0.0)), lr=0.6,
                         x=x, y=y, x_eval=x, y_eval=y, state={"fedrod.p.weight": torch.zeros(2, 1)})
    close(reply.uplink.params["1.weight"], 0.961365, 0.0386351, atol=1e-5)
    close(reply.uplink.params["0.weight"], 0.961365, atol=1e-5)
    # no P yet: it starts as the global generic head it was sent (lr 0: nothing moves, P = G = (1, 0))
    first = client_reply(FedRoD(model).client_half(), model, SPEC, start(1.0, (1.0, 0.0)), lr=0.0, x=x, y=y, x_eval=x, y_eval=y)
    close(first.state["fedrod.p.weight"], 1.0, 0.0)


def test_the_loss_at_a_temperature_and_where_its_gradients_go_by_hand() -> None:
    # RoDLoss alone, T = 2, three samples with logits G(z) = (1, 0), labels (0, 0, 1), log n = (ln 2, 0), z = 1 and P = (0.5, -0.5):
    # BSM at T: CE(G(z) / T + log n), the prior not divided by T: logits (0.5 + ln 2, 0), softmax_0 p = 2 e^0.5 / (2 e^0.5 + 1)
    #   = 3.297443 / 4.297443 = 0.767303; BSM = (-2 ln p - ln(1 - p)) / 3 = (2 * 0.264873 + 1.458020) / 3 = 0.662589
    #   (the prior divided by T too, CE((G(z) + log n) / T), would give p = sqrt(2e) / (sqrt(2e) + 1) = 0.699848 and a total of 1.432678 instead)
    # P's loss at T = 1: G(z).detach() + P z = (1.5, -0.5): q = sigmoid(2) = 0.880797; (-2 ln q - ln(1 - q)) / 3
    #   = (2 * 0.126928 + 2.126928) / 3 = 0.793595; total 1.456183
    # gradients: into G(z) from the BSM only, (p - onehot) / (3 T): (-0.038783, 0.038783) for y = 0 and (0.127884, -0.127884) for y = 1;
    #   into P: sum over samples of (q - onehot) z / 3 = ((3q - 2) / 3, -(3q - 2) / 3) = (0.214130, -0.214130); none into z (detached)
    #   P as a bias b_P = (0.5, -0.5) with W_P = 0 gives the same P z + b_P = (0.5, -0.5): the same loss, b_P's gradient (0.214130, -0.214130)
    prior = torch.tensor([math.log(2), 0.0])
    for as_bias in (False, True):
        logits = torch.tensor([[1.0, 0.0]] * 3, requires_grad=True)
        z = torch.ones(3, 1, requires_grad=True)
        weight = torch.zeros(2, 1) if as_bias else torch.tensor([[0.5], [-0.5]])
        bias = torch.tensor([0.5, -0.5]) if as_bias else torch.zeros(2)
        trained = (bias if as_bias else weight).requires_grad_(True)
        params = {"personal.weight": weight, "personal.bias": bias}
        loss = RoDLoss()(logits, torch.tensor([0, 0, 1]), 2.0, features=z, params=params, context={LOG_PRIOR: prior})
        assert float(loss) == pytest.approx(1.456183, abs=1e-6)
        loss.backward()
        assert logits.grad is not None and trained.grad is not None
        close(logits.grad, -0.038783, 0.038783, -0.038783, 0.038783, 0.127884, -0.127884)
        close(trained.grad, 0.214130, -0.214130)
        assert z.grad is None  # P's loss reads z detached: the body learns from the generic loss alone


def test_the_prior_divided_by_the_temperature_with_the_logits_by_hand() -> None:
    # the other reading of the paper's (temperature-free) BSM, prior_scaling = "with_logits": CE((G(z) + log n) / T).
    # The setting above: T = 2, logits G(z) = (1, 0) for three samples, labels (0, 0, 1), log n = (ln 2, 0), P = (0.5, -0.5), z = 1.
    # (G(z) + log n) / T = ((1 + ln 2) / 2, 0): p = e^((1 + ln 2) / 2) / (e^((1 + ln 2) / 2) + 1) = sqrt(2e) / (sqrt(2e) + 1)
    #   = 2.331644 / 3.331644 = 0.699848; ln p = -0.356892, ln(1 - p) = ln 0.300152 = -1.203466
    #   BSM = (-2 ln p - ln(1 - p)) / 3 = (0.713784 + 1.203466) / 3 = 0.639083
    # P's loss is the one above, 0.793595 (T = 1, no prior): total 1.432678, against 1.456183 for the default "after_temperature"
    # gradients into G(z): (p - onehot) / (3 T) = ((p - 1) / 6, (1 - p) / 6) = (-0.050025, 0.050025) for y = 0
    #   and (p / 6, -p / 6) = (0.116641, -0.116641) for y = 1; into P as above, (0.214130, -0.214130)
    # at T = 1 the two readings are one loss: CE(G(z) + log n) either way
    prior = torch.tensor([math.log(2), 0.0])
    y = torch.tensor([0, 0, 1])
    params = {"personal.weight": torch.tensor([[0.5], [-0.5]]), "personal.bias": torch.zeros(2)}
    logits = torch.tensor([[1.0, 0.0]] * 3, requires_grad=True)
    loss = RoDLoss(prior_scaling="with_logits")(logits, y, 2.0, features=torch.ones(3, 1), params=params, context={LOG_PRIOR: prior})
    assert float(loss) == pytest.approx(1.432678, abs=1e-6)
    loss.backward()
    assert logits.grad is not None
    close(logits.grad, -0.050025, 0.050025, -0.050025, 0.050025, 0.116641, -0.116641)
    at_one = [float(RoDLoss(prior_scaling=s)(logits.detach(), y, 1.0, features=torch.ones(3, 1), params=params, context={LOG_PRIOR: prior}))
              for s in ("after_temperature", "with_logits")]
    assert at_one[0] == at_one[1]
    # the option reaches the client's loss
    (objective,) = FedRoD(body_and_head(1.0, (1.0, 0.0)), FedRoDOptions(prior_scaling="with_logits")).client_half().objectives(SPEC)
    assert isinstance(objective.base_loss, RoDLoss) and objective.base_loss.prior_scaling == "with_logits"


def test_the_client_model_adds_both_heads_weights_and_biases() -> None:
    # body a = 3, G = (W_G, b_G) = ((1, 2), (0.5, -1)), P = ((-1, 1), (0.25, 0.25)): head W_G + W_P = (0, 3), b_G + b_P = (0.75, -0.75);
    # the body as it was
    model = {"0.weight": torch.tensor([[3.0]]), "1.weight": torch.tensor([[1.0], [2.0]]), "1.bias": torch.tensor([0.5, -1.0])}
    both = combined(model, {"weight": torch.tensor([[-1.0], [1.0]]), "bias": torch.tensor([0.25, 0.25])}, "1")
    close(both["0.weight"], 3.0)
    close(both["1.weight"], 0.0, 3.0)
    close(both["1.bias"], 0.75, -0.75)


def test_log_prior_counts_the_classes() -> None:
    # labels (0, 0, 1) of 3 classes: log n = (ln 2, ln 1, log 0 -> NO_SAMPLE)
    close(log_prior(torch.tensor([0, 0, 1]), 3, torch.float32), math.log(2), 0.0, NO_SAMPLE)


def test_fedrod_server_is_fedavg_on_body_and_generic_head() -> None:
    from chillfl.aggregation.base import ClientResult

    model = body_and_head(1.0, (1.0, 0.0))
    glob = start(0.0, (0.0, 0.0))
    a = {k: torch.full_like(v, 1.0) for k, v in glob.items()}
    b = {k: torch.full_like(v, 3.0) for k, v in glob.items()}
    out = FedRoD(model).aggregate(glob, [ClientResult(0, a, 10, 1, 0.1, 1.0, 0.0), ClientResult(1, b, 30, 1, 0.1, 1.0, 0.0)], 0)
    assert all(torch.all(out[k] == 2.5) for k in glob)  # (10 * 1 + 30 * 3) / 40


def test_under_every_executor() -> None:
    """sequential == processes bitwise, vectorized within rounding; local accuracy is body + G + P's, not FedAvg's clients'."""
    from methods_e2e import assert_executors_agree, config, records

    cfg = config(**{"algorithm.name": "fedrod", "federation.rounds": 2, "model.name": "mlp"})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    assert seq[-1]["local_loss"] != records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))[-1]["local_loss"]


def test_the_runs_frozen_and_no_decay_names_are_renamed_into_the_template():
    # the template holds the model as model.* and P as personal.*: a name left unprefixed matches nothing, so weight
    # decay would reach an entry the run exempts (before the fix no_decay stayed {"0.bias"})
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2))
    client = FedRoD(model).client_half()
    spec = LocalSpec(epochs=1, batch_size=4, weight_decay=0.1, frozen=frozenset({"0.weight"}), no_decay=frozenset({"0.bias"}))
    (objective,) = client.objectives(spec)
    assert objective.frozen == {"model.0.weight"} and objective.no_decay == {"model.0.bias"}
    assert {"model.0.weight", "model.0.bias", "personal.weight"} <= {n for n, _ in objective.model.named_parameters()}


def test_prior_scaling_without_the_balanced_softmax_is_refused_naming_it() -> None:
    # balanced = false trains G with the plain base loss, which has no log n_i to place: the option would do nothing
    from chillfl.errors import ConfigError

    FedRoDOptions(balanced=False).validate("algorithm")  # the default reading is no request: accepted
    FedRoDOptions(prior_scaling="with_logits").validate("algorithm")
    with pytest.raises(ConfigError, match=r"^algorithm\.prior_scaling: .*balanced = true"):
        FedRoDOptions(balanced=False, prior_scaling="with_logits").validate("algorithm")
