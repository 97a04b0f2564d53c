"""FedChill: per-client temperature from heterogeneity, decayed on stagnation.

Checked against papers/fedchill.txt Sec. 3.3-3.4 (Eq. 7-8), App. A.1 Algorithm 1, Sec. 4.2.3 and Table 4/7/10 defaults, 2026-12-02; no authors' code found (search, find_repos "fedchill").

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
* A_n is kept to its last three entries (:data:`KEPT_HISTORY`): all that
  line 7 reads in either mode, so the decisions are those of the whole
  history, and a client's state stays the same size over a long run.
* At the floor (T <= 1.1 T_min) Algorithm 1 neither decays nor resets the
  counter (the reset, line 15, is inside the decay branch); we keep that, so
  the counter keeps growing there (it only matters for logging). T may
  therefore stay anywhere in [T_min, 1.1 T_min].
* Rounds are the client's own participations: only a client that trained runs
  a decay step, and an unsampled client keeps its state.
* ``observe(..., None)`` with ``decay = true`` is a configuration error (the
  decay needs a client validation split), rather than silently never decaying.
* Which split a_k is measured on: the client's local validation split when the
  run has them (``eval.validation`` > 0; ``local_val_acc``), else its
  evaluation split (:func:`chillfl.protocols.common.policy_accuracy`). The
  evaluation split is drawn from the test rows the run's accuracy is reported
  on, so with a validation split the decay never reads test data; a client
  whose validation split is empty keeps its state that round. Without one the
  decay reads test rows: the paper's protocol (Sec. 4.2.2 draws each client's
  validation set from the test set) and every bundled FedChill config's.
* Where the state lives: with the client (:class:`FedChillHalf`), as on a
  device. A client computes its own h_n from its own training labels (the
  same float as its row of the federation's matrix, see
  :func:`~chillfl.temperature.heterogeneity.client_heterogeneity`), so the
  server reads no class count; only what needs every client's counts
  (``normalisation = "minmax"``, ``measure = "size"``, with ``init``) is
  computed by the server (:class:`FedChillPolicy`) and offered in the
  downlink as the client's start temperature. A client without training
  rows never trains and is left out of that computation (its h_n is NaN).
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
import torch

from chillfl.capabilities import Capabilities, TakesName
from chillfl.errors import ConfigError, choice_error
from chillfl.options import require, require_range, warn_unread
from chillfl.temperature.base import TemperatureState, require_temperature
from chillfl.temperature.registry import ClassCounts, PolicySpec, register_policy
from chillfl.temperature.heterogeneity import FEDERATION_MEASURES, MEASURES, client_heterogeneity, heterogeneity, reference_distribution

Compare = Literal["previous", "two_back"]

MIN_HISTORY = 3
"""Algorithm 1, line 7: compare only once |A_n| >= 3."""

KEPT_HISTORY = MIN_HISTORY
"""Entries of A_n a client keeps: the last three, all Algorithm 1 reads (A_n[-1] against A_n[-2] or A_n[-3], once
|A_n| >= 3, which a kept length of min(|A_n|, 3) still tells). The whole history grew each client's state, and every
checkpoint, by one entry per participation."""

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
    """One client's Algorithm 1 state: current T, the last :data:`KEPT_HISTORY` entries of its accuracy history A_n, stagnation count."""

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
    """One round of Algorithm 1 (Eq. 8); returns the new state (A_n cut to its last :data:`KEPT_HISTORY` entries), ``state`` is left untouched."""
    history = [*state.history[-KEPT_HISTORY:], float(accuracy)]
    back = 2 if compare == "previous" else 3
    if len(history) >= MIN_HISTORY and history[-1] <= history[-back]:
        counter = state.counter + 1
    else:
        counter = 0
    temperature = state.temperature
    if counter >= patience and temperature > FLOOR_MARGIN * t_min:
        temperature = max(gamma * temperature, t_min)
        counter = 0
    return ClientTemperatureState(temperature=temperature, history=history[-KEPT_HISTORY:], counter=counter)


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
        require_temperature(self.t_min, f"{section}.t_min")  # the floor of every T: Eq. 7 clips to it, Eq. 8 decays no lower
        require_temperature(self.t_max, f"{section}.t_max")  # the ceiling: Eq. 7's T for the most heterogeneous client
        if self.t_max < self.t_min:  # blame the one the user moved: t_min = 1.5 under the default t_max named t_max
            if self.t_min != FedChillOptions.t_min and self.t_max == FedChillOptions.t_max:
                raise ConfigError(f"{section}.t_min", f"must be <= t_max = {self.t_max}, got {self.t_min}")
            raise ConfigError(f"{section}.t_max", f"must be >= t_min = {self.t_min}, got {self.t_max}")
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
        if self.init:
            warn_unread(self, ("t_start",), section, f"with {section}.init = true (t_start is the start without Eq. 7)")
        else:
            warn_unread(self, ("s", "measure", "normalisation", "p_g"), section, f"with {section}.init = false (s, measure, normalisation and p_g shape Eq. 7's start)")
        if not self.decay:
            warn_unread(self, ("patience", "gamma", "compare"), section, f"with {section}.decay = false (patience, gamma and compare are Algorithm 1's decay)")


