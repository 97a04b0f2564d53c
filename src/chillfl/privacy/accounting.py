"""Epsilon from a well-kept accountant: Opacus's RDP accountant (or its PRV one), never our own maths.

Why Opacus's RDP accountant: it is maintained with PyTorch's own DP library, its subsampled-Gaussian
RDP bound (Mironov et al. 2019) is tight enough for the few hundred compositions of an FL run, it
composes heterogeneous steps exactly (a history of (sigma, q, steps)), and it is pure Python on
numpy/scipy: no extra native dependency next to torch. ``accountant = "prv"`` uses Opacus's PRV
accountant (Gopi et al. 2021), tighter at large step counts, same interface. ``rdp_orders`` picks the
orders the RDP accountant minimises over: Opacus's own (the default) or :data:`EXTENDED_ORDERS`, which
reach 1024 and so give a smaller (still valid) epsilon where the best order is past 63. The two formulas
written here, :func:`rdp_floor` and :func:`prv_floor`, only say which targets an accountant cannot reach,
to refuse them before Opacus's search. Under the PRV accountant that search is Opacus's bisection run on the
ledger's epsilon (Opacus's, bit for bit), so that a grid too large for memory is refused before it is allocated.

A run keeps one :class:`Ledger`: per privacy unit (the whole population for ``dp-fedavg``, each client
for ``dp-sgd`` and ``local``, each client's soft-label rows), the accountant's history. The reported
epsilon is the largest over the units (the worst-off client). The ledger is part of the checkpoint.

Checked against: pytorch/opacus 1.6 ``opacus/accountants/rdp.py`` (``DEFAULT_ALPHAS``: 1.1 .. 10.9 by 0.1 and
12 .. 63; the history; ``get_epsilon(delta, alphas)``), ``opacus/accountants/analysis/rdp.py`` (``compute_rdp``,
Mironov, Talwar & Zhang 2019 Sec. 3.3; ``get_privacy_spent``, Balle et al. 2020 Thm 21, not Mironov 2017 Prop. 3's
looser conversion), ``opacus/accountants/utils.py`` (``get_noise_multiplier``: sigma doubled to 1e6 before its
bisection, each try one full accountant evaluation, hence the floors; its ``**kwargs`` reach ``get_epsilon``),
``opacus/accountants/prv.py`` (``get_epsilon`` returns ``eps_upper``; ``eps_error`` 0.01, ``delta_error`` delta / 1000)
and ``opacus/accountants/analysis/prv/prvs.py`` (``DiscretePRV.compute_epsilon``: ``eps_upper`` is the estimate at
delta - delta_error plus eps_error), ``opacus/tests/accountants_test.py`` and tensorflow/privacy
``compute_dp_sgd_privacy_test.py`` (their published epsilons, reproduced in tests/test_privacy_math.py),
google/differential-privacy ``python/dp_accounting/dp_accounting/rdp/rdp_privacy_accountant.py``
(``DEFAULT_RDP_ORDERS``: 1.1 .. 10.9 by 0.1, 11 .. 63, 128, 256, 512, 1024: :data:`EXTENDED_ORDERS`), 2026-12-02.
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import torch

from chillfl.extras import need

History = tuple[tuple[float, float, int], ...]
"""(noise multiplier, sample rate, steps) entries, as Opacus's accountants keep them."""

Orders = Literal["opacus", "extended"]
"""The RDP orders epsilon is minimised over (``privacy.rdp_orders``)."""

EXTENDED_ORDERS: tuple[float, ...] = (*(1 + x / 10.0 for x in range(1, 100)), *range(11, 64), 128, 256, 512, 1024)
"""dp-accounting's default grid: Opacus's orders (1.1 .. 10.9 by 0.1, 12 .. 63) with 11 and 128, 256, 512, 1024 added.
A superset of Opacus's, so its epsilon is never larger; the large orders pay off where the best is past 63 (small
epsilon: large sigma, small q, few steps). Integer orders go through Opacus's exact binomial sum, one term per
integer up to the order, so 1024 costs milliseconds, not the fractional series' seconds."""

