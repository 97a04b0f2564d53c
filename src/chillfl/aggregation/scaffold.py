"""SCAFFOLD (Karimireddy et al., ICML 2020), control-variate update option II (default) or I.

Server state: control ``c``; client state: ``c_i`` (all zeros at start).
With ``x`` the global model, client i runs K local steps of

    y <- y - eta_l * (g_i(y) - c_i + c)                      (Alg. 1, line 10)

which the shared training loop gets from :class:`LinearCorrectionTerm` with
``context["correction"] = c - c_i``: the term ``sum_k <w_k, c_k - c_i,k>``
has gradient ``c - c_i``. After training (option II, Alg. 1 line 12)

    c_i+ = c_i - c + (x - y_i) / (K * eta_l)

(with local momentum, ``K`` becomes the effective number of steps, see Choices) computed on the client from its trained ``y_i``, ``K = num_steps`` and
``eta_l = lr``. c_i is the client's own: its client half (:class:`ScaffoldClient`)
reads it from the client's state, trains with ``correction = c - c_i``, computes
c_i+ and reports ``Delta c_i = c_i+ - c_i`` (Alg. 1, line 13). The server then sets (Alg. 1, lines 16-17)

    x <- x + eta_g * sum_{i in S} p_i (y_i - x)
    c <- c + (|S| / N) * (1/|S|) sum_{i in S} (c_i+ - c_i)

which keeps ``c = (1/N) sum_{all i} c_i``.

Option I (``option = "I"``, Alg. 1 line 12's other branch) sets instead
``c_i+ = g_i(x)``, a gradient of the client's loss at the server model.

Choices
-------
* ``p_i = 1/|S|`` as in the paper (``weighting = "uniform"``); ``"samples"``
  uses ``n_i / sum n_j``. Caller-supplied weights (PA3Fed) replace ``p_i``;
  the ``c`` update always stays the paper's uniform mean so the invariant holds.
* Control variates cover trainable parameters only (a frozen weight,
  ``requires_grad = False``, never moves: its c and c_i would be zeros sent
  each round); buffers (BN statistics) and frozen weights are averaged with
  ``p_i``, integer buffers take the max.
* The local optimiser may use momentum / weight decay; the correction is then
  added to the raw gradient before them. Option II assumes plain SGD, where
  K steps of a constant gradient g move the model by ``K * eta_l * g``; with
  momentum rho they move it by ``a(K) * eta_l * g``, ``a(K) = (K - rho(1 -
  rho^K)/(1 - rho))/(1 - rho)`` (FedNova's effective steps), so the update
  divides by ``a(K) * eta_l`` instead of ``K * eta_l``: c_i+ is then exactly g
  for a linear loss, and not ~1/(1 - rho) times too large (10x at rho = 0.9,
  which over-corrects). ``momentum`` is filled from ``client.momentum``.
  Weight decay is not accounted for.
* Option I's ``g_i(x)`` is the full-batch gradient, on the client's whole
  training set, of the mean cross-entropy at the round's temperature, with
  the model in eval mode (deterministic: no dropout draw, batch norm on its
  running statistics). The paper leaves g_i's batch open ("an additional pass
  over the local data", Sec. 3); the full batch is its least noisy reading.
  It costs one extra forward/backward pass over the client's data and, unlike
  option II, ignores the objective's other terms and the local optimiser.
  Option II (the default) is the paper's choice for its experiments.

Checked (2026-12) against Karimireddy et al. 2020 (Algorithm 1, lines 10-17: the corrected step with c - c_i,
option I / II for c_i+, x <- x + eta_g mean_S(y_i - x), c <- c + (|S| / N) mean_S(Delta c_i), i.e. the sampled
clients' sum over N, not over |S|), FL-bench (``src/client/scaffold.py``, ``src/server/scaffold.py``: uniform
weights, ``global_lr = 1.0``, ``c_i - c - (y_i - x) / (K lr)``, ``c += sum Delta c_i / client_num``) and PFLlib
(``clientscaffold.py`` / ``serverscaffold.py``: the same with K = batches x epochs). Defaults as theirs and the
paper's experiments: option II, eta_g = 1, p_i = 1/|S|. Both reimplementations divide by K lr whatever the
momentum (the correction above is chillfl's) and add c - c_i to the gradient before the optimiser, as here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Collection, Literal, Mapping, Sequence

import torch

from torch import nn
from torch.func import functional_call

from chillfl.aggregation.base import (
    AggregatorBase,
    Json,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    OnParameters,
    Params,
    Report,
    Trained,
    Wire,
    check_state_keys,
    load_params,
    own_entries,
    params_state,
    sample_weights,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.fednova import effective_steps
from chillfl.training.local import split_state, to_memory_format
from chillfl.options import require
from chillfl.training.objective import Term, read_table, temperature_cross_entropy
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value, with_client_momentum, with_terms
from chillfl.capabilities import Capabilities, Cost


@dataclass(frozen=True)
class ScaffoldOptions:
    """``global_lr`` (eta_g, default 1.0); ``weighting`` of the model average (default ``uniform``);
    ``momentum``: the clients' SGD momentum (unset = ``client.momentum``, 0 outside a config);
    ``option``: the control-variate update, ``II`` ((x - y_i) / (K lr), default) or ``I`` (g_i(x), one extra pass)."""

    global_lr: float = 1.0
    weighting: Literal["uniform", "samples"] = "uniform"
    momentum: float | None = None
    option: Literal["II", "I"] = "II"

    def validate(self, section: str) -> None:
        require(self.global_lr > 0, f"{section}.global_lr", f"must be > 0, got {self.global_lr}")
        if self.momentum is not None:
            require(0 <= self.momentum < 1, f"{section}.momentum", f"must be in [0, 1), got {self.momentum}")


@dataclass(unsafe_hash=True)
class LinearCorrectionTerm:
    """``sum_k <w_k, correction_k>``: adds ``correction`` to the gradient (SCAFFOLD, VRL-SGD; FedDyn's under its own ``key``)."""

    key: str = "correction"
    reads: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.reads = (self.key,)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        correction = read_table(context, self.key)
        parts = [(params[k] * correction[k].detach()).sum() for k in params if k in correction]
        return torch.stack(parts).sum() if parts else torch.zeros(())


CORRECTION_TERM = 0.4
"""The overhead of :class:`LinearCorrectionTerm` a pass (a product and a sum a parameter tensor, and their gradients), in plain
steps' overheads (``Cost.pass_overhead``): fewer calls than the proximal term's :data:`~chillfl.capabilities.PARAMETER_TERM`.
Measured 2026-12-02 on the 2-vCPU AVX2 machine (``benchmarks/estimates.py``, FLex&Chill CNN on digits, 500 passes): SCAFFOLD
took 0.12-0.29 CPU seconds more than FedAvg in five processes, 0.16 s on average, 0.32 ms a pass (0.42 steps' overheads);
FedDyn, this term and the proximal term, 0.27-0.34 s (0.8 overheads a pass)."""


CONTROL = "scaffold_control"
"""The downlink context key of the server control ``c``."""
DELTA = "control_delta"
"""The report key of ``Delta c_i = c_i+ - c_i``."""
PREFIX = "scaffold.c."
"""Where c_i lives in the client's state."""


@dataclass(frozen=True)
class ScaffoldClient:
    """SCAFFOLD's client half: c_i in the client's state; ``correction = c - c_i``; option II's c_i+ after training."""

    momentum: float = 0.0
    option: Literal["II", "I"] = "II"

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        c = _table(context[CONTROL])
        c_i = own_entries(state, PREFIX) or {k: torch.zeros_like(v) for k, v in c.items()}
        out = {k: v for k, v in context.items() if k != CONTROL}
        out["correction"] = {k: c[k] - c_i[k] for k in c}
        return start, out

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        """Alg. 1, line 12: option II c_i+ = c_i - c + (x - y_i) / (a(K) eta_l), option I c_i+ = g_i(x); reports c_i+ - c_i."""
        if trained.num_steps < 1 or trained.lr <= 0:
            raise ValueError(f"SCAFFOLD needs num_steps >= 1 and lr > 0 (client {trained.client_id})")
        c = _table(trained.sent[CONTROL])
        c_i = own_entries(state, PREFIX) or {k: torch.zeros_like(v) for k, v in c.items()}
        if self.option == "I":
            grad = full_batch_gradient(model, trained.start, trained.x, trained.y, trained.temperature)
            new_c_i = {k: grad[k].to(c[k].dtype) for k in c}
        else:
            scale = effective_steps(trained.num_steps, self.momentum) * trained.lr
            new_c_i = {k: c_i[k] - c[k] + (trained.start[k] - trained.params[k]) / scale for k in c}
        return with_prefix(new_c_i, PREFIX), {DELTA: {k: new_c_i[k] - c_i[k] for k in c}}


def full_batch_gradient(
    model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, temperature: float, batch_size: int = 1024
) -> Params:
    """Option I's g_i(x): the gradient of the mean CE(logits / T, y) over all of (x, y) at ``state``, in eval mode.

    Eval mode keeps it deterministic (no dropout draw) and leaves batch-norm
    statistics alone; batch sums over ``batch_size`` chunks, divided by ``len(y)`` once.
    """
    model.eval()
    params, buffers = split_state(model, to_memory_format(state, "contiguous"))
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    grads = {k: torch.zeros_like(v) for k, v in params.items()}
    for i in range(0, len(y), batch_size):
        logits = functional_call(model, (leaves, buffers), (x[i : i + batch_size],))
        yb = y[i : i + batch_size]
        loss = temperature_cross_entropy(logits, yb, temperature) * len(yb)
        for k, g in zip(leaves, torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)):
            if g is not None:
                grads[k] += g
    return {k: g / max(len(y), 1) for k, g in grads.items()}


