"""FedChill temperature initialisation (Eq. 7) and adaptive decay (Algorithm 1, Eq. 8)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from chillfl.errors import ConfigError
from chillfl.options import parse_options
from chillfl.temperature.fedchill import (
    VARIANTS,
    ClientTemperatureState,
    FedChillHalf,
    FedChillOptions,
    FedChillPolicy,
    decay_step,
    initial_temperature,
)

# ------------------------------------------------------------------ Eq. 7


def test_initial_temperature_by_hand() -> None:
    assert initial_temperature(0.0) == pytest.approx(1.0)  # exp(0)
    assert initial_temperature(0.5, s=2.0) == pytest.approx(0.367879, abs=1e-6)  # exp(-1)
    assert initial_temperature(1.0, s=2.0) == pytest.approx(0.135335, abs=1e-6)  # exp(-2)
    assert initial_temperature(0.5, t_max=0.5, s=2.0) == pytest.approx(0.183940, abs=1e-6)  # 0.5 exp(-1)


def test_initial_temperature_clips_to_range() -> None:
    # exp(-4) = 0.0183 < T_min = 0.05 -> 0.05
    assert initial_temperature(1.0, t_min=0.05, s=4.0) == pytest.approx(0.05)
    # negative h would give exp(+) > T_max -> T_max
    assert initial_temperature(-1.0, t_max=1.0) == pytest.approx(1.0)


# ------------------------------------------------------------------ Algorithm 1


def _run(accuracies: list[float], t0: float = 1.0, **kwargs: object) -> tuple[list[float], list[int]]:
    state = ClientTemperatureState(temperature=t0)
    temps, counters = [], []
    for a in accuracies:
        state = decay_step(state, a, **kwargs)  # type: ignore[arg-type]
        temps.append(state.temperature)
        counters.append(state.counter)
    return temps, counters


ACC = [0.5, 0.6, 0.6, 0.55, 0.7, 0.7, 0.7, 0.6]


def test_decay_sequence_compare_previous() -> None:
    # P = 2, gamma = 0.5, T_min = 0.05; compare a_k with A[-2] (the previous round), |A| >= 3
    # r1 |A|=1 -> c0 | r2 |A|=2 -> c0 | r3 .6<=.6 c1 | r4 .55<=.6 c2 -> T=.5, c0
    # r5 .7>.55 c0 | r6 .7<=.7 c1 | r7 .7<=.7 c2 -> T=.25, c0 | r8 .6<=.7 c1
    temps, counters = _run(ACC, patience=2, gamma=0.5, t_min=0.05, compare="previous")
    assert temps == pytest.approx([1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25])
    assert counters == [0, 0, 1, 0, 0, 1, 0, 1]


def test_decay_sequence_compare_two_back() -> None:
    # compare a_k with A[-3] (two rounds ago)
    # r3 .6 vs .5 -> c0 | r4 .55 vs .6 -> c1 | r5 .7 vs .6 -> c0 | r6 .7 vs .55 -> c0
    # r7 .7 vs .7 -> c1 | r8 .6 vs .7 -> c2 -> T = .5, c0
    temps, counters = _run(ACC, patience=2, gamma=0.5, t_min=0.05, compare="two_back")
    assert temps == pytest.approx([1, 1, 1, 1, 1, 1, 1, 0.5])
    assert counters == [0, 0, 0, 1, 0, 0, 1, 0]


def test_short_history_never_counts() -> None:
    # even with P = 1 and equal accuracies, nothing happens before |A| = 3
    temps, counters = _run([0.4, 0.4, 0.4], patience=1, gamma=0.5, t_min=0.05)
    assert temps == pytest.approx([1.0, 1.0, 0.5])
    assert counters == [0, 0, 0]


def test_floor_behaviour() -> None:
    # T = 0.06 > 1.1 * 0.05 = 0.055 -> max(0.5 * 0.06, 0.05) = 0.05, counter reset;
    # then T = 0.05 <= 0.055: no decay and (Algorithm 1 line 15 is skipped) the counter keeps growing
    temps, counters = _run([0.3] * 7, t0=0.06, patience=2, gamma=0.5, t_min=0.05)
    assert temps == pytest.approx([0.06, 0.06, 0.06, 0.05, 0.05, 0.05, 0.05])
    assert counters == [0, 0, 1, 0, 1, 2, 3]
    # T = 0.054 is within 1.1 T_min: never decays although it is above T_min
    temps, _ = _run([0.3] * 6, t0=0.054, patience=1, gamma=0.5, t_min=0.05)
    assert temps == pytest.approx([0.054] * 6)
    # T = 0.056 > 0.055: one decay straight to the floor, max(0.028, 0.05) = 0.05
    temps, _ = _run([0.3] * 3, t0=0.056, patience=1, gamma=0.5, t_min=0.05)
    assert temps == pytest.approx([0.056, 0.056, 0.05])


def test_floor_margin_is_strict() -> None:
    # Algorithm 1 line 13 (and Sec. 3.4): decay only while T_{n,k} > 1.1 * T_min, a strict ">".
    # T_min = 0.5, T = 1.1 * 0.5 = 0.55 (the same double as the literal 0.55): at the margin, so no decay,
    # even though P = 1 is reached at round 3 (0.3 <= 0.3); a ">=" would give max(0.5 * 0.55, 0.5) = 0.5.
    temps, counters = _run([0.3] * 3, t0=1.1 * 0.5, patience=1, gamma=0.5, t_min=0.5)
    assert temps == [0.55, 0.55, 0.55]
    assert counters == [0, 0, 1]  # line 15's reset is inside the decay branch: not reached


def test_server_offer_uses_the_options_of_eq7() -> None:
    # 'minmax' makes the server compute T_{n,0}; it must use the configured T_max and s, not the defaults.
    # C = 2, uniform p_g: Eq. 6 raw = |2 p(0) - 1| + |2 p(1) - 1|: [2, 0] -> 2, [1, 1] -> 0, [3, 1] -> 0.5 + 0.5 = 1
    # minmax over (2, 0, 1): h = (1, 0, 0.5); Eq. 7 with T_max = 0.8, s = 1: 0.8 e^-1, 0.8, 0.8 e^-0.5
    # = 0.294304, 0.8, 0.485225 (the defaults T_max = 1, s = 2 would give 0.135335, 1, 0.367879)
    policy = FedChillPolicy(FedChillOptions(normalisation="minmax", t_max=0.8, s=1.0), np.array([[2, 0], [1, 1], [3, 1]]))
    offers = [policy.temperature(cid, 0) for cid in range(3)]
    assert offers == pytest.approx([0.8 * math.exp(-1.0), 0.8, 0.8 * math.exp(-0.5)], rel=1e-12)
    assert offers == pytest.approx([0.294304, 0.8, 0.485225], abs=1e-6)


def test_decay_step_is_pure() -> None:
    state = ClientTemperatureState(temperature=1.0, history=[0.5, 0.5], counter=0)
    new = decay_step(state, 0.5, patience=1, gamma=0.5, t_min=0.05)
    assert new.temperature == pytest.approx(0.5)
    assert state.history == [0.5, 0.5] and state.temperature == 1.0 and state.counter == 0
    assert new.history == [0.5, 0.5, 0.5]


# ------------------------------------------------------------------ options


def test_options_defaults_follow_the_paper() -> None:
    o = FedChillOptions()
    assert (o.t_max, o.t_min, o.s, o.patience, o.compare) == (1.0, 0.05, 2.0, 2, "previous")
    assert o.gamma in (0.8, 0.95)


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"gamma": 1.0}, "temperature.gamma"),
        ({"t_min": 0.0}, "temperature.t_min"),
        ({"t_max": 0.01}, "temperature.t_max"),
        ({"patience": 0}, "temperature.patience"),
        ({"measure": "emd"}, "temperature.measure"),
        ({"normalisation": "none"}, "temperature.normalisation"),
        ({"compare": "three_back"}, "temperature.compare"),
        ({"t_start": 2.0}, "temperature.t_start"),
        ({"p_g": [0.5, 0.0]}, "temperature.p_g"),
        ({"tmax": 1.0}, "temperature.tmax"),
    ],
)
def test_options_validation(table: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(FedChillOptions, table, "temperature")
    assert info.value.field == field


# ------------------------------------------------------------------ the client half and the server half

COUNTS = np.array([[5, 5, 5], [3, 1, 0], [0, 0, 6]])
# ratio scores (C = 3, max 4): 0, 2.5/4 = 0.625, 1 -> T0 = 1, exp(-1.25) = 0.286505, exp(-2) = 0.135335


def labels(row: np.ndarray) -> torch.Tensor:
    """Training labels with exactly ``row[k]`` samples of class k (what the client counts)."""
    return torch.cat([torch.full((int(n),), k, dtype=torch.long) for k, n in enumerate(row)])


def run_half(half: FedChillHalf, accuracies: list[float], y: torch.Tensor = torch.zeros(1, dtype=torch.long)) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The temperatures a client trains at over its participations, and its final state (what its runtime keeps)."""
    state: dict[str, torch.Tensor] = {}
    trained = []
    for acc in accuracies:
        t = half.temperature(state, math.nan, y)
        trained.append(t)
        state = half.finish(state, t, acc)
    return trained, state


