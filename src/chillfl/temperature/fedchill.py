"""FedChill: per-client temperature from heterogeneity, decayed on stagnation.

Paper: ``papers/fedchill.txt``. Each client n starts at
T_{n,0} = T_max * exp(-s * h_n) (Eq. 7), h_n its heterogeneity score (Eq. 6,
:mod:`chillfl.temperature.heterogeneity`), clipped to [T_min, T_max]
(Sec. 4.2.3: "constrained within the range [0.05, 1.0]"). After each local
training the client appends its validation accuracy to its history and runs
Algorithm 1 (App. A.1): count non-improving rounds; after P of them, and while
T > 1.1 T_min, set T <- max(gamma T, T_min) (Eq. 8) and reset the count.

Choices
-------
* Comparison (``compare``): Sec. 3.4's text says "the accuracy two rounds ago"
  while Algorithm 1, line 7, tests ``a_k <= A_n[-2]`` right after appending
  a_k, i.e. the previous entry. Default ``"previous"``: Algorithm 1 is the
  precise specification, and Sec. 4.2.3 ("performance plateaus for two
  consecutive rounds") and the (A6) proof ("rounds without improvement")
  describe round-on-round stagnation. ``"two_back"`` compares with A_n[-3].
* Short history: both modes require |A_n| >= 3 as line 7 does; otherwise the
  else branch (line 10) sets the counter to 0. The counter starts at 0 and
  cannot grow before the history is long enough, so this equals "counter
  unchanged" in every reachable state.
* At the floor (T <= 1.1 T_min) Algorithm 1 neither decays nor resets the
  counter (the reset, line 15, is inside the decay branch); we keep that, so
  the counter keeps growing there (it only matters for logging). T may
  therefore stay anywhere in [T_min, 1.1 T_min].
* Rounds are the client's own participations: the engine calls ``observe``
  only for clients that trained, and unsampled clients keep their state.
* ``observe(..., None)`` with ``decay = true`` is a configuration error (the
  decay needs a client validation split), rather than silently never decaying.
* Defaults: T_max = 1, T_min = 0.05, s = 2 (Sec. 4.2.3, Table 10), P = 2
  ("two consecutive rounds", Sec. 4.2.3), gamma = 0.95 (the paper uses
  gamma in {0.8, 0.95}; 0.8 is the other option).
* Table 4's ablation rows (see :data:`VARIANTS`): the text credits the
  "FedChill" row to heterogeneity initialisation and calls "FedChill*" the
  "full adaptive decay"; as the table "isolates the contributions of
  heterogeneity-based initialization versus adaptive decay", we read
  "FedChill" = initialisation only (``decay = false``) and "FedChill*" = decay
  from a fixed start temperature ``t_start`` (``init = false``, default T_max).
"""

from __future__ import annotations

import dataclasses
import math
import types
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np

from chillfl.errors import ConfigError, choice_error
from chillfl.options import require, require_range
from chillfl.temperature.heterogeneity import MEASURES, heterogeneity, reference_distribution

Compare = Literal["previous", "two_back"]

MIN_HISTORY = 3
"""Algorithm 1, line 7: compare only once |A_n| >= 3."""

FLOOR_MARGIN = 1.1
"""Algorithm 1, line 13: decay only while T > 1.1 * T_min."""

VARIANTS: Mapping[str, Mapping[str, bool]] = types.MappingProxyType(
    {
        "fedchill": types.MappingProxyType({"init": True, "decay": True}),  # Tables 1-3, 5-7
        "init_only": types.MappingProxyType({"init": True, "decay": False}),  # Table 4 "FedChill"
        "decay_only": types.MappingProxyType({"init": False, "decay": True}),  # Table 4 "FedChill*"
    }
)
"""Option presets for the full method and Table 4's component ablation rows."""


def initial_temperature(h: float, t_max: float = 1.0, t_min: float = 0.05, s: float = 2.0) -> float:
    """Eq. 7: T_{n,0} = T_max * exp(-s * h_n), clipped to [T_min, T_max]."""
    return float(min(max(t_max * math.exp(-s * h), t_min), t_max))