PRV_EPS_ERROR = 0.01
"""The ``eps_error`` asked of Opacus's PRV accountant (its default): what it adds to its estimate (:func:`prv_floor`)."""

PRV_MAX_POINTS = 2**24
"""The most grid points the PRV accountant may discretise a history on (about 2.6 GiB of its arrays: it took 4.7 GiB
for 2.8e7 points). The grid is the domain's width over its mesh, and the width grows as the noise shrinks: at sigma 0.1
and q = 1, 100 steps need 3.7e7 points (6 GiB, then the kernel kills the run) where sigma 1 needs 7.4e5. Past it the
ledger raises :class:`AccountantError` before allocating; 2**24 is far above what a run at sigma >= 0.5 asks
(1.1e4 points for one step, 4.2e6 for 300 steps at sigma 0.8, q = 1)."""

SEARCH_TOLERANCE = 1e-9
"""Opacus's sigma search stops once its epsilon is within ``max(0.01, SEARCH_TOLERANCE * target)`` below the target.
Its own absolute 0.01 never ends above 2**46 ~ 7e13 (epsilons 0.01 apart are no longer floats there): a target of 1e20
hung the run before it started. Below 1e7 the tolerance is Opacus's 0.01, so every sigma found there is unchanged."""


RDP_MIN_SIGMA = 1e-150
"""The smallest noise multiplier either accountant takes (the PRV one sizes its grid by the RDP one). Why: Opacus's RDP
series divides by 2 sigma^2, which is 0 below 1.5e-162 (ZeroDivisionError); above that, below about 1e-153, its terms
(i^2 - i) / (2 sigma^2) overflow to inf, and its fractional-order loop, whose end test a NaN never passes, never ends
(sigma 1e-155 at q = 0.5 ran for hours, a run's round or the PRV plan's probe before round 1). At 1e-150 every order's
term (to 1024, :data:`EXTENDED_ORDERS`) is finite, and the epsilon is past 1e299: no budget to state, and no noise."""


class AccountantError(ValueError):
    """A history the accountant cannot turn into an epsilon here (the PRV accountant's grid too large for memory, or its
    discretisation failing at a noise too small): said before a run starts (the plan probes its whole planned history),
    never a traceback in a round."""


class GridTooLarge(AccountantError):
    """The PRV accountant's grid for a history past :data:`PRV_MAX_POINTS`, refused before it is allocated."""


def _orders(orders: Orders) -> list[float] | None:
    """What Opacus's RDP accountant is given as ``alphas``: None (its own ``DEFAULT_ALPHAS``) or :data:`EXTENDED_ORDERS`."""
    return None if orders == "opacus" else list(EXTENDED_ORDERS)


def _options(kind: str, delta: float, orders: Orders) -> dict[str, Any]:
    """The keyword arguments of the accountant's ``get_epsilon`` (and of Opacus's search, which passes them on): the
    RDP orders, or the PRV accountant's error bounds (its defaults, written out so that :func:`prv_floor` holds)."""
    if kind == "rdp":
        return {"alphas": _orders(orders)}
    return {"eps_error": PRV_EPS_ERROR, "delta_error": delta / 1000}


def _accountant(kind: str) -> Any:
    accountants = need("opacus.accountants", "privacy", "[privacy]")
    return accountants.RDPAccountant() if kind == "rdp" else accountants.PRVAccountant()


def epsilon_of(history: History, delta: float, kind: str = "rdp", orders: Orders = "opacus") -> float:
    """(epsilon at ``delta``) of a history of subsampled Gaussian steps, by Opacus's accountant; 0 before any step."""
    if not history:
        return 0.0
    acc = _accountant(kind)
    acc.history = [(float(s), float(q), int(n)) for s, q, n in history]
    with warnings.catch_warnings():  # "optimal order is the smallest/largest alpha": the bound is valid, only looser
        warnings.filterwarnings("ignore", message="Optimal order")
        warnings.filterwarnings("ignore", category=RuntimeWarning)  # PRV at q = 1 takes log(1 - q) = -inf on its way: harmless
        return float(acc.get_epsilon(delta=delta, **_options(kind, delta, orders)))


