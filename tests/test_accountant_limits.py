"""Budgets the accountants cannot turn into a noise or an epsilon end as one line on the field that set them, before
anything is written: a target_epsilon so large that Opacus's sigma search never ended (the run hung before it started),
and a noise so small that the PRV accountant's discretisation raised mid-run (a traceback, a ``.partial`` folder) or
asked for more memory than the machine has (the kernel killed the run)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.privacy import accounting
from chillfl.privacy.accounting import AccountantError, Ledger, epsilon_of, noise_for

pytest.importorskip("opacus")

RUN = """name = "limits"
seed = 0
threads = 1
device = "cpu"
out_dir = "{out}"
[federation]
num_clients = 4
rounds = {rounds}
[client]
batch_size = 32
lr = 0.05
[eval]
client_split_size = 20
[dataset]
name = "digits"
[model]
name = "mlp"
hidden = [8]
[privacy]
mechanism = "{mechanism}"
{privacy}
"""


SOFT_LABELS = """[distillation]
method = "dsfl"
public_size = 400
subset_size = 400
"""


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], privacy: str, rounds: int = 1, more: str = "", mechanism: str = "dp-fedavg") -> tuple[int, list[str]]:
    path = tmp_path / "run.toml"
    path.write_text(RUN.format(out=tmp_path / "out", rounds=rounds, privacy=privacy, mechanism=mechanism) + more, encoding="utf-8")
    code = main(["run", str(path), "--quiet"])
    return code, capsys.readouterr().err.splitlines()


def test_a_huge_target_epsilon_ends_with_the_sigma_that_spends_it(guard: Any) -> None:
    # At q = 1 the subsampled Gaussian's RDP is alpha / (2 sigma^2), and at epsilon 1e20 the conversion's other terms
    # (log((a-1)/a) - (log delta + log a) / (a - 1), |.| < 200 at a = 1.1) are below the float's spacing there (16384),
    # so the best order is the smallest, 1.1, and epsilon = 1.1 / (2 sigma^2): sigma = sqrt(1.1 / 2e20) = 7.4162e-11.
    # Opacus's absolute tolerance of 0.01 asked its bisection for epsilons 0.01 apart where floats are 16384 apart: it
    # never ended. The tolerance is now 1e-9 of the target there.
    sigma = noise_for(1e20, 1e-5, 1.0, 1)
    assert sigma == pytest.approx(math.sqrt(1.1 / 2e20), rel=1e-6)
    spent = epsilon_of(((sigma, 1.0, 1),), 1e-5)
    assert 1e20 * (1 - 1e-9) <= spent <= 1e20


def test_an_ordinary_target_finds_opacus_own_sigma() -> None:
    # below 1e7 the tolerance is Opacus's 0.01: the search, and so every sigma a run used, is unchanged
    from opacus.accountants.utils import get_noise_multiplier

    for target, q, steps in ((4.0, 0.5, 3), (1e6, 1.0, 2)):
        assert noise_for(target, 1e-5, q, steps) == get_noise_multiplier(target_epsilon=target, target_delta=1e-5, sample_rate=q, steps=steps, accountant="rdp", alphas=None)


def test_a_run_with_a_huge_target_epsilon_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str], guard: Any) -> None:
    code, err = run(tmp_path, capsys, "target_epsilon = 1e20")
    assert (code, err) == (0, [])


def test_the_prv_grid_is_opacus_own_and_a_history_past_the_cap_is_refused_before_allocating() -> None:
    # the ledger's grid is Opacus's PRVAccountant._get_domain's, point for point
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV

    def opacus_size(sigma: float, q: float, steps: int) -> int:
        return int(PRVAccountant()._get_domain(prvs=[PoissonSubsampledGaussianPRV(q, sigma)], num_self_compositions=[steps], eps_error=0.01, delta_error=1e-8).size)

    ledger = Ledger(1e-5, "prv")
    assert ledger.prv_domain(((1.0, 1.0, 3),)).size == opacus_size(1.0, 1.0, 3)
    # sigma 0.1 at q = 1 over 100 steps: 3.7e7 points (Opacus allocates ~6 GiB for them); refused, nothing allocated
    assert opacus_size(0.1, 1.0, 100) > accounting.PRV_MAX_POINTS
    ledger.spend("unit", 0.1, 1.0, 100)
    with pytest.raises(AccountantError, match=r"noise multiplier 0\.1 at sample rate 1 over 100 steps on 3\.68e\+07 points"):
        ledger.epsilon()


def test_a_noise_the_prv_accountant_cannot_discretise_is_one_line_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # sigma 0.01 at q = 1: Opacus's discretisation raises "Discrete mean differs significantly from continuous mean";
    # it did so after the first round, a traceback with a .partial folder left behind
    code, err = run(tmp_path, capsys, 'accountant = "prv"\nnoise_multiplier = 0.01')
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("chillfl: error: privacy.noise_multiplier: the PRV accountant cannot account noise multiplier 0.01 at sample rate 1 over 1 steps")
    assert err[0].endswith("raise noise_multiplier, or use accountant = 'rdp'")
    assert not (tmp_path / "out").exists()


def test_a_prv_grid_too_large_for_memory_is_one_line_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 100 rounds at sigma 0.1, every client every round: the last rounds' epsilon needed 3.7e7 points (6 GiB)
    code, err = run(tmp_path, capsys, 'accountant = "prv"\nnoise_multiplier = 0.1', rounds=100)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("chillfl: error: privacy.noise_multiplier: the PRV accountant would discretise noise multiplier 0.1 at sample rate 1 over 100 steps")
    assert not (tmp_path / "out").exists()


def test_a_target_too_large_for_the_prv_accountant_is_one_line_on_target_epsilon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # epsilon 500 in one round at q = 1 needs sigma ~ 0.02, where the PRV discretisation fails: said on target_epsilon,
    # with the way out (a smaller target, or the RDP accountant), not "raise target_epsilon"
    code, err = run(tmp_path, capsys, 'accountant = "prv"\ntarget_epsilon = 500.0')
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("chillfl: error: privacy.target_epsilon: 500.0 at delta = 1e-05 over the planned 1 rounds: the PRV accountant cannot account")
    assert err[0].endswith("lower target_epsilon, or use accountant = 'rdp'")
    assert not (tmp_path / "out").exists()


def test_a_target_above_the_largest_prv_epsilon_is_one_line_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], guard: Any) -> None:
    # The PRV accountant's estimate takes e^epsilon: past log(float max) + eps_error = 709.79 it reports infinity, so no
    # sigma spends 1,000. Opacus's search bisected for ever at q = 1 over 100 steps (the run hung before it started; the
    # guard's alarm fails the test if that comes back); the old 1-round case failed in the discretisation instead.
    assert accounting.PRV_MAX_EPSILON == pytest.approx(math.log(1.7976931348623157e308) + 0.01, abs=1e-12)  # 709.7927
    assert math.isinf(epsilon_of(((0.29, 1.0, 100),), 1e-5, "prv")) and epsilon_of(((0.2975, 1.0, 100),), 1e-5, "prv") < accounting.PRV_MAX_EPSILON
    with pytest.raises(AccountantError, match=r"reports no epsilon above 709\.79"):
        noise_for(1000.0, 1e-5, 1.0, 100, "prv")
    code, err = run(tmp_path, capsys, 'accountant = "prv"\ntarget_epsilon = 1000.0', rounds=100)
    assert code == 2 and len(err) == 1, err
    assert err[0] == ("chillfl: error: privacy.target_epsilon: 1000.0 at delta = 1e-05 over the planned 100 rounds: the PRV accountant reports no epsilon "
                      "above 709.79 (e^epsilon overflows a float); lower target_epsilon, or use accountant = 'rdp'")
    assert not (tmp_path / "out").exists()


def test_the_prv_search_is_opacus_own_sigma(guard: Any) -> None:
    # the PRV search is Opacus's bisection on the ledger's epsilon (Opacus's PRVAccountant's, bit for bit): the same sigma
    from opacus.accountants.utils import get_noise_multiplier

    for target, q, steps in ((3.25, 0.3, 7), (20.0, 1.0, 100)):
        with warnings.catch_warnings():  # Opacus's own: "Optimal order", and log(1 - q) at q = 1
            warnings.simplefilter("ignore")
            theirs = get_noise_multiplier(target_epsilon=target, target_delta=1e-5, sample_rate=q, steps=steps, accountant="prv", epsilon_tolerance=0.01,
                                          eps_error=0.01, delta_error=1e-8)
        assert accounting._prv_search(target, 1e-5, q, steps, 0.01, 1e6) == theirs


def test_the_prv_search_steps_over_a_grid_too_large_and_refuses_a_target_whose_own_grid_is(monkeypatch: pytest.MonkeyPatch, guard: Any) -> None:
    # target 20 at q = 1 over 100 steps: Opacus's bisection tries sigma 20, 10, 5, 2.5, 3.75, 3.125, 2.8125, ... and ends at
    # 2.9016 (a grid of 191,520 points); at 2.5 the grid has 226,854, at 2.8125 198,326 (the caps below sit between them).
    ledger = Ledger(1e-5, "prv")
    grids = [ledger.prv_domain(((s, 1.0, 100),)).size for s in (2.5, 2.8125, 2.901611328125)]
    assert grids[0] > 200_000 > grids[1] > grids[2] > 185_000
    monkeypatch.setattr(accounting, "PRV_MAX_POINTS", 200_000)  # 2.5's grid is refused: below the answer, so the search steps up from it
    assert accounting._prv_search(20.0, 1e-5, 1.0, 100, 0.01, 1e6) == 2.901611328125  # Opacus's sigma (the test above)
    monkeypatch.setattr(accounting, "PRV_MAX_POINTS", 185_000)  # the answer's own grid is refused: no sigma the accountant holds spends 20
    with pytest.raises(AccountantError, match=r"cannot hold the noise this target needs: below 2\.9\d* at sample rate 1 over 100 steps"):
        accounting._prv_search(20.0, 1e-5, 1.0, 100, 0.01, 1e6)


def test_soft_label_uploads_too_many_for_the_prv_accountant_are_one_line_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # epsilon_upload composes every row a client uploads: 400 rows a round over 2 rounds is 800 releases at sigma 1 / 2
    # (local DP under replace-one: sensitivity 2), 3.6e7 grid points; round 2 raised mid-run (a traceback, a .partial
    # folder), or before the cap the machine ran out of memory
    code, err = run(tmp_path, capsys, 'accountant = "prv"', rounds=2, more=SOFT_LABELS, mechanism="local")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("chillfl: error: privacy.accountant: epsilon_upload composes every soft-label row a client uploads "
                             "(up to distillation.subset_size x rounds = 800), and the PRV accountant would discretise noise multiplier 0.5 at sample rate 1 over 800 steps")
    assert not (tmp_path / "out").exists()