def _table(value: Wire) -> Params:
    if not isinstance(value, dict):
        raise ValueError(f"SCAFFOLD expects a name -> tensor table, got {type(value).__name__}")
    return value


class Scaffold(OnParameters, AggregatorBase):
    """SCAFFOLD server: owns ``c``; each client's ``c_i`` is the client's own (:class:`ScaffoldClient`)."""

    trainable_only = True  # as its builder: a frozen weight never moves, so its c and c_i would stay zeros, sent each round

    def __init__(self, num_clients: int, options: ScaffoldOptions = ScaffoldOptions(), param_keys: Collection[str] | None = None) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        self.num_clients = num_clients
        self.options = options
        self.param_keys = None if param_keys is None else list(param_keys)
        self.control: Params = {}

    def _control(self, state: Params) -> Params:
        if not self.control:
            self.control = {k: torch.zeros_like(state[k]) for k in self.rule_keys(state)}
        return self.control

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        if self.options.weighting == "samples":
            return sample_weights(results)
        return torch.full((len(results),), 1.0 / len(results), dtype=torch.float64)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(context={CONTROL: self._control(global_params)})

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        c = self._control(global_params)
        w = self.default_weights(results) if weights is None else weights
        out = weighted_average([r.params for r in results], w)  # buffers; trainable keys overwritten below
        delta_c = {k: torch.zeros_like(v) for k, v in c.items()}
        for r in results:
            delta = r.report.get(DELTA)
            if not isinstance(delta, dict):
                raise ValueError(f"SCAFFOLD needs report[{DELTA!r}] from every client (client {r.client_id})")
            for k in c:
                delta_c[k] += delta[k]
        for k in c:
            step = sum(float(wi) * (r.params[k].double() - global_params[k].double()) for wi, r in zip(w, results))
            out[k] = (global_params[k].double() + self.options.global_lr * step).to(global_params[k].dtype)
        # c <- c + |S|/N * mean_S(delta c_i) = c + (1/N) * sum_S(delta c_i)
        self.control = {k: c[k] + delta_c[k] / self.num_clients for k in c}
        return out

    def round_metrics(self) -> Mapping[str, Json]:
        norm = sum(float((v.double() ** 2).sum()) for v in self.control.values()) ** 0.5
        return {"control_norm": norm}

    def client_half(self) -> ClientHalf:
        """c_i and its update run on the client (:class:`ScaffoldClient`, with the clients' momentum)."""
        return ScaffoldClient(self.options.momentum or 0.0, self.options.option)

    def needed_terms(self) -> list[Term]:
        """The corrected step's ``c - c_i`` (:class:`LinearCorrectionTerm`): without it the clients run FedAvg's steps."""
        return [LinearCorrectionTerm()]

    def state_dict(self) -> dict[str, Any]:
        """The server control ``c`` (each c_i is in its client's state)."""
        return {"control": params_state(self.control)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("control",), "SCAFFOLD")
        # key order of c is kept: round_metrics sums its squares in that order
        self.control = load_params(state["control"])