def rdp_floor(delta: float, orders: Orders = "opacus") -> float:
    """The smallest epsilon the RDP accountant can report at ``delta``, whatever sigma: its (epsilon, delta) conversion
    (Balle et al. 2020, Thm 21) at zero RDP, log((a - 1) / a) - (log delta + log a) / (a - 1), minimised over the
    orders a (Opacus's, at most 63: 0.0286 at delta = 1e-3, 0.103 at 1e-5; :data:`EXTENDED_ORDERS`, at most 1024:
    -0.0010 and 0.0035). A target at or below it is reached by no sigma."""
    grid: Sequence[float] = need("opacus.accountants", "privacy", "[privacy]").RDPAccountant.DEFAULT_ALPHAS if orders == "opacus" else EXTENDED_ORDERS
    return min(math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1) for a in grid)


def prv_floor(delta: float) -> float:
    """The smallest epsilon the PRV accountant reports at ``delta``, whatever sigma: ``PRV_EPS_ERROR`` + log(1 - delta'),
    delta' = delta - delta / 1000 (0.0090 at delta = 1e-3, 0.00999 at 1e-5).

    Opacus reports ``eps_upper``: its estimate at delta' plus eps_error. No mechanism's privacy curve has an epsilon
    below log(1 - delta') at delta' (on the whole output space, 1 <= e^epsilon + delta'), so no sigma brings the report
    under this (but for float rounding: 1e-12 below it was seen); the noise only takes it there in the limit (within 1e-10
    at sigma 655360, the largest Opacus's search returns, at q 0.01 and 0.5). :func:`rdp_floor` is no bound here: the
    PRV accountant reports 0.01 where the RDP one cannot go below 0.103."""
    return PRV_EPS_ERROR + math.log1p(-(delta - delta / 1000))


PRV_MAX_EPSILON = math.log(sys.float_info.max) + PRV_EPS_ERROR
"""The largest epsilon the PRV accountant reports (709.79): its estimate takes e^epsilon, which overflows a float past
log(float max), so a history whose epsilon is larger comes back as infinity. A target above it is reached by no sigma:
Opacus's search halved its interval for ever there (target 1,000 at q = 1 over 100 steps hung the run before it started)."""


RDP_MAX_EPSILON = 1e30
"""The largest target epsilon either accountant searches a sigma for. Why: Opacus's bisection for sigma runs from 10 down
to the target's sigma (about sqrt(1.1 / (2 epsilon)) at q = 1), one accountant evaluation (a second or more at a large
sample rate) a halving: a mistyped exponent (1e308) searched for minutes in ``--dry-run`` before anything ran. At 1e30
sigma is below 1e-15, noise no float32 weight keeps; e^epsilon overflowed a float long before (:data:`PRV_MAX_EPSILON`)."""


def noise_for(target_epsilon: float, delta: float, sample_rate: float, steps: int, kind: str = "rdp", orders: Orders = "opacus") -> float:
    """The noise multiplier that spends ``target_epsilon`` over ``steps`` steps at ``sample_rate`` (Opacus's search).

    A target no sigma reaches (at or below :func:`rdp_floor` of the orders, or :func:`prv_floor` for the PRV accountant)
    is a ValueError at once: Opacus's search would double sigma up to 1e6 first, and at a large sample rate each try
    takes seconds (the RDP accountant's fractional-order series) to a minute (the PRV one's), minutes in all, before
    saying so."""
    if kind == "prv" and target_epsilon > PRV_MAX_EPSILON:
        raise AccountantError(f"the PRV accountant reports no epsilon above {PRV_MAX_EPSILON:.5g} (e^epsilon overflows a float)")
    if target_epsilon > RDP_MAX_EPSILON:
        raise AccountantError(f"the {kind.upper()} accountant's search takes no target above {RDP_MAX_EPSILON:g} (the noise it needs, sigma "
                              f"below 1e-15, is no noise at all, and the search for it takes minutes)")
    floor = rdp_floor(delta, orders) if kind == "rdp" else prv_floor(delta)
    if target_epsilon <= floor:
        why = "" if kind == "rdp" else f" (its eps_error {PRV_EPS_ERROR} included)"
        raise ValueError(f"The privacy budget is too low: the {kind.upper()} accountant reports epsilon > {floor:.4g} at delta = {delta} whatever the noise{why}")
    return _searched(target_epsilon, delta, sample_rate, steps, kind, orders)