def test_half_start_temperature_from_the_clients_own_labels() -> None:
    half = FedChillPolicy(FedChillOptions()).client_half(num_classes=3)
    starts = [half.temperature({}, math.nan, labels(row)) for row in COUNTS]
    np.testing.assert_allclose(starts, [1.0, 0.286505, 0.135335], atol=1e-6)
    # a class the client lacks still counts (bincount's minlength): (3, 1, 0) scores 0.625, not the 2-class 0.5 -> exp(-1) = 0.367879
    assert half.temperature({}, math.nan, labels(COUNTS[1])) != pytest.approx(math.exp(-1.0), abs=1e-3)
    assert half.temperature({}, 0.7, labels(COUNTS[1])) == 0.7  # an offer from the server wins (minmax, size)
    decay_only = FedChillPolicy(FedChillOptions(**VARIANTS["decay_only"], t_start=0.5)).client_half(3)
    assert [decay_only.temperature({}, math.nan, labels(row)) for row in COUNTS] == [0.5, 0.5, 0.5]


def test_half_decays_after_patience_stagnant_rounds() -> None:
    # P = 2, gamma = 0.5 from T = 1 (init off): the states after each step are test_decay_sequence_compare_previous's
    # (1, 1, 1, .5, .5, .5, .25, .25); the client trains at the state before the step, its start first
    half = FedChillPolicy(FedChillOptions(init=False, patience=2, gamma=0.5)).client_half(3)
    trained, state = run_half(half, ACC)
    assert trained == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25]
    assert list(state) == ["fedchill.temperature", "fedchill.history", "fedchill.counter"]
    assert state["fedchill.temperature"].item() == 0.25 and state["fedchill.counter"].item() == 1
    assert state["fedchill.history"].tolist() == ACC[-3:] and state["fedchill.history"].dtype == torch.float64  # A_n's last 3, exact


