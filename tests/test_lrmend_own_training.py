"""The check before the run counts the run's own training (``client.epochs`` at the round's lr) only for a method that
runs it, and after the method's own limits.

pFedMe's clients never run that training: each batch is an inner problem of ``inner_steps`` steps on one batch at
``personal_lr`` (its declared stage), and the outer step is not a schedule's step. Its half says so
(:class:`~chillfl.extend.SkipsOwnTraining`), so it is no longer refused over the ``client.epochs`` count, and its inner
problem is still refused on ``algorithm.inner_steps`` (rev118b finding 3). Per-FedAvg refuses a schedule over local
steps outright (plain gradient steps): that line comes first, not the ``client.epochs`` count's on ``lr_gamma``, which
sent the user to the wrong field (rev118b finding 5).

Hand-worked values: 4 iid clients of 360 training rows (tests/test_lrline_stages.py), batch 32: 12 steps an epoch;
``lr_gamma = 1e-8``, ``lr_step_size = 1``: step k (0-based) at lr * 1e-8^k; from lr 0.5 step 6 trains at 0.5 * 1e-40,
below 2^-126 = 1.1755e-38, so the ``client.epochs`` count refuses. pFedMe's inner problem of 2 steps from
``personal_lr`` 0.1 ends at 0.1 * 1e-8 = 1e-9 (fine); of 6 steps at 0.1 * 1e-40 = 1e-41 (refused).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

from test_lrstage_stage_lr_floor import one_line

BASE = ('name = "s"\nseed = 0\n[dataset]\nname = "digits"\n[partition]\nname = "iid"\n[model]\nname = "mlp"\n'
        "[federation]\nnum_clients = 4\nclients_per_round = 4\nrounds = 1\n"
        '[client]\nepochs = 1\nbatch_size = 32\nlr = 0.5\nlr_schedule = "step"\nlr_schedule_over = "steps"\nlr_step_size = 1\nlr_gamma = 1e-8\n')


def run(tmp_path: Path, algorithm: str, *more: str) -> int:
    path = tmp_path / "c.toml"
    path.write_text(BASE + "[algorithm]\n" + algorithm)
    return main(["run", str(path), f"out_dir={tmp_path / 'out'}", "--quiet", *more])


def test_pfedme_is_not_refused_over_a_training_it_never_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, 'name = "pfedme"\ninner_steps = 2\npersonal_lr = 0.1\n', "--dry-run") == 0, capsys.readouterr().err


def test_pfedme_runs_a_round(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, 'name = "pfedme"\ninner_steps = 2\npersonal_lr = 0.1\n') == 0, capsys.readouterr().err


def test_pfedme_inner_problem_is_still_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, 'name = "pfedme"\ninner_steps = 6\npersonal_lr = 0.1\n', "--dry-run") == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_gamma: local step 6 of the 6 steps of the algorithm.inner_steps training (6 epochs over "), line
    assert line.endswith("raise client.lr_gamma or lower algorithm.inner_steps"), line


def test_fedavg_is_still_counted_over_client_epochs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, 'name = "fedavg"\n', "--dry-run") == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_gamma: local step 6 of the 12 a round takes (client.epochs = 1 over the largest client's 360 rows"), line


def test_perfedavg_is_refused_on_its_real_limit_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, 'name = "perfedavg"\n', "--dry-run") == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_schedule_over: Per-FedAvg's meta steps are plain gradient steps"), line


def test_the_declaration_is_public() -> None:
    from chillfl.aggregation.pfedme import PFedMeClient
    from chillfl.extend import PlansStages, SkipsOwnTraining

    half = PFedMeClient(frozenset(), 15.0, 5, 0.01)
    assert isinstance(half, PlansStages) and isinstance(half, SkipsOwnTraining) and not half.runs_own_training()