@functools.lru_cache(maxsize=256)
def _searched(target_epsilon: float, delta: float, sample_rate: float, steps: int, kind: str, orders: Orders) -> float:
    """Opacus's search for sigma, once per process for each question: it is a pure function of them, and under the PRV
    accountant it takes seconds (11 s at q = 0.5 over 100 steps on a 2-core Xeon), paid again by every seed and tuning point of a
    comparison that plans the same target at the same rate (user-level DP: q = clients_per_round / num_clients). The RDP
    accountant's is Opacus's own; the PRV accountant's is its bisection on the ledger's epsilon (:func:`_prv_search`), whose
    grid is bounded before it is allocated."""
    utils = need("opacus.accountants.utils", "privacy", "[privacy]")
    tolerance = max(0.01, SEARCH_TOLERANCE * target_epsilon)
    if kind == "prv":
        return _prv_search(target_epsilon, delta, sample_rate, steps, tolerance, float(utils.MAX_SIGMA))
    with warnings.catch_warnings():  # see epsilon_of
        warnings.filterwarnings("ignore", message="Optimal order")
        try:
            return float(utils.get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps, accountant=kind,
                                                    epsilon_tolerance=tolerance, **_options(kind, delta, orders)))
        except (RuntimeError, MemoryError) as exc:  # not seen from the RDP accountant; said on the field all the same
            raise AccountantError(f"the {kind.upper()} accountant cannot account the small noise this target needs ({type(exc).__name__}: {exc})") from None


CLOSED = 1e-3
"""How near (relative to sigma) the PRV search's interval may close on a sigma whose grid is too large before it says the
target's noise lies there: within 0.1 % of the smallest noise the accountant can hold, a larger sigma spends nearly the
target anyway, and each try so near costs a grid of almost :data:`PRV_MAX_POINTS` points."""


def _prv_search(target: float, delta: float, rate: float, steps: int, tolerance: float, max_sigma: float) -> float:
    """Opacus's search for sigma (``get_noise_multiplier``: sigma doubled from 20 until epsilon falls under the target,
    then the interval halved until it is within ``tolerance`` under it), on the :class:`Ledger`'s PRV epsilon: Opacus's
    PRVAccountant's bit for bit, but a grid past :data:`PRV_MAX_POINTS` is refused before it is allocated. Opacus's own
    search allocates whatever grid its bisection meets: gigabytes at a small sigma over many steps, where the kernel may
    kill the process before Python sees a MemoryError (the ledger's cap, for the same reason). A target past
    :data:`PRV_MAX_EPSILON` is refused before the search (:func:`noise_for`), and an interval that closes on adjacent
    floats without reaching the tolerance is one :class:`AccountantError`, not a loop without end.

    The grid grows as sigma shrinks and epsilon falls as sigma grows, so a sigma whose grid is too large lies below the
    answer wherever the answer's own grid fits: the search steps up from it, and finds Opacus's sigma. Where the interval
    closes on such a sigma (within :data:`CLOSED`) with the epsilon still more than ``tolerance`` under the target, the
    answer needs less noise than the accountant can hold: :class:`AccountantError`."""

    def spent(sigma: float) -> float | None:  # None: a grid too large to lay (Opacus's discretisation failing: raised, as it was)
        ledger = Ledger(delta, "prv")
        ledger.spend("unit", sigma, rate, steps)
        try:
            with warnings.catch_warnings():  # see epsilon_of
                warnings.filterwarnings("ignore", message="Optimal order")
                warnings.filterwarnings("ignore", category=RuntimeWarning)
                return ledger.epsilon()
        except GridTooLarge:
            return None

    low, high, eps_high = 0.0, 10.0, math.inf
    while eps_high > target:
        high *= 2
        eps = spent(high)
        eps_high = math.inf if eps is None else eps
        if high > max_sigma:
            raise ValueError("The privacy budget is too low.")
    too_small: float | None = None  # the largest sigma found whose grid is too large
    while target - eps_high > tolerance:
        if too_small is not None and high - too_small <= CLOSED * high:
            raise AccountantError(f"the PRV accountant cannot hold the noise this target needs: below {high:.4g} at sample rate {rate:.4g} over {steps} steps "
                                  f"its grid has more than {PRV_MAX_POINTS:.3g} points")
        sigma = (low + high) / 2
        if not low < sigma < high:  # the interval is down to adjacent floats: the epsilon jumps past the tolerance there
            raise AccountantError(f"the PRV accountant's epsilon jumps from {eps_high:.6g} to above the target at noise multiplier {high:.6g}")
        eps = spent(sigma)
        if eps is not None and eps < target:
            high, eps_high = sigma, eps
        else:
            low = sigma
            too_small = sigma if eps is None else too_small
    return high