def test_half_stops_at_the_t_min_floor() -> None:
    # T = .06 > 1.1 * .05: the third stagnant step sets max(.5 * .06, .05) = .05; then T <= .055 never decays,
    # and the counter keeps counting (1, 2) as Algorithm 1 has it
    half = FedChillPolicy(FedChillOptions(init=False, t_start=0.06, patience=1, gamma=0.5, t_min=0.05)).client_half(3)
    trained, state = run_half(half, [0.3] * 5)
    assert trained == [0.06, 0.06, 0.06, 0.05, 0.05]
    assert state["fedchill.temperature"].item() == 0.05 and state["fedchill.counter"].item() == 2


def test_half_state_is_the_clients_own_and_survives_skipped_rounds() -> None:
    # client 1 starts at exp(-1.25) from its labels; after 3 flat participations (P = 1) it is at .5 of that,
    # however many rounds it skips in between: its state comes back with it
    half = FedChillPolicy(FedChillOptions(patience=1, gamma=0.5)).client_half(3)
    trained, state = run_half(half, [0.5, 0.5, 0.5], labels(COUNTS[1]))
    assert trained == [pytest.approx(0.286505, abs=1e-6)] * 3
    assert half.temperature(state, 0.9, labels(COUNTS[1])) == pytest.approx(0.5 * 0.286505, abs=1e-6)  # the state wins over any offer
    init_only = FedChillPolicy(FedChillOptions(**VARIANTS["init_only"])).client_half(3)
    assert run_half(init_only, [0.1] * 5, labels(COUNTS[2])) == ([pytest.approx(math.exp(-2))] * 5, {})  # no decay: nothing to keep
    kept = half.finish(state, 0.1, None)  # no accuracy: the state is kept as it is (the server stops the run)
    assert {k: v.tolist() for k, v in kept.items()} == {k: v.tolist() for k, v in state.items()}
    assert half.finish({}, 0.3, None) == {}


