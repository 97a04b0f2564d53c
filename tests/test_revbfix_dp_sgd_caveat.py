"""Review rev99b, finding 6: dp-sgd's approximation clause said "a proven bound only where batch_size >= n_k" in every
caveat, a full-batch run's included (where it contradicted the "not a proven bound" it follows), and left out
n_k = batch_size + 1, one merged batch charged q = 1."""

from __future__ import annotations

from chillfl.privacy.mechanisms.dp_sgd import approximation, step_rates


def test_the_clause_is_conditional_and_names_the_merged_batch() -> None:
    clause = approximation(None, None)  # type: ignore[arg-type]  # it reads neither: it cannot see the clients' sizes
    assert "where its epoch is more than one batch (n_k > batch_size + 1" in clause and "only where" not in clause
    assert step_rates(17, 16, 2) == [(1.0, 2)] and step_rates(16, 16, 2) == [(1.0, 2)]  # the one-batch epochs: q = 1