@dataclass(frozen=True)
class ClientTemperatureState:
    """One client's Algorithm 1 state: current T, its accuracy history A_n, stagnation count."""

    temperature: float
    history: list[float] = dataclasses.field(default_factory=list)
    counter: int = 0


def decay_step(
    state: ClientTemperatureState,
    accuracy: float,
    *,
    patience: int,
    gamma: float,
    t_min: float,
    compare: Compare = "previous",
) -> ClientTemperatureState:
    """One round of Algorithm 1 (Eq. 8); returns the new state, ``state`` is left untouched."""
    history = [*state.history, float(accuracy)]
    back = 2 if compare == "previous" else 3
    if len(history) >= MIN_HISTORY and history[-1] <= history[-back]:
        counter = state.counter + 1
    else:
        counter = 0
    temperature = state.temperature
    if counter >= patience and temperature > FLOOR_MARGIN * t_min:
        temperature = max(gamma * temperature, t_min)
        counter = 0
    return ClientTemperatureState(temperature=temperature, history=history, counter=counter)


@dataclass(frozen=True)
class FedChillOptions:
    """Options of the ``fedchill`` temperature policy.

    t_max, t_min: temperature range (Eq. 7, 8); s: scaling factor (Eq. 7);
    measure: heterogeneity measure (``ratio`` = Eq. 6; Table 11 / A.5 others);
    normalisation: ``max`` (per client) or ``minmax`` (over the federation);
    p_g: class priors of the reference distribution (None = uniform);
    init: Eq. 7 initialisation, else every client starts at ``t_start``
    (None = t_max); decay: Algorithm 1; patience P, gamma: decay rule;
    compare: ``previous`` (Algorithm 1) or ``two_back`` (Sec. 3.4 text).
    """

    t_max: float = 1.0
    t_min: float = 0.05
    s: float = 2.0
    measure: str = "ratio"
    normalisation: Literal["max", "minmax"] = "max"
    p_g: list[float] | None = None
    init: bool = True
    t_start: float | None = None
    decay: bool = True
    patience: int = 2
    gamma: float = 0.95
    compare: Compare = "previous"

    def validate(self, section: str) -> None:
        require(self.t_min > 0, f"{section}.t_min", f"must be > 0, got {self.t_min}")
        require(self.t_max >= self.t_min, f"{section}.t_max", f"must be >= t_min = {self.t_min}, got {self.t_max}")
        require(self.s >= 0, f"{section}.s", f"must be >= 0, got {self.s}")
        if self.measure not in MEASURES:
            raise choice_error(f"{section}.measure", self.measure, list(MEASURES))
        require(
            self.normalisation in ("max", "minmax"),
            f"{section}.normalisation",
            f"unknown value {self.normalisation!r}; allowed: max, minmax",
        )
        if self.p_g is not None:
            require(
                len(self.p_g) >= 2 and all(p > 0 for p in self.p_g),
                f"{section}.p_g",
                "must list one prior > 0 per class (at least 2)",
            )
        if self.t_start is not None:
            require(
                self.t_min <= self.t_start <= self.t_max,
                f"{section}.t_start",
                f"must be in [t_min, t_max] = [{self.t_min}, {self.t_max}], got {self.t_start}",
            )
        require_range(self.patience, 1, 10**7, f"{section}.patience")  # rounds without improvement: at most federation.rounds' bound
        require(0 < self.gamma < 1, f"{section}.gamma", f"must be in (0, 1), got {self.gamma}")
        require(
            self.compare in ("previous", "two_back"),
            f"{section}.compare",
            f"unknown value {self.compare!r}; allowed: previous, two_back",
        )


def start_temperature(options: FedChillOptions, h: float) -> float:
    """A client's temperature before any observation: Eq. 7 from its h_n, or ``t_start`` / ``t_max`` when ``init`` is off."""
    if options.init:
        return initial_temperature(h, options.t_max, options.t_min, options.s)
    return options.t_max if options.t_start is None else options.t_start