def test_server_policy_holds_no_client_state_and_reads_counts_only_for_the_federation() -> None:
    reads: list[int] = []

    def counts() -> np.ndarray:
        reads.append(1)
        return COUNTS

    policy = FedChillPolicy(FedChillOptions(patience=1, gamma=0.5), counts)
    before = dict(vars(policy))
    for r in range(4):
        assert math.isnan(policy.temperature(1, r))  # no offer: the client computes its own start
        policy.observe(1, r, 0.5)
    assert vars(policy) == before and policy.state_dict() == {} and reads == []
    # minmax over raw ratio scores (0, 2.5, 4): 0, .625, 1 -> Eq. 7 as with 'max'; the server offers it
    fed = FedChillPolicy(FedChillOptions(normalisation="minmax"), counts)
    assert reads == [1]
    np.testing.assert_allclose([fed.temperature(c, 0) for c in range(3)], [1.0, 0.286505, 0.135335], atol=1e-6)
    # without client 0, (2.5, 4) -> 0, 1: client 1 starts at T_max
    assert FedChillPolicy(FedChillOptions(normalisation="minmax"), COUNTS[1:]).temperature(0, 0) == 1.0
    np.testing.assert_allclose(FedChillPolicy(FedChillOptions(), COUNTS).initial_heterogeneity, [0.0, 0.625, 1.0])


def test_policy_errors() -> None:
    policy = FedChillPolicy(FedChillOptions(), COUNTS)
    with pytest.raises(ConfigError, match="temperature.decay"):
        policy.observe(0, 0, None)
    with pytest.raises(KeyError):
        FedChillPolicy(FedChillOptions(measure="size"), COUNTS).temperature(3, 0)
    with pytest.raises(ConfigError, match="temperature.p_g"):
        FedChillPolicy(FedChillOptions(p_g=[0.5, 0.5]), COUNTS)
    with pytest.raises(ConfigError, match="temperature.p_g"):
        FedChillPolicy(FedChillOptions(p_g=[0.5, 0.5])).client_half(3)
    with pytest.raises(ValueError, match="older chillfl"):
        policy.load_state_dict({"clients": {"0": {"temperature": 0.5, "history": [0.5], "counter": 0}}})
    policy.load_state_dict({})