def start_temperature(options: FedChillOptions, h: float) -> float:
    """A client's temperature before any observation: Eq. 7 from its h_n, or ``t_start`` / ``t_max`` when ``init`` is off."""
    if options.init:
        return initial_temperature(h, options.t_max, options.t_min, options.s)
    return options.t_max if options.t_start is None else options.t_start


def no_accuracy_for_decay() -> ConfigError:
    """The error of a decay step without the client's accuracy (a run built around :func:`check_policy`'s refusal of
    ``eval.clients = "none"``, e.g. a protocol passed from Python that measures none)."""
    return ConfigError(
        "temperature.decay",
        "FedChill's decay needs each client's accuracy after its training, but none was measured; "
        "set eval.clients = 'sampled' or temperature.decay = false",
    )


def needs_federation(options: FedChillOptions) -> tuple[str, str] | None:
    """(option, why) when a client's start temperature needs every client's label counts; None: each client computes its own."""
    if not options.init:
        return None  # every client starts at t_start / t_max: h_n is not used
    if options.normalisation == "minmax":
        return "normalisation", "'minmax' rescales h_n over every client's label counts"
    if options.measure in FEDERATION_MEASURES:
        return "measure", f"{options.measure!r} is normalised by the federation's largest client"
    return None


PREFIX = "fedchill."
"""The key prefix of a client's FedChill entries in its own state table."""


def to_entries(state: ClientTemperatureState) -> TemperatureState:
    """A client's Algorithm 1 state as tensors (``fedchill.temperature``, ``.history``, ``.counter``): float64, so exact."""
    return {
        PREFIX + "temperature": torch.tensor(state.temperature, dtype=torch.float64),
        PREFIX + "history": torch.tensor(state.history, dtype=torch.float64),
        PREFIX + "counter": torch.tensor(state.counter, dtype=torch.int64),
    }


def from_entries(state: Mapping[str, torch.Tensor]) -> ClientTemperatureState | None:
    """Inverse of :func:`to_entries` (None: the client has run no decay step yet). A longer A_n (an older chillfl's
    state kept it whole) is cut to its last :data:`KEPT_HISTORY` entries: Algorithm 1 decides the same on them."""
    if PREFIX + "temperature" not in state:
        return None
    return ClientTemperatureState(
        temperature=float(state[PREFIX + "temperature"]),
        history=[float(a) for a in state[PREFIX + "history"][-KEPT_HISTORY:].tolist()],
        counter=int(state[PREFIX + "counter"]),
    )


@dataclass(frozen=True)
class FedChillHalf:
    """FedChill on the client (implements :class:`~chillfl.temperature.base.TemperatureHalf`): its T and Algorithm 1 on its own state."""

    options: FedChillOptions
    num_classes: int

    def start(self, offered: float, labels: torch.Tensor) -> float:
        """T_{n,0}: the server's offer where only the federation can compute it, else Eq. 7 from the client's own label counts (or t_start)."""
        if not math.isnan(offered):
            return float(offered)
        o = self.options
        h = client_heterogeneity(np.bincount(labels.cpu().numpy(), minlength=self.num_classes), o.measure, o.p_g) if o.init else math.nan
        return start_temperature(o, h)

    def temperature(self, state: Mapping[str, torch.Tensor], offered: float, labels: torch.Tensor) -> float:
        saved = from_entries(state)
        return saved.temperature if saved is not None else self.start(offered, labels)

    def finish(self, state: Mapping[str, torch.Tensor], temperature: float, local_accuracy: float | None) -> TemperatureState:
        """Algorithm 1 after the client's local evaluation (nothing to keep when ``decay`` is off).

        Without an accuracy the state is kept as it is: the server stops the run (:meth:`FedChillPolicy.observe`).
        """
        o = self.options
        if not o.decay:
            return {}
        current = from_entries(state)
        if local_accuracy is None:
            return {} if current is None else to_entries(current)
        if current is None:
            current = ClientTemperatureState(temperature=temperature)  # it trained at its start temperature
        return to_entries(decay_step(current, local_accuracy, patience=o.patience, gamma=o.gamma, t_min=o.t_min, compare=o.compare))