def no_accuracy_for_decay() -> ConfigError:
    """The error of a decay step without the client's validation accuracy (the run has no client splits)."""
    return ConfigError(
        "temperature.decay",
        "FedChill's decay needs each client's validation accuracy, but the run has no client "
        "splits; set eval.client_split or temperature.decay = false",
    )


class FedChillPolicy:
    """Per-client adaptive temperatures (implements :class:`~chillfl.temperature.base.TemperaturePolicy`)."""

    def __init__(self, options: FedChillOptions, class_counts: np.ndarray) -> None:
        options.validate("temperature")
        counts = np.asarray(class_counts, dtype=np.float64)
        if counts.ndim != 2:
            raise ConfigError("temperature.class_counts", f"expected a [clients, classes] matrix, got shape {counts.shape}")
        reference_distribution(options.p_g, counts.shape[1])  # checks len(p_g) == classes
        self.options = options
        self._h = heterogeneity(counts, options.measure, options.p_g, options.normalisation)
        self._states: dict[int, ClientTemperatureState] = {}  # only clients Algorithm 1 has changed: O(clients seen)

    def _start(self, i: int) -> float:
        """Client ``i``'s temperature before any observation: Eq. 7 from h_i, or ``t_start`` / ``t_max``."""
        return start_temperature(self.options, float(self._h[i]))

    @property
    def initial_heterogeneity(self) -> np.ndarray:
        """h_n of every client (in [0, 1]), as used by Eq. 7."""
        return self._h.copy()

    @property
    def num_clients(self) -> int:
        return len(self._h)

    def state(self, client_id: int) -> ClientTemperatureState:
        i = self._index(client_id)
        return self._states.get(i) or ClientTemperatureState(temperature=self._start(i))

    def _index(self, client_id: int) -> int:
        if not 0 <= client_id < len(self._h):
            raise KeyError(f"client id {client_id} out of range [0, {len(self._h)})")
        return client_id

    def temperature(self, client_id: int, round: int) -> float:
        return self.state(client_id).temperature

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        """Algorithm 1 after the client's local training; no-op when ``decay`` is off."""
        i = self._index(client_id)
        if not self.options.decay:
            return
        if local_accuracy is None:
            raise no_accuracy_for_decay()
        o = self.options
        self._states[i] = decay_step(
            self.state(i), local_accuracy, patience=o.patience, gamma=o.gamma, t_min=o.t_min, compare=o.compare
        )

    def snapshot(self) -> Mapping[int, float]:
        """Every registered client's temperature (O(clients): for metrics of small federations and plots)."""
        return {cid: self.state(cid).temperature for cid in range(self.num_clients)}

    def state_dict(self) -> dict[str, Any]:
        """The Algorithm 1 state (T, accuracy history A_n, stagnation counter) of every client it has changed.

        ``{"clients": {str(client id): {...}}}`` in client order; every other client is
        still at its start temperature, rebuilt with h_n from the options and counts,
        so a checkpoint grows with the clients seen, not the clients registered.
        Plain floats and ints only: floats survive JSON exactly (``repr``).
        """
        return {
            "clients": {
                str(cid): {"temperature": float(s.temperature), "history": [float(a) for a in s.history], "counter": int(s.counter)}
                for cid, s in sorted(self._states.items())
            }
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; also reads the older list form (one entry per registered client)."""
        if set(state) != {"clients"}:
            raise ValueError(f"FedChill state must have keys ['clients'], got {sorted(state)}")
        clients = state["clients"]
        if isinstance(clients, Mapping):
            items = [(int(k), v) for k, v in clients.items()]
            if any(not 0 <= cid < self.num_clients for cid, _ in items):
                raise ValueError(f"checkpoint names clients outside [0, {self.num_clients})")
        else:
            if len(clients) != self.num_clients:
                raise ValueError(f"checkpoint has {len(clients)} clients, policy has {self.num_clients}")
            items = list(enumerate(clients))
        self._states = {
            cid: ClientTemperatureState(temperature=float(c["temperature"]), history=[float(a) for a in c["history"]], counter=int(c["counter"]))
            for cid, c in items
        }
