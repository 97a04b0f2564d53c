"""FedDyn (Acar et al., ICLR 2021): dynamic regularisation, Algorithm 1.

Client k, sent the server model theta^{t-1}, solves

    theta_k^t = argmin_theta  L_k(theta) - <grad L_k(theta_k^{t-1}), theta> + alpha/2 ||theta - theta^{t-1}||^2

with the one local training path: the linear term is a
:class:`~chillfl.aggregation.scaffold.LinearCorrectionTerm` reading
``feddyn_linear = -g_k`` (its gradient is ``-g_k``), the quadratic one a
:class:`~chillfl.training.objective.ProximalTerm` reading ``feddyn_alpha``
and ``feddyn_anchor = theta^{t-1}``. ``g_k = grad L_k(theta_k^{t-1})`` is the
client's own state (:class:`FedDynClient`, zeros before its first round), and
after training it becomes (first-order condition of the problem above)

    g_k <- g_k - alpha (theta_k^t - theta^{t-1}).

The server keeps h (zeros at start) and sets, over the round's clients P_t
and the m clients of the federation,

    h^t     = h^{t-1} - alpha/m * sum_{k in P_t} (theta_k^t - theta^{t-1})
    theta^t = 1/|P_t| sum_{k in P_t} theta_k^t - h^t / alpha.

Choices
-------
* The local problem is solved approximately by the run's local optimiser
  (``client.epochs`` of SGD, as the paper's experiments and the authors' code
  do), not to optimality; g_k's update is then the paper's formula, exact
  only at the optimum.
* g_k and h cover trainable parameters; buffers (batch-norm statistics) are
  averaged uniformly, integer buffers take the max. A frozen weight
  (``requires_grad = False``) has neither: it never moves, so its g_k and h
  would stay zeros, one copy per client.
* The mean over P_t is uniform (Algorithm 1, and the authors' code:
  ``np.mean(clnt_params_list[selected_clnts])``). ``weighting = "samples"``
  (n_k / n) is chillfl's own option, not the authors': on unbalanced data
  their code keeps the plain mean and scales each client's alpha instead.
* ``alpha_scaling = "client_size"`` is that scaling (off by default: the
  paper's Algorithm 1 has one alpha): client k trains with
  ``alpha_k = alpha / w_k``, ``w_k = n_k m / sum_j n_j`` (its training rows
  relative to the mean over all m clients; ``alpha_coef_adpt = alpha_coef /
  weight_list[clnt]``), so a small client is held closer to theta^{t-1}. Its
  g_k update uses its own alpha_k (the authors store g_k / alpha_k, "already
  scaled", which is the same while alpha_k is fixed). The server keeps the
  one ``alpha`` for h: theta^t = mean - h/alpha adds (1/m) sum of the clients'
  drifts whatever their alpha_k, as the authors' ``cld_mdl_param =
  avg_mdl_param + np.mean(local_param_list, axis=0)`` does. The sizes come
  from :attr:`~chillfl.aggregation.registry.BuildContext.client_sizes`; built
  without them (outside a run) the option is a ConfigError.
* The global model chillfl evaluates is theta^t, the model the clients start
  from. The authors' code sends theta^t (``cld_mdl_param``) but reports the
  plain mean of the round's models (``avg_mdl_param``, without -h/alpha) and
  the mean over all clients' latest models (``all_model``).
* Checked against alpemreacar/FedDyn ``utils_methods.py`` (``train_FedDyn``:
  ``local_param_list[clnt] += curr_model_par - cld_mdl_param`` is -g_k/alpha,
  ``cld_mdl_param = avg_mdl_param + np.mean(local_param_list, axis=0)`` is
  mean - h/alpha with h over all m clients) and ``utils_general.py``
  (``train_feddyn_mdl``: weight decay alpha plus ``alpha <theta, -theta^{t-1} +
  local_grad_vector>`` is the two terms above up to a constant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Literal, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    Params,
    Report,
    Trained,
    Wire,
    check_state_keys,
    client_weights,
    load_params,
    own_entries,
    params_state,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.scaffold import CORRECTION_TERM, LinearCorrectionTerm
from chillfl.errors import ConfigError
from chillfl.options import Scale, require
from chillfl.training.objective import ProximalTerm, Term, read_number
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, instance_field, register_algorithm, require_client_sizes, run_value, with_terms
from chillfl.capabilities import PARAMETER_TERM, Capabilities, Cost


@dataclass(frozen=True)
class FedDynOptions:
    """``alpha``: weight of the dynamic regulariser (paper: 0.1, 0.01 or 0.001); ``weighting`` of the client mean;
    ``alpha_scaling``: ``"client_size"`` gives client k ``alpha / (n_k m / sum_j n_j)`` (the authors' code)."""

    alpha: Scale = 0.01
    weighting: Literal["uniform", "samples"] = "uniform"
    alpha_scaling: Literal["none", "client_size"] = "none"

    def validate(self, section: str) -> None:
        require(self.alpha > 0, f"{section}.alpha", f"must be > 0, got {self.alpha}")


def client_alphas(alpha: float, sizes: Sequence[int]) -> tuple[float | None, ...]:
    """Each client's ``alpha / w_k``, ``w_k = n_k m / sum_j n_j`` (the authors' ``alpha_coef / weight_list[clnt]``,
    in their order of operations); None for a client without training rows, which never trains."""
    total, m = sum(sizes), len(sizes)
    if total <= 0:
        raise ValueError("FedDyn's client-size alpha needs clients with training rows")
    return tuple(alpha / (n / total * m) if n > 0 else None for n in sizes)


ALPHA, ANCHOR, LINEAR = "feddyn_alpha", "feddyn_anchor", "feddyn_linear"
"""Context keys of the two terms."""
PREFIX = "feddyn.grad."
"""Where g_k = grad L_k(theta_k^{t-1}) lives in the client's state."""


def feddyn_terms() -> list[Term]:
    """-<g_k, theta> and alpha/2 ||theta - theta^{t-1}||^2, under FedDyn's own context keys."""
    return [LinearCorrectionTerm(LINEAR), ProximalTerm(ALPHA, ANCHOR)]


@dataclass(frozen=True)
class FedDynClient:
    """FedDyn's client half: its g_k as ``feddyn_linear = -g_k``; g_k <- g_k - alpha (theta_k^t - theta^{t-1}) after training."""

    param_keys: tuple[str, ...]

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        g = own_entries(state, PREFIX)
        out = dict(context)
        out[LINEAR] = {k: -g[k] for k in self.param_keys} if g else {k: torch.zeros_like(start[k]) for k in self.param_keys}
        out[ANCHOR] = start  # theta^{t-1}: the model the client was sent, no bytes of its own
        return start, out

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        alpha = float(read_number(trained.context, ALPHA))
        g = own_entries(state, PREFIX) or {k: torch.zeros_like(trained.start[k]) for k in self.param_keys}
        new = {k: g[k] - alpha * (trained.params[k] - trained.start[k]) for k in self.param_keys}
        return with_prefix(new, PREFIX), {}


class FedDyn(AggregatorBase):
    """FedDyn server: owns h; every g_k is its client's own (:class:`FedDynClient`)."""

    def __init__(self, num_clients: int, options: FedDynOptions = FedDynOptions(), param_keys: Collection[str] | None = None,
                 alphas: Sequence[float | None] | None = None) -> None:
        """``alphas``: each client's own alpha (``alpha_scaling = "client_size"``, :func:`client_alphas`); None: ``options.alpha`` for all.
        ``param_keys``: the parameters h and each g_k cover; None: the run's trainable ones, learnt when the run is built
        (:meth:`learn_parameters`), as the config's builder passes them (outside a run: none)."""
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        if alphas is not None and len(alphas) != num_clients:
            raise ValueError(f"FedDyn got {len(alphas)} client alphas for {num_clients} clients")
        self.num_clients = num_clients
        self.options = options
        self.param_keys: tuple[str, ...] = () if param_keys is None else tuple(param_keys)
        self._learns = param_keys is None
        self.alphas = None if alphas is None else tuple(alphas)
        self.h: Params = {}

    def client_alpha(self, client_id: int) -> float:
        """The alpha client ``client_id`` trains with: its own under ``alpha_scaling = "client_size"``, else ``alpha``."""
        if self.alphas is None:
            return self.options.alpha
        alpha = self.alphas[client_id]
        if alpha is None:
            raise ValueError(f"FedDyn: client {client_id} has no training rows, so no alpha (such a client never trains)")
        return alpha

    def learn_parameters(self, model: nn.Module) -> None:
        """The run's trainable parameters, unless built with its own (:class:`~chillfl.aggregation.base.LearnsParameters`): an
        instance passed from Python (``FedDyn(3)``) would otherwise regularise nothing while its server still subtracts h / alpha."""
        if self._learns:
            self.param_keys = tuple(name for name, p in model.named_parameters() if p.requires_grad)
            self._learns = False

    def client_half(self) -> ClientHalf:
        return FedDynClient(self.param_keys)

    def needed_terms(self) -> list[Term]:
        """-<g_k, theta> and alpha/2 ||theta - theta^{t-1}||^2 (:func:`feddyn_terms`): without them the clients run FedAvg's
        steps while the server still subtracts h / alpha."""
        return feddyn_terms()

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(context={ALPHA: self.client_alpha(client_id)})  # theta^{t-1} is the model sent, g_k the client's own

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        alpha, keys = self.options.alpha, self.param_keys  # the one alpha, also under client_size (module docstring)
        if not self.h:
            self.h = {k: torch.zeros_like(global_params[k]) for k in keys}
        drift = {k: sum(r.params[k].double() - global_params[k].double() for r in results) for k in keys}
        self.h = {k: (self.h[k].double() - alpha / self.num_clients * drift[k]).to(self.h[k].dtype) for k in keys}
        out = weighted_average([r.params for r in results], client_weights(results, self.options.weighting))
        for k in keys:
            out[k] = (out[k].double() - self.h[k].double() / alpha).to(global_params[k].dtype)
        return {k: out[k] for k in global_params}

    def round_metrics(self) -> Mapping[str, Any]:
        return {"h_norm": sum(float((v.double() ** 2).sum()) for v in self.h.values()) ** 0.5}

    def state_dict(self) -> dict[str, Any]:
        """The server's h (each g_k is in its client's state)."""
        return {"h": params_state(self.h)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("h",), "FedDyn")
        self.h = load_params(state["h"])


def _alphas(options: FedDynOptions, ctx: BuildContext) -> tuple[float | None, ...] | None:
    """Each client's alpha under ``alpha_scaling = "client_size"`` (from the run's client sizes), else None (``alpha`` for all)."""
    if options.alpha_scaling != "client_size":
        return None
    sizes = require_client_sizes(ctx, f"{ctx.section}.alpha_scaling", "'client_size' scales each client's alpha by its training rows")
    return client_alphas(options.alpha, sizes)


def _build(options: FedDynOptions, ctx: BuildContext) -> Built:
    return with_terms(FedDyn(ctx.num_clients, options, ctx.trainable_keys(), _alphas(options, ctx)))


def _bind(aggregator: FedDyn, ctx: BuildContext) -> None:
    """An instance passed from Python, bound as the builder builds one: its ``num_clients`` the run's (h's 1/m), and under
    ``alpha_scaling = "client_size"`` its ``alphas`` the run's client sizes' (None: filled); per-client alphas the options
    do not ask for would run while the recorded config says one alpha, so they are refused."""
    aggregator.num_clients = run_value(aggregator.num_clients, ctx.num_clients, instance_field(ctx, "num_clients"), "federation.num_clients")
    wanted = _alphas(aggregator.options, ctx)
    if wanted is None and aggregator.alphas is not None:
        raise ConfigError(instance_field(ctx, "alphas"), f"gives each client its own alpha, but {ctx.section}.alpha_scaling is "
                                                         f"{aggregator.options.alpha_scaling!r}; set alpha_scaling = 'client_size' (alphas None: the run's)")
    aggregator.alphas = run_value(aggregator.alphas, wanted, instance_field(ctx, "alphas"), "client-size alphas (alpha_scaling = 'client_size')")


SPEC = register_algorithm(
    "feddyn",
    AlgorithmSpec(
        FedDynOptions,
        _build,
        "dynamic regularisation (Acar et al. 2021)",
        # its two terms on every pass, over every parameter tensor: -<g_k, theta> (SCAFFOLD's correction term) and the proximal term
        capabilities=Capabilities(not_a_base="FedDyn's server step is its own (a uniform mean corrected by h), not a weighted average",
                                  cost=Cost(pass_overhead=CORRECTION_TERM + PARAMETER_TERM)),
        makes=(FedDyn,),
        bind=_bind,
    ),
)
