"""FedChill keeps the last three entries of each client's accuracy history A_n: what Algorithm 1 reads, so its
decisions are the whole history's, and a client's state (and every checkpoint) stays the same size over a long run."""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.temperature.fedchill import (
    ClientTemperatureState,
    FedChillOptions,
    FedChillPolicy,
    decay_step,
    from_entries,
)

SEQUENCES: dict[str, list[float]] = {
    "plateaus": [0.1, 0.2, 0.2, 0.2, 0.3, 0.3, 0.25, 0.4, 0.4, 0.4, 0.4, 0.5, 0.45, 0.45, 0.6, 0.6, 0.6, 0.6, 0.6, 0.7],
    "zigzag": [0.5, 0.4, 0.6, 0.5, 0.7, 0.6, 0.8, 0.7, 0.9, 0.8, 0.85, 0.85, 0.9, 0.9, 0.91, 0.2],
    "nan and ties": [0.3, math.nan, 0.3, 0.3, math.nan, math.nan, 0.4, 0.4, 0.4, 0.1, 0.1, 0.1, 0.1],
    "stagnant to the floor": [0.5] * 80,
    "rising": [i / 100 for i in range(40)],
}
KEPT_HISTORY = 3
"""A_n[-1] against A_n[-2] or A_n[-3], once |A_n| >= 3: the last three entries."""


def whole_history(accuracies: list[float], t0: float, patience: int, gamma: float, t_min: float, back: int) -> list[tuple[float, int]]:
    """Algorithm 1 (App. A.1) on the whole A_n, written out here as the oracle: (T, counter) after each step."""
    history: list[float] = []
    temperature, counter, out = t0, 0, []
    for a in accuracies:
        history.append(a)
        counter = counter + 1 if len(history) >= 3 and history[-1] <= history[-back] else 0
        if counter >= patience and temperature > 1.1 * t_min:
            temperature, counter = max(gamma * temperature, t_min), 0
        out.append((temperature, counter))
    return out


@pytest.mark.parametrize("compare", ["previous", "two_back"])
@pytest.mark.parametrize("patience", [1, 2, 3])
@pytest.mark.parametrize("name", list(SEQUENCES))
def test_the_kept_history_decides_as_the_whole_history(name: str, patience: int, compare: str) -> None:
    accuracies = SEQUENCES[name]
    expected = whole_history(accuracies, 1.0, patience, 0.8, 0.05, 2 if compare == "previous" else 3)
    state = ClientTemperatureState(temperature=1.0)
    got = []
    for k, a in enumerate(accuracies):
        state = decay_step(state, a, patience=patience, gamma=0.8, t_min=0.05, compare=compare)  # type: ignore[arg-type]
        got.append((state.temperature, state.counter))
        assert len(state.history) == min(k + 1, KEPT_HISTORY)
        assert [str(x) for x in state.history] == [str(x) for x in accuracies[: k + 1][-KEPT_HISTORY:]]  # NaN-safe equality
    assert got == expected
    assert any(t < 1.0 for t, _ in expected) or name == "rising" or patience > 1  # the decays happen


def test_a_clients_state_stays_three_entries_long_over_many_rounds() -> None:
    """Each participation appended one float64 to the client's ``fedchill.history`` (and so to every checkpoint)."""
    half = FedChillPolicy(FedChillOptions(init=False, patience=2, gamma=0.9)).client_half(3)
    state: dict[str, torch.Tensor] = {}
    t = half.temperature(state, math.nan, torch.tensor([0, 1, 2]))
    for k in range(200):
        state = dict(half.finish(state, t, 0.5 + 0.001 * (k // 3 % 2)))
        t = half.temperature(state, math.nan, torch.tensor([0, 1, 2]))
        assert state["fedchill.history"].shape == (min(k + 1, KEPT_HISTORY),)
    assert t < 1.0


@pytest.mark.parametrize("compare", ["previous", "two_back"])
def test_an_older_checkpoints_whole_history_is_cut_and_decides_the_same(compare: str) -> None:
    """A client state written by an older chillfl holds A_n whole: read, it is cut to its last entries, and the next
    steps are those of the whole history."""
    accuracies = SEQUENCES["plateaus"]
    old = {  # the state after the first 14 steps, as the older chillfl kept it
        "fedchill.temperature": torch.tensor(whole_history(accuracies[:14], 1.0, 1, 0.8, 0.05, 2 if compare == "previous" else 3)[-1][0], dtype=torch.float64),
        "fedchill.history": torch.tensor(accuracies[:14], dtype=torch.float64),
        "fedchill.counter": torch.tensor(whole_history(accuracies[:14], 1.0, 1, 0.8, 0.05, 2 if compare == "previous" else 3)[-1][1], dtype=torch.int64),
    }
    loaded = from_entries(old)
    assert loaded is not None and loaded.history == accuracies[11:14]
    half = FedChillPolicy(FedChillOptions(init=False, patience=1, gamma=0.8, compare=compare)).client_half(3)  # type: ignore[arg-type]
    state: dict[str, torch.Tensor] = old
    got = []
    for a in accuracies[14:]:
        t = half.temperature(state, math.nan, torch.tensor([0]))
        state = dict(half.finish(state, t, a))
        got.append((state["fedchill.temperature"].item(), state["fedchill.counter"].item()))
        assert state["fedchill.history"].shape == (KEPT_HISTORY,)
    assert got == whole_history(accuracies, 1.0, 1, 0.8, 0.05, 2 if compare == "previous" else 3)[14:]