CAPABILITIES = Capabilities(plain_sgd="SCAFFOLD's option II control variate (x - y_i) / (K lr)", takes_weights=True,
                            cost=Cost(pass_overhead=CORRECTION_TERM))
"""Its limits, and its cost: the correction term c - c_i on every pass (:data:`CORRECTION_TERM`)."""

OPTION_I = replace(CAPABILITIES, cost=CAPABILITIES.cost.plus(Cost(epochs=1.0)),
                   private_steps="option I's c_i+ = g_i(x), a full-batch gradient over the client's rows outside its private training, "
                                 "which its uploaded control_delta carries")
"""Option I: one more epoch a round, and a control variate that reads the client's data outside the private steps (dp-sgd
bounds the training, not g_i(x); option II's (x - y_i) / (K lr) is the private model's own post-processing)."""


def _bind(aggregator: Scaffold, ctx: BuildContext) -> None:
    """An instance passed from Python, bound to the run as the builder builds one: its ``num_clients`` the run's (the N of
    c's |S| / N update), its ``momentum`` ``client.momentum`` (option II's a(K); unset: the run's)."""
    aggregator.num_clients = run_value(aggregator.num_clients, ctx.num_clients, instance_field(ctx, "num_clients"), "federation.num_clients")
    aggregator.options = with_client_momentum(aggregator.options, ctx, "SCAFFOLD's c_i")


SPEC = register_algorithm(
    "scaffold",
    AlgorithmSpec(
        ScaffoldOptions,
        lambda o, ctx: with_terms(Scaffold(ctx.num_clients, with_client_momentum(o, ctx, "SCAFFOLD's c_i"), ctx.trainable_keys())),
        "control variates, option II (Karimireddy et al. 2020)",
        capabilities=CAPABILITIES,
        # option I's c_i+ = g_i(x): a forward + backward over the client's rows after its training, one more epoch (option II's
        # (x - y_i) / (K lr) works on the parameters alone, once a round)
        capabilities_of=lambda o: OPTION_I if o.option == "I" else CAPABILITIES,
        makes=(Scaffold,),  # an instance passed from Python meets this spec's checks (check_instance)
        bind=_bind,
    ),
)