class FedChillPolicy:
    """FedChill's server half (implements :class:`~chillfl.temperature.base.TemperaturePolicy`): no per-client state.

    Each client's T, accuracy history A_n and stagnation counter live with the
    client (:class:`FedChillHalf`). What the server still does:

    * offers the start temperature T_{n,0} (Eq. 7) where h_n needs every
      client's label counts (:func:`needs_federation`: ``minmax``
      normalisation, the ``size`` measure); the counts are read only then.
      Otherwise it offers NaN: the client computes its own h_n;
    * stops the run when a decay step has no accuracy (:meth:`observe`);
    * hands out the client half, after checking ``p_g`` against the classes.
    """

    def __init__(self, options: FedChillOptions, class_counts: ClassCounts | None = None) -> None:
        options.validate("temperature")
        self.options = options
        self._counts = class_counts
        self._h: np.ndarray | None = None
        if needs_federation(options) is not None:
            self._h = self.initial_heterogeneity
        elif isinstance(class_counts, np.ndarray):
            self._matrix()  # checks its shape and len(p_g) == classes

    def _matrix(self) -> np.ndarray:
        source = self._counts
        if source is None:
            raise ConfigError("temperature.class_counts", "FedChill needs the federation's label counts here")
        counts = np.asarray(source() if callable(source) else source, dtype=np.float64)
        if counts.ndim != 2:
            raise ConfigError("temperature.class_counts", f"expected a [clients, classes] matrix, got shape {counts.shape}")
        self._check_p_g(counts.shape[1])
        self._counts = counts
        return counts

    @property
    def initial_heterogeneity(self) -> np.ndarray:
        """h_n of every client (in [0, 1]) over the federation's counts, as Eq. 7 uses it (reads the counts).

        A client without training rows has no label distribution: its h_n is NaN, and it is left out of
        the federation's range (``minmax``) and of its largest size (``size``). Why: such a client never
        trains (the round lists it under ``no_data``), as with ``normalisation = "max"``, where each
        client scores itself; scoring it anyway refused the whole run.
        """
        o = self.options
        counts = self._matrix()
        present = counts.sum(axis=1) > 0
        if not present.any():
            raise ConfigError("partition", "no client has a training sample")
        h = np.full(len(counts), np.nan)
        h[present] = heterogeneity(counts[present], o.measure, o.p_g, o.normalisation)
        return h

    def temperature(self, client_id: int, round: int) -> float:
        """The start temperature the server offers client ``client_id`` (NaN: the client computes its own)."""
        if self._h is None:
            return math.nan
        if not 0 <= client_id < len(self._h):
            raise KeyError(f"client id {client_id} out of range [0, {len(self._h)})")
        h = float(self._h[client_id])
        return math.nan if math.isnan(h) else start_temperature(self.options, h)

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        """Nothing to update (the client ran Algorithm 1); a ConfigError when the decay has no accuracy."""
        if self.options.decay and local_accuracy is None:
            raise no_accuracy_for_decay()

    def _check_p_g(self, num_classes: int) -> None:
        """A ConfigError unless ``p_g`` has one prior per class; not checked with ``init = false``, where p_g is not
        read (the run says it ignores it: refusing it too contradicted that note)."""
        if self.options.init:
            reference_distribution(self.options.p_g, num_classes)

    def client_half(self, num_classes: int) -> FedChillHalf:
        self._check_p_g(num_classes)
        return FedChillHalf(self.options, num_classes)

    def state_dict(self) -> dict[str, Any]:
        """Nothing: the per-client states are the clients' (checkpointed with their client state)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(
                "this checkpoint keeps FedChill's per-client temperatures on the server (an older chillfl); "
                "the clients keep them now: resume it with the chillfl that wrote it"
            )


def _measures() -> list[str]:
    """What ``measure`` takes (:data:`~chillfl.temperature.heterogeneity.MEASURES`), as the reference lists it."""
    return sorted(MEASURES)


def capabilities(options: FedChillOptions) -> Capabilities:
    """Off Flower when the server must read every client's label counts (:func:`needs_federation`): they stay on the nodes.
    With ``decay`` on, the clients' accuracy steers their temperatures (without a validation split, test rows do).

    Privacy: with ``init`` a client's T reads its own label counts, so one sample changes every sample's loss CE(z/T, y),
    which per-sample clipping does not bound (``private_steps``, as FedLC's); where the server reads every client's counts,
    they leave the clients without noise (``reports``), and one client's counts move every other client's T."""
    steers = "FedChill's decay (temperature.decay = true)" if options.decay else None
    varies = options.init and options.s > 0 and options.t_max > options.t_min  # Eq. 7 is T_max for every client otherwise
    read = "training-set size" if options.measure in FEDERATION_MEASURES and options.normalisation != "minmax" else "label counts"
    own = (f"each client's start temperature (temperature.init = true) is computed from its {read}, so one sample changes "
           "every sample's loss CE(z/T, y), which per-sample clipping does not bound; with temperature.t_min = temperature.t_max "
           "every client starts at T_max and none is read") if varies else None
    found = needs_federation(options)
    if found is None:
        return Capabilities(steers_by_accuracy=steers, private_steps=own)
    option, why = found
    return Capabilities(on_flower=f"{why}, which no Flower node sees (a node's labels stay on it)", limited_by=option, steers_by_accuracy=steers,
                        reports=(f"each client's {read}, from which the server sets every client's start temperature (temperature.{option}: {why})"
                                 if varies else None),
                        private_steps=own)


SPEC = register_policy(
    "fedchill",
    PolicySpec(FedChillOptions, FedChillPolicy, "per-client T from label heterogeneity, decayed on stagnation (FedChill)", capabilities,
               takes_names={"measure": TakesName(_measures)}),
)