def test_p_g_of_the_wrong_length_exits_2_before_anything_is_written(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """len(p_g) is checked against the data's classes when the experiment is built, before the run folder exists."""
    from chillfl.cli import main

    path = tmp_path / "bad.toml"
    path.write_text(f'out_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n[temperature]\npolicy = "fedchill"\np_g = [0.5, 0.5]\n', encoding="utf-8")
    assert main(["run", str(path), "--quiet", "federation.num_clients=4", "federation.rounds=1"]) == 2
    err = capfd.readouterr().err
    assert len(err.splitlines()) == 1 and "temperature.p_g" in err, err
    assert not (tmp_path / "out").exists()


def test_the_policy_reads_validation_accuracy_where_the_run_has_it() -> None:
    """FedChill's stagnation test reads the client's validation split when there is one (its evaluation split is test rows)."""
    import math

    from chillfl.protocols.common import policy_accuracy

    assert policy_accuracy(0.75, None) == 0.75  # no validation splits: the evaluation split
    assert policy_accuracy(0.75, 0.5) == 0.5  # a validation split: it, never the test rows
    assert policy_accuracy(0.75, math.nan) is None  # an empty validation split measures nothing: the state is kept
    assert policy_accuracy(None, None) is None


def test_federation_scores_leave_clients_without_rows_out() -> None:
    # a partition with min_size = 0 may leave a client empty; it never trains (no_data), and 'minmax' / 'size'
    # used to refuse the whole run ("a client has no samples") while 'max' ran. Raw ratio scores of the
    # non-empty rows: 0, 2.5, 4 -> minmax 0, .625, 1, as without the empty row.
    counts = np.array([[5, 5, 5], [0, 0, 0], [3, 1, 0], [0, 0, 6]])
    h = FedChillPolicy(FedChillOptions(normalisation="minmax"), counts).initial_heterogeneity
    np.testing.assert_allclose(h[[0, 2, 3]], [0.0, 0.625, 1.0])
    assert math.isnan(h[1])
    policy = FedChillPolicy(FedChillOptions(normalisation="minmax"), counts)
    assert math.isnan(policy.temperature(1, 0))  # no offer for it
    np.testing.assert_allclose([policy.temperature(c, 0) for c in (0, 2, 3)], [1.0, 0.286505, 0.135335], atol=1e-6)
    # size: 1 - n / max n over the clients with rows (15, 4, 6) -> 0, 11/15, 9/15
    sized = FedChillPolicy(FedChillOptions(measure="size"), counts).initial_heterogeneity
    np.testing.assert_allclose(sized[[0, 2, 3]], [0.0, 11 / 15, 9 / 15])
    with pytest.raises(ConfigError, match="no client has a training sample"):
        FedChillPolicy(FedChillOptions(normalisation="minmax"), np.zeros((2, 3)))


def test_a_run_whose_decay_reads_test_rows_says_so_once_on_stderr(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Without a validation split FedChill's decay reads each client's evaluation split (test rows): one note on stderr,
    once a process (a comparison's runs share it), and the steering caveat under a comparison's table; no note with a
    validation split or with the decay off."""
    from chillfl import once
    from chillfl.cli import main

    path = tmp_path / "fedchill.toml"
    path.write_text(f'out_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n[temperature]\npolicy = "fedchill"\n'
                    '[variants.a]\n"temperature.gamma" = 0.9\n[variants.b]\n"temperature.gamma" = 0.8\n', encoding="utf-8")
    small = ["federation.num_clients=4", "federation.rounds=1", "--quiet"]
    once.forget()
    assert main(["compare", str(path), *small]) == 0
    printed = capfd.readouterr()
    assert "\n\nsteering caveat: FedChill's decay (temperature.decay = true) in 'a', 'b' reads each client's accuracy" in printed.out  # under the table too
    notes = [line for line in printed.err.splitlines() if "note:" in line]
    assert notes == ["chillfl: note: FedChill's decay (temperature.decay = true) reads each client's accuracy on its evaluation split, "
                     "drawn from the test rows the run reports (eval.validation = 0): test rows steer training; "
                     "eval.validation = 0.2 keeps them out"]
    one = tmp_path / "one.toml"
    one.write_text(f'out_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n[temperature]\npolicy = "fedchill"\n', encoding="utf-8")
    for quiet in ("eval.validation=0.2", "temperature.decay=false"):
        once.forget()
        assert main(["run", str(one), *small, quiet, f"name=quiet-{quiet[:4]}"]) == 0
        assert "note:" not in capfd.readouterr().err
    once.forget()
    assert main(["run", str(one), *small, "name=noted"]) == 0  # the same run with the decay on test rows: noted
    assert sum("note:" in line for line in capfd.readouterr().err.splitlines()) == 1