def add_steps(history: History, sigma: float, rate: float, steps: int) -> History:
    """``history`` after ``steps`` more steps at (sigma, rate): merged into the entry with the same pair, wherever it is,
    else appended. Composition does not depend on the order (RDP adds, privacy loss distributions convolve), and a unit
    charged at two rates each round (``dp-sgd``'s merged last batch) keeps two entries, not two a round."""
    if steps <= 0:
        return history
    for i, (s, q, n) in enumerate(history):
        if s == sigma and q == rate:
            return (*history[:i], (sigma, rate, n + steps), *history[i + 1 :])
    return (*history, (sigma, rate, steps))


class Ledger:
    """Every privacy unit's accountant history; epsilon = the worst unit's, memoised per distinct history.

    The RDP accountant's epsilon is composed here from one step's RDP per (sigma, q), kept for the run: Opacus's
    ``get_privacy_spent`` recomputes every entry's RDP from scratch (the fractional orders' series: seconds at a large
    q), and a run's histories grow every round. Opacus composes ``compute_rdp(q, sigma, 1, orders) * steps`` summed
    over the entries, then converts: the same operations in the same order here, so the same bits
    (``tests/test_privacy.py``); only the repeated series is saved.

    The PRV accountant's epsilon reuses the same one-step RDPs: Opacus sizes its discretisation domain by the RDP
    accountant (the whole history at delta_error / 4, each entry's one step at delta_error / (8 * steps)), and that
    series was nine tenths of its time. The rest (the grid, the discretised PRVs, their FFT composition) depends on the
    history's total steps through the domain, so it is redone each time the history grows; within one history an
    entry's (sigma, q) is discretised once however often it recurs (the same grid, the same array)."""

    def __init__(self, delta: float, kind: str = "rdp", orders: Orders = "opacus") -> None:
        self.delta = delta
        self.kind = kind
        self.orders: Orders = orders
        self.histories: dict[str, History] = {}
        self._cache: dict[History, float] = {}
        self._step_rdp: dict[tuple[float, float], np.ndarray] = {}  # (sigma, q) -> one step's RDP at every order

    def spend(self, unit: str, sigma: float, rate: float, steps: int = 1) -> None:
        self.histories[unit] = add_steps(self.histories.get(unit, ()), sigma, rate, steps)

    def epsilon(self, unit: str | None = None) -> float:
        """One unit's epsilon, or (``None``) the largest over all units."""
        units = [unit] if unit is not None else list(self.histories)
        worst = max((self._epsilon(self.histories.get(u, ())) for u in units), default=0.0)
        if unit is None:  # a unit's history only grows, so one no unit holds now is never asked for again: the memo stays one entry a distinct history
            held = set(self.histories.values())
            self._cache = {h: e for h, e in self._cache.items() if h in held}
        return worst

    def _epsilon(self, history: History) -> float:
        if history not in self._cache:
            if not history:
                self._cache[history] = 0.0
            else:
                with warnings.catch_warnings():  # see epsilon_of
                    warnings.filterwarnings("ignore", message="Optimal order")
                    warnings.filterwarnings("ignore", category=RuntimeWarning)
                    self._cache[history] = self._rdp_epsilon(history, self.delta) if self.kind == "rdp" else self._prv_epsilon(history)
        return self._cache[history]

    def _alphas(self) -> list[float]:
        """The RDP orders: the ledger's own for the RDP accountant; Opacus's default ones for the PRV accountant's domain."""
        default = list(need("opacus.accountants", "privacy", "[privacy]").RDPAccountant.DEFAULT_ALPHAS)
        return (_orders(self.orders) or default) if self.kind == "rdp" else default

    def _rdp_epsilon(self, history: History, delta: float) -> float:
        """:func:`epsilon_of` for the RDP accountant at ``delta``, each (sigma, q)'s one-step RDP computed once a run; an
        :class:`AccountantError` for a noise multiplier below :data:`RDP_MIN_SIGMA`, where Opacus's series is no number."""
        analysis = need("opacus.accountants.analysis.rdp", "privacy", "[privacy]")
        alphas = self._alphas()
        if any(sigma < RDP_MIN_SIGMA for sigma, _, _ in history):
            raise AccountantError(f"the {self.kind.upper()} accountant cannot account {_described(history)}: below noise multiplier {RDP_MIN_SIGMA:g} "
                                  "Opacus's RDP series overflows a float (or divides by 0) and never ends")
        for sigma, q, _ in history:
            if (sigma, q) not in self._step_rdp:
                self._step_rdp[(sigma, q)] = analysis.compute_rdp(q=float(q), noise_multiplier=float(sigma), steps=1, orders=alphas)
        rdp = sum([self._step_rdp[(sigma, q)] * int(n) for sigma, q, n in history])  # Opacus's sum, from 0, in order
        eps, _ = analysis.get_privacy_spent(orders=alphas, rdp=rdp, delta=delta)
        return float(eps)

    def _prv_epsilon(self, history: History) -> float:
        """:func:`epsilon_of` for the PRV accountant: Opacus's ``get_epsilon`` (its eps_upper) from Opacus's PRV parts, the
        domain's RDP bounds from the cached one-step RDPs, each distinct (sigma, q) discretised once."""
        prv = need("opacus.accountants.analysis.prv", "privacy", "[privacy]")
        entries = [(float(s), float(q), int(n)) for s, q, n in history]
        eps_error, delta_error = PRV_EPS_ERROR, self.delta / 1000
        domain = self.prv_domain(history)
        try:  # a noise so small that the discretised loss's mean misses the continuous one: Opacus's RuntimeError
            discrete: dict[tuple[float, float], Any] = {}
            for sigma, q, _ in entries:
                if (sigma, q) not in discrete:
                    truncated = prv.TruncatedPrivacyRandomVariable(prv.PoissonSubsampledGaussianPRV(q, sigma), domain.t_min, domain.t_max)
                    discrete[(sigma, q)] = prv.discretize(truncated, domain)
            composed = prv.compose_heterogeneous(dprvs=[discrete[(s, q)] for s, q, _ in entries], num_self_compositions=[n for _, _, n in entries])
            return float(composed.compute_epsilon(self.delta, delta_error, eps_error)[2])  # (lower, estimate, upper): Opacus reports the upper
        except (RuntimeError, MemoryError) as exc:
            raise AccountantError(f"the PRV accountant cannot account {_described(entries)} ({type(exc).__name__}: {exc})") from None

    def prv_domain(self, history: History) -> Any:
        """The grid Opacus's PRV accountant discretises ``history`` on (its ``_get_domain``), or an
        :class:`AccountantError` where it has more than :data:`PRV_MAX_POINTS` points (before any is allocated)."""
        prv = need("opacus.accountants.analysis.prv", "privacy", "[privacy]")
        entries = [(float(s), float(q), int(n)) for s, q, n in history]
        eps_error, delta_error = PRV_EPS_ERROR, self.delta / 1000
        total = sum(n for _, _, n in entries)
        # Gopi et al. 2021, Remark 5.6 as Opacus reads it (compute_safe_domain_size): the domain's half-width is the RDP
        # epsilon of the whole history at delta_error / 4, or of one step of an entry at delta_error / (8 * total) if
        # larger, at least eps_error, plus 3; the mesh eps_error / sqrt(total * log(12 / delta_error) / 2).
        with warnings.catch_warnings():  # see epsilon_of
            warnings.filterwarnings("ignore", message="Optimal order")
            warnings.filterwarnings("ignore", category=RuntimeWarning)
            half = self._rdp_epsilon(tuple(entries), delta_error / 4)
            for sigma, q, _ in entries:
                half = max(half, self._rdp_epsilon(((sigma, q, 1),), delta_error / (8 * total)))
        half = max(half, eps_error) + 3
        mesh = eps_error / np.sqrt(total * np.log(12 / delta_error) / 2)
        points = 2 * half / mesh  # create_aligned's size, but for its rounding to the mesh (and an inf half: no grid at all)
        if not points <= PRV_MAX_POINTS:
            raise GridTooLarge(f"the PRV accountant would discretise {_described(entries)} on {points:.3g} points, more than the "
                                  f"{PRV_MAX_POINTS:.3g} (about {PRV_MAX_POINTS * 160 / 2**30:.1f} GiB) it may take")
        try:
            return prv.Domain.create_aligned(-half, half, mesh)
        except RuntimeError:  # a mesh its float grid cannot hold to 1e-8
            raise AccountantError(f"the PRV accountant cannot lay a grid for {_described(entries)}") from None

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Each unit's history as a float64 [entries, 3] tensor (checkpoints hold tensors)."""
        return {unit: torch.tensor(h, dtype=torch.float64).reshape(-1, 3) for unit, h in self.histories.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.histories = {unit: tuple((float(s), float(q), int(n)) for s, q, n in t.tolist()) for unit, t in state.items()}


@functools.lru_cache(maxsize=64)
def history_refusal(delta: float, sigma: float, rate: float, steps: int, kind: str = "rdp", orders: Orders = "opacus") -> str | None:
    """Why the accountant gives no finite epsilon for a unit's planned history, ``steps`` releases at ``sigma`` and
    ``rate`` (None: it gives one at 1 step and at ``steps``), the shorter length first (cheaper): what the plan probes
    before round 1, so that a run never spends a budget it cannot state, nor learns after a round that it cannot.

    Why a non-finite epsilon is refused: the PRV accountant's bound overflows to infinity past :data:`PRV_MAX_EPSILON`
    (sigma 0.05 at q = 1: 284 at 1 step, 520 at 2, infinity at 3), the RDP one's where its RDP does. Why the first step
    too: under the PRV accountant success at n steps does not imply it at fewer, whose coarser mesh is what fails
    Opacus's discretisation (sigma 0.01 at q = 1: an error at 1 step, infinity at 2); under the RDP one it does (its RDP
    grows with the steps), and the first step costs nothing more (one ledger: its one-step RDP is the whole history's)."""
    ledger = Ledger(delta, kind, orders)
    for n in sorted({min(1, steps), steps}):
        unit = f"{n} steps"
        ledger.spend(unit, sigma, rate, n)
        try:
            epsilon = ledger.epsilon(unit)
        except AccountantError as exc:
            return str(exc)
        if not math.isfinite(epsilon):
            why = f"e^epsilon overflows a float past {PRV_MAX_EPSILON:.4g}" if kind == "prv" else "its RDP overflows a float"
            return f"the {kind.upper()} accountant gives no finite epsilon for noise multiplier {sigma:.4g} at sample rate {rate:.4g} over {n} steps ({why})"
    return None


def _described(entries: Sequence[tuple[float, float, int]]) -> str:
    """A history in words for a refusal: its smallest noise multiplier, largest rate and total steps."""
    return (f"noise multiplier {min(s for s, _, _ in entries):.4g} at sample rate {max(q for _, q, _ in entries):.4g} "
            f"over {sum(n for _, _, n in entries)} steps")


def finite(epsilon: float) -> float | None:
    """An epsilon as JSON can hold it (None for infinity)."""
    return epsilon if math.isfinite(epsilon) else None
