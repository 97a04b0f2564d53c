"""A run a callback stops at a round ``eval.every`` skips (or a skipped round): its summary's stop-round evaluation
takes every measure an evaluated round's record holds, of the model it stops with, through the seams the rounds
use: a soft-label server's ``server_acc``/``server_loss`` aliases (its :class:`EvaluatesNow`) and an attack's
``attack_success_rate`` (:class:`MeasuresNow`), not an earlier round's (or none) beside the stop round's accuracy."""

from __future__ import annotations

from typing import Any

import chillfl
from chillfl.config import load_config
from chillfl.experiment import build_experiment, build_protocol
from chillfl.plots.stop import STOP_EVALUATION
from chillfl.protocols.common import Evaluation
from chillfl.runner import stop_evaluated
from chillfl.training.local import evaluate

BASE: dict[str, Any] = {
    "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "federation": {"num_clients": 4, "rounds": 6},
    "eval": {"every": 4, "client_split_size": 20}, "checkpoint": {"every": 0}, "seed": 5,
}
SOFT = {"distillation": {"method": "scarlet", "public_size": 60, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32}}
BACKDOOR = {"attack": {"kind": "backdoor", "fraction": 0.2, "target": 0, "clients": [1]}}


def stop_at_2(record: dict[str, Any], run: Any) -> None:
    if record["round"] == 2:
        run.stop("plateau")


def test_a_soft_label_servers_aliases_are_measured_at_the_stop_round() -> None:
    """The stop round's evaluation, by the protocol's own measure: ``server_acc``/``server_loss`` beside ``global_acc``
    (they were absent: the summary's records held an earlier round's aliases, or none, beside the stop round's accuracy)."""
    exp = build_experiment(load_config(None, {**BASE, **SOFT}))
    protocol = build_protocol(exp)
    try:
        records = [{"round": 1, "train_loss": 1.0}]  # a round eval.every skipped
        last = stop_evaluated(exp, exp.config, protocol, records)[-1]
        state = protocol.global_state()
        assert state is not None
        by_hand = Evaluation(exp.config, exp.data, exp.model, exp.device).metrics(state)
        assert last["global_acc"] == by_hand["global_acc"] == last["server_acc"]
        assert last["global_loss"] == by_hand["global_loss"] == last["server_loss"]
        assert records == [{"round": 1, "train_loss": 1.0}]  # the records themselves (metrics.jsonl's) untouched
    finally:
        protocol.close()


def test_a_stopped_soft_label_run_reports_its_stop_rounds_server_accuracy() -> None:
    """End to end: the stopped run's summary holds the round-2 server model's aliases, those a 2-round run records
    at its (evaluated) last round: the same model, the same measure."""
    full = chillfl.run(config={**BASE, **SOFT, "federation": {"num_clients": 4, "rounds": 2}}, write=False, progress=False)
    stopped = chillfl.run(config={**BASE, **SOFT}, callbacks=[stop_at_2], write=False, progress=False)
    assert "server_acc" not in stopped.records[-1] and stopped.summary["stopped"]["round"] == 2
    evaluated = stopped.summary[STOP_EVALUATION]
    assert evaluated["server_acc"] == full.records[-1]["server_acc"] == stopped.summary["final_global_acc"]
    assert evaluated["server_loss"] == full.records[-1]["server_loss"] == stopped.summary["final_global_loss"]


def test_an_attacks_success_is_measured_at_a_stop_round_that_recorded_none() -> None:
    """A skipped stop round records no ``attack_success_rate``: the summary's final one was an earlier round's beside
    the stop round's accuracy. It is now the stopped model's, on the attack's probe, as a round measures it."""
    exp = build_experiment(load_config(None, {**BASE, **BACKDOOR}))
    protocol = build_protocol(exp)
    try:
        probe = protocol.probe
        state = protocol.global_state()
        assert probe is not None and state is not None
        x, y = probe
        success = evaluate(exp.model, state, x, y, exp.config.eval.batch_size)[0]
        records = [{"round": 1, "train_loss": 1.0, "attack_success_rate": 0.5}, {"round": 2, "skipped": True, "attackers": []}]
        summarized = stop_evaluated(exp, exp.config, protocol, records)
        assert summarized[-1]["attack_success_rate"] == success and "global_acc" in summarized[-1]
        assert summarized[0] == records[0] and "attack_success_rate" not in records[-1]

        kept = [{"round": 2, "train_loss": 1.0, "attack_success_rate": 0.25}]  # measured in its round: metrics.jsonl's value stays
        assert stop_evaluated(exp, exp.config, protocol, kept)[-1]["attack_success_rate"] == 0.25
    finally:
        protocol.close()


def test_an_attacks_stop_measure_keeps_its_inner_protocols_own() -> None:
    """The attack wraps the run's protocol: where that one measures at the stop round too (a :class:`MeasuresNow`), its
    measures stand beside the attack's success. No built-in nests one today, so a stand-in inner protocol says so."""
    exp = build_experiment(load_config(None, {**BASE, **BACKDOOR}))
    protocol = build_protocol(exp)
    real = protocol.inner

    class Measuring:
        def global_state(self) -> Any:
            return real.global_state()

        def measure_now(self) -> dict[str, Any]:
            return {"inner_measure": 0.75}

    try:
        x, y = protocol.probe
        success = evaluate(exp.model, protocol.global_state(), x, y, exp.config.eval.batch_size)[0]
        protocol.inner = Measuring()
        assert protocol.measure_now() == {"inner_measure": 0.75, "attack_success_rate": success}
    finally:
        protocol.inner = real
        protocol.close()
