"""The step-lr floor check runs over the *largest* client's rows: that client takes the most local steps, so its last
step's lr is the run's least (:meth:`ClientConfig.check_step_lr_floor`). A run that passed the smallest client's, the
first client's or the dataset's total rows let a schedule through that took the largest client's later steps below the
floor, or refused a sound one. Checked on a Dirichlet(0.1) split, whose clients' sizes differ widely."""

from __future__ import annotations

import pytest

from chillfl.config import ClientConfig, load_config
from chillfl.experiment import build_experiment


def test_the_run_checks_the_step_lr_floor_over_the_largest_clients_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # lr 0.01 * 0.5^k stays far above the floor over any client's steps here: the run builds, and the spy sees what it passed
    seen: list[int] = []
    real = ClientConfig.check_step_lr_floor

    def spy(self: ClientConfig, rounds: int, rows: int, section: str) -> None:
        seen.append(rows)
        real(self, rounds, rows, section)

    monkeypatch.setattr(ClientConfig, "check_step_lr_floor", spy)
    config = load_config(None, {"dataset.name": "digits", "model.name": "mlp", "partition.name": "dirichlet", "partition.alpha": 0.1,
                                "federation.num_clients": 4, "federation.clients_per_round": 4, "federation.rounds": 1,
                                "client.lr_schedule": "step", "client.lr_schedule_over": "steps", "client.lr_gamma": 0.5})
    sizes = [int(n) for n in build_experiment(config).data.train_sizes()]
    assert len(set(sizes)) > 1 and sizes[0] != max(sizes)  # skewed: the largest is neither the smallest nor the first
    assert seen == [max(sizes)]  # seed 0: [292, 279, 197, 670]; not min(sizes), sizes[0] nor sum(sizes)
