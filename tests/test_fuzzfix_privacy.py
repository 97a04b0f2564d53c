"""A mistyped privacy target (1e308) searched for sigma for minutes under the RDP accountant (report-fuzz finding 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.privacy.accounting import RDP_MAX_EPSILON, AccountantError, noise_for
from test_fuzzfix_options import run


@pytest.mark.parametrize("kind", ["rdp", "prv"])
def test_a_target_past_the_cap_is_refused_before_the_search(kind: str) -> None:
    with pytest.raises(AccountantError, match="no (target|epsilon) above"):
        noise_for(1e308, 1e-5, 0.5, 1, kind)
    assert RDP_MAX_EPSILON >= 1e20  # the huge targets test_accountant_limits runs stay accepted


@pytest.mark.slow  # about 6 s: a dp-fedavg dry run (the old code searched for minutes)
def test_a_huge_rdp_target_is_one_line_on_target_epsilon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("opacus")
    code, err = run(tmp_path, capsys, "privacy.mechanism=dp-fedavg", "privacy.target_epsilon=1e308")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("chillfl: error: privacy.target_epsilon: 1e+308 "), err


@pytest.mark.slow  # about 6 s, as above
def test_an_rdp_target_past_the_cap_is_not_told_to_use_rdp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal's ending advised every accountant's target to "use accountant = 'rdp'", the RDP one's too."""
    code, err = run(tmp_path, capsys, "privacy.mechanism=dp-fedavg", "privacy.accountant=rdp", "privacy.target_epsilon=1e308")
    assert code == 2 and len(err) == 1 and "lower target_epsilon" in err[0], err
    assert "use accountant = 'rdp'" not in err[0], err


@pytest.mark.slow  # about 6 s, as above
def test_a_prv_target_past_both_caps_is_not_told_to_use_rdp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RDP refuses a target above RDP_MAX_EPSILON too: the PRV refusal of 1e31 sent the user there (rev103c)."""
    code, err = run(tmp_path, capsys, "privacy.mechanism=dp-fedavg", "privacy.accountant=prv", "privacy.target_epsilon=1e31")
    assert code == 2 and len(err) == 1 and "lower target_epsilon" in err[0], err
    assert "use accountant = 'rdp'" not in err[0], err
