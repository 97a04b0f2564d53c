"""A blank (whitespace-only) name is refused at config time, naming its field (review: cfgblank 1).

``log.wandb_project = "  "`` and ``log.mlflow_experiment = "  "`` passed ``isprintable()``: the run reached the tracking
service with a project or experiment named by spaces. ``ray.address = "  "`` and ``log.mlflow_tracking_uri = "  "`` were
taken as an address and a URI, where ``""`` (a local Ray, MLflow's own default) stays what it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import LogConfig, RayConfig, config_from_dict
from chillfl.errors import ConfigError
from test_fuzzfix_fields import BASE

BLANKS = (" ", "   ")  # ASCII spaces: the one blank str.isprintable() passes (a tab, U+3000 were refused as unprintable)


def _refusal(part: dict[str, dict[str, str]]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        config_from_dict(part)
    return caught.value


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("section, key", [("log", "wandb_project"), ("log", "mlflow_experiment"), ("log", "mlflow_tracking_uri"), ("ray", "address")])
def test_a_blank_name_is_refused_on_its_field(section: str, key: str, blank: str) -> None:
    err = _refusal({section: {key: blank}})
    assert err.field == f"{section}.{key}" and "blank" in err.message and err.message.endswith(f"got {blank!r}")
    assert _refusal({section: {key: " \t\u3000"}}).field == f"{section}.{key}"  # any other blank, refused as it was


def test_the_empty_address_and_uri_keep_their_meaning() -> None:
    """``""``: a local Ray (or $RAY_ADDRESS), MLflow's own store; a name with spaces inside is a name."""
    config = config_from_dict({"ray": {"address": ""}, "log": {"mlflow_tracking_uri": "", "wandb_project": "my project", "mlflow_experiment": " x "}})
    assert (config.ray.address, config.log.mlflow_tracking_uri, config.log.wandb_project, config.log.mlflow_experiment) == ("", "", "my project", " x ")
    RayConfig(address="10.0.0.1:6379").validate("ray")
    LogConfig().validate("log")


def test_the_empty_project_and_experiment_are_still_refused() -> None:
    for key in ("wandb_project", "mlflow_experiment"):
        assert _refusal({"log": {key: ""}}).field == f"log.{key}"


@pytest.mark.parametrize("override, field", [
    ('log.wandb_project="  "', "log.wandb_project"),
    ('log.mlflow_experiment="  "', "log.mlflow_experiment"),
    ('ray.address="  "', "ray.address"),
])
def test_the_cli_refuses_a_blank_name_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                  override: str, field: str) -> None:
    """As the shell hands over ``chillfl run base.toml 'log.wandb_project="  "'``: a TOML string of two spaces (unquoted,
    the value is stripped to "" before it is read)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.toml").write_text(BASE)
    assert main(["run", "base.toml", override, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {field}: must be ")  # one line, no traceback before it
    assert err[0].endswith("blank, got '  '") and not (tmp_path / "results").exists()


def test_a_config_files_blank_project_is_refused_by_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.toml").write_text(BASE + '[log]\nwandb_project = "   "\n')
    assert main(["run", "base.toml", "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "chillfl: error: log.wandb_project: must be a printable name without '/', not empty or blank, got '   '"
