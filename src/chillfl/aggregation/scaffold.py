"""SCAFFOLD (Karimireddy et al., ICML 2020), control-variate update option II.

Server state: control ``c``; client state: ``c_i`` (all zeros at start).
With ``x`` the global model, client i runs K local steps of

    y <- y - eta_l * (g_i(y) - c_i + c)                      (Alg. 1, line 10)

which the shared training loop gets from :class:`LinearCorrectionTerm` with
``context["correction"] = c - c_i``: the term ``sum_k <w_k, c_k - c_i,k>``
has gradient ``c - c_i``. After training (option II, Alg. 1 line 12)

    c_i+ = c_i - c + (x - y_i) / (K * eta_l)

(with local momentum, ``K`` becomes the effective number of steps, see Choices) computed here on the server from the uploaded ``y_i``, ``K = num_steps`` and
``eta_l = lr``. The server then sets (Alg. 1, lines 16-17)

    x <- x + eta_g * sum_{i in S} p_i (y_i - x)
    c <- c + (|S| / N) * (1/|S|) sum_{i in S} (c_i+ - c_i)

which keeps ``c = (1/N) sum_{all i} c_i``.

Choices
-------
* ``p_i = 1/|S|`` as in the paper (``weighting = "uniform"``); ``"samples"``
  uses ``n_i / sum n_j``. Caller-supplied weights (PA3Fed) replace ``p_i``;
  the ``c`` update always stays the paper's uniform mean so the invariant holds.
* Control variates cover trainable parameters only; buffers (BN statistics)
  are averaged with ``p_i``, integer buffers take the max.
* The local optimiser may use momentum / weight decay; the correction is then
  added to the raw gradient before them. Option II assumes plain SGD, where
  K steps of a constant gradient g move the model by ``K * eta_l * g``; with
  momentum rho they move it by ``a(K) * eta_l * g``, ``a(K) = (K - rho(1 -
  rho^K)/(1 - rho))/(1 - rho)`` (FedNova's effective steps), so the update
  divides by ``a(K) * eta_l`` instead of ``K * eta_l``: c_i+ is then exactly g
  for a linear loss, and not ~1/(1 - rho) times too large (10x at rho = 0.9,
  which over-corrects). ``momentum`` is filled from ``client.momentum``.
  Weight decay is not accounted for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Literal, Mapping, Sequence

import torch

from chillfl.aggregation.base import (
    ClientReporter,
    ClientResult,
    Downlink,
    Params,
    check_state_keys,
    client_params_state,
    load_client_params,
    load_params,
    params_state,
    sample_weights,
    weighted_average,
)
from chillfl.aggregation.client_states import ClientParams
from chillfl.aggregation.fednova import effective_steps
from chillfl.options import require


@dataclass(frozen=True)
class ScaffoldOptions:
    """``global_lr`` (eta_g, default 1.0); ``weighting`` of the model average (default ``uniform``);
    ``momentum``: the clients' SGD momentum (unset = ``client.momentum``, 0 outside a config)."""

    global_lr: float = 1.0
    weighting: Literal["uniform", "samples"] = "uniform"
    momentum: float | None = None

    def validate(self, section: str) -> None:
        require(self.global_lr > 0, f"{section}.global_lr", f"must be > 0, got {self.global_lr}")
        if self.momentum is not None:
            require(0 <= self.momentum < 1, f"{section}.momentum", f"must be in [0, 1), got {self.momentum}")


class LinearCorrectionTerm:
    """``sum_k <w_k, correction_k>``: adds ``correction`` to the gradient (SCAFFOLD, VRL-SGD)."""

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        correction: Mapping[str, torch.Tensor] = context["correction"]
        parts = [(params[k] * correction[k].detach()).sum() for k in params if k in correction]
        return torch.stack(parts).sum() if parts else torch.zeros(())


class Scaffold:
    """SCAFFOLD server: owns ``c`` and every client's ``c_i`` (missing = zeros)."""

    def __init__(self, num_clients: int, options: ScaffoldOptions = ScaffoldOptions(), param_keys: Collection[str] | None = None) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        self.num_clients = num_clients
        self.options = options
        self.param_keys = None if param_keys is None else list(param_keys)
        self.control: Params = {}
        self.client_controls = ClientParams()  # c_i of the clients sampled so far, flat on the CPU

    def _keys(self, state: Params) -> list[str]:
        keys = self.param_keys if self.param_keys is not None else list(state)
        return [k for k in keys if torch.is_floating_point(state[k])]

    def _control(self, state: Params) -> Params:
        if not self.control:
            self.control = {k: torch.zeros_like(state[k]) for k in self._keys(state)}
        return self.control

    def _client_control(self, cid: int) -> Params:
        return self.client_controls.get(cid) or {k: torch.zeros_like(v) for k, v in self.control.items()}

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        if self.options.weighting == "samples":
            return sample_weights(results)
        return torch.full((len(results),), 1.0 / len(results), dtype=torch.float64)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        c = self._control(global_params)
        c_i = self._client_control(client_id)
        return Downlink(context={"correction": {k: c[k] - c_i[k] for k in c}})

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        c = self._control(global_params)
        w = self.default_weights(results) if weights is None else weights
        out = weighted_average([r.params for r in results], w)  # buffers; trainable keys overwritten below
        delta_c = {k: torch.zeros_like(v) for k, v in c.items()}
        for r in results:
            if r.num_steps < 1 or r.lr <= 0:
                raise ValueError(f"SCAFFOLD needs num_steps >= 1 and lr > 0 (client {r.client_id})")
            c_i = self._client_control(r.client_id)
            scale = effective_steps(r.num_steps, self.options.momentum or 0.0) * r.lr
            new_c_i = {k: c_i[k] - c[k] + (global_params[k] - r.params[k]) / scale for k in c}
            for k in c:
                delta_c[k] += new_c_i[k] - c_i[k]
            self.client_controls[r.client_id] = new_c_i
        for k in c:
            step = sum(float(wi) * (r.params[k].double() - global_params[k].double()) for wi, r in zip(w, results))
            out[k] = (global_params[k].double() + self.options.global_lr * step).to(global_params[k].dtype)
        # c <- c + |S|/N * mean_S(delta c_i) = c + (1/N) * sum_S(delta c_i)
        self.control = {k: c[k] + delta_c[k] / self.num_clients for k in c}
        return out

    def round_metrics(self) -> Mapping[str, Any]:
        norm = sum(float((v.double() ** 2).sum()) for v in self.control.values()) ** 0.5
        return {"control_norm": norm}

    def client_reporter(self) -> ClientReporter | None:
        """No per-client report: the clients' models (and what the downlink asked for) are enough."""
        return None

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        """The server control ``c`` and every client's ``c_i`` (clients never sampled have none: zeros)."""
        return {"control": params_state(self.control), "client_controls": client_params_state(self.client_controls)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("control", "client_controls"), "SCAFFOLD")
        # key order of c is kept: round_metrics sums its squares in that order
        self.control = load_params(state["control"])
        self.client_controls = ClientParams.of(load_client_params(state["client_controls"]))
