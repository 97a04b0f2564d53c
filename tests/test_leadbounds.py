"""``privacy.noise_multiplier`` and FedGen's ``eta`` are bounded as every option that scales noise or weights a loss
(docs/configuration.md: float32's largest), and the noise's standard deviation sigma * C is too (docclaims 1: 1e39
passed the config and the run diverged in round 1; 1e30 * 1e10 passed each bound and drew infinite noise)."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError


@pytest.mark.parametrize(("overrides", "field", "said"), [
    ({"privacy.mechanism": "dp-fedavg", "privacy.noise_multiplier": 1e39}, "privacy.noise_multiplier", "at most 3.403e+38 in size"),
    ({"privacy.mechanism": "dp-sgd", "privacy.noise_multiplier": 1e30, "privacy.clip_norm": 1e10}, "privacy.noise_multiplier",
     "times clip_norm is the noise's standard deviation"),
])
def test_a_scale_past_float32_is_refused_on_its_field(overrides: dict[str, object], field: str, said: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert info.value.field == field and said in str(info.value)


def test_the_largest_noise_that_fits_is_accepted() -> None:
    config = load_config(None, {"privacy.mechanism": "dp-fedavg", "privacy.noise_multiplier": 1e28, "privacy.clip_norm": 1e10})
    assert config.privacy.noise_multiplier * config.privacy.clip_norm == 1e38


def test_fedgens_eta_past_float32_is_one_line_at_config_time(capsys: pytest.CaptureFixture[str]) -> None:
    """A method's options are parsed when the run is built: the dry run refuses it, before any round (it diverged in round 2)."""
    assert main(["run", "algorithm.name=fedgen", "algorithm.eta=1e39", "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("chillfl: error: algorithm.eta: must be at most 3.403e+38 in size")


def test_privacy_options_built_in_python_refuse_an_overflowing_noise() -> None:
    """validate() alone (no table parsed, so no Scale check): sigma * C past float32 is refused there too."""
    from chillfl.settings.privacy import PrivacyOptions

    with pytest.raises(ConfigError) as info:
        PrivacyOptions(mechanism="dp-fedavg", noise_multiplier=1e200).validate("privacy")
    assert info.value.field == "privacy.noise_multiplier" and "times clip_norm is the noise's standard deviation" in str(info.value)
    PrivacyOptions(mechanism="dp-fedavg", noise_multiplier=3e38).validate("privacy")  # 3e38 * 1.0 fits
