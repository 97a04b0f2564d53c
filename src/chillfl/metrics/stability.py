"""Stability measures of a loss trajectory (PA3Fed, Table 1 and Fig. 5).

For a curve ``L_1..L_n`` (one value per round the client trained, or per
round of the global model):

* standard deviation:     sqrt(mean((L_t - mean L)^2))
* moving-average std:     mean over every window of ``window`` consecutive
                          values of that window's standard deviation
                          (local volatility, with the trend removed)
* mean absolute deviation: mean(|L_t - mean L|)
* range:                   max L - min L
* maximum change rate:     max_t |L_t - L_{t-1}|  (per round)

Fig. 5 compares the loss standard deviation inside and outside the CLP:
:func:`inside_vs_outside_std` splits one trajectory by round flags, and
:func:`mean_inside_vs_outside_std` averages that over clients.

Choices
-------
* Population standard deviation (``ddof = 0``); ``ddof=1`` is available.
* The paper does not state the moving-average window; default 5 rounds.
  With fewer values than ``window`` the moving std is NaN.
* "Change rate" is read as the absolute change per round; ``relative=True``
  gives ``max_t |L_t - L_{t-1}| / |L_{t-1}|`` instead.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

MOVING_WINDOW = 5


def _array(losses: Sequence[float]) -> np.ndarray:
    arr = np.asarray(losses, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("a loss trajectory is one-dimensional")
    return arr


def standard_deviation(losses: Sequence[float], ddof: int = 0) -> float:
    arr = _array(losses)
    return float(arr.std(ddof=ddof)) if arr.size > ddof else math.nan


def moving_std(losses: Sequence[float], window: int = MOVING_WINDOW, ddof: int = 0) -> float:
    """Mean of the standard deviations of all length-``window`` sliding windows."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    arr = _array(losses)
    if arr.size < window or window <= ddof:
        return math.nan
    windows = np.lib.stride_tricks.sliding_window_view(arr, window)
    return float(windows.std(axis=1, ddof=ddof).mean())


def mean_absolute_deviation(losses: Sequence[float]) -> float:
    arr = _array(losses)
    return float(np.abs(arr - arr.mean()).mean()) if arr.size else math.nan


def value_range(losses: Sequence[float]) -> float:
    arr = _array(losses)
    return float(arr.max() - arr.min()) if arr.size else math.nan


def max_change_rate(losses: Sequence[float], relative: bool = False) -> float:
    """max_t |L_t - L_{t-1}| (or divided by |L_{t-1}| when ``relative``)."""
    arr = _array(losses)
    if arr.size < 2:
        return math.nan
    change = np.abs(np.diff(arr))
    if relative:
        change = change / np.abs(arr[:-1])
    return float(change.max())


def stability_measures(
    losses: Sequence[float], *, window: int = MOVING_WINDOW, ddof: int = 0, relative_change: bool = False
) -> dict[str, float]:
    """All five measures of Table 1 for one trajectory."""
    return {
        "std": standard_deviation(losses, ddof),
        "moving_std": moving_std(losses, window, ddof),
        "mad": mean_absolute_deviation(losses),
        "range": value_range(losses),
        "max_change_rate": max_change_rate(losses, relative_change),
    }


def inside_vs_outside_std(losses: Sequence[float], clp_flags: Sequence[bool], ddof: int = 0) -> tuple[float, float]:
    """(std of the losses at CLP rounds, std at the other rounds); NaN for an empty side (Fig. 5)."""
    arr = _array(losses)
    flags = np.asarray(clp_flags, dtype=bool)
    if flags.shape != arr.shape:
        raise ValueError(f"need one CLP flag per loss value, got {flags.size} flags for {arr.size} values")
    return standard_deviation(arr[flags], ddof), standard_deviation(arr[~flags], ddof)


def mean_inside_vs_outside_std(
    client_losses: Mapping[int, Mapping[int, float]], clp_by_round: Mapping[int, bool], ddof: int = 0
) -> tuple[float, float]:
    """Fig. 5: average over clients of :func:`inside_vs_outside_std`.

    ``client_losses[cid][round]`` is the client's loss in a round it trained;
    clients without values on a side are left out of that side's mean.
    """
    inside, outside = [], []
    for rounds in client_losses.values():
        order = sorted(rounds)
        s_in, s_out = inside_vs_outside_std([rounds[r] for r in order], [clp_by_round[r] for r in order], ddof)
        if not math.isnan(s_in):
            inside.append(s_in)
        if not math.isnan(s_out):
            outside.append(s_out)
    return _mean_or_nan(inside), _mean_or_nan(outside)


def _mean_or_nan(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan
