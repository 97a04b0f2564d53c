"""A resume took every missing ``partition.options.*`` key of an older config.toml as no news (to accept the flwr
class's own defaults, written since 2026-12-06): any partitioner's missing option, and a value other than the class's
default, went unsaid. Now a missing key is no news only when the written partitioner's options say the class defaults it
and the value resumed with is that default; otherwise the resume names it as added since, as any other option."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.config import load_config
from chillfl.resolve import resolved
from chillfl.storage.results import to_toml

pytest.importorskip("flwr_datasets")

FLWR: dict[str, Any] = {"name": "flwr", "partitioner": "DirichletPartitioner", "options": {"alpha": 0.5}}
DEFAULTS = {"min_partition_size": 10, "self_balancing": False, "shuffle": True}
"""DirichletPartitioner's keyword defaults in flwr-datasets 0.6.1 (partitioner/dirichlet_partitioner.py), the ones written."""


@pytest.mark.parametrize(("key", "value"), list(DEFAULTS.items()))
def test_a_flwr_class_default_is_no_news(key: str, value: Any) -> None:
    assert runner._no_news({"partition": FLWR}, f"partition.options.{key}", value)


@pytest.mark.parametrize(("key", "value"), [
    ("min_partition_size", 5),  # not the class's default: the run did not take this
    ("min_partition_size", 10.0),  # not of the default's type
    ("self_balancing", 0),
    ("not_a_parameter", 1),  # a key the class does not default
    ("seed", 42),  # the class's, but never written: chillfl draws it
])
def test_another_flwr_key_or_value_is_news(key: str, value: Any) -> None:
    assert not runner._no_news({"partition": FLWR}, f"partition.options.{key}", value)


def test_another_partitioners_missing_option_is_news() -> None:
    assert not runner._no_news({"partition": {"name": "dirichlet", "alpha": 0.5}}, "partition.options.shuffle", True)
    assert not runner._no_news({"partition": {"partitioner": "DirichletPartitioner"}}, "partition.options.shuffle", True)  # no name


def _older_folder(tmp_path: Path, options: dict[str, Any]) -> tuple[Path, Any]:
    """A config.toml as chillfl writes it, its ``[partition.options]`` as ``options`` leaves it; the config resumed from it."""
    config = resolved(load_config(None, {"dataset.name": "digits", "partition": {**FLWR, "options": {"alpha": 0.5, **DEFAULTS}}}))
    table = config.to_dict()
    table["partition"] = {**table["partition"], "options": options}
    path = tmp_path / "config.toml"
    path.write_text(to_toml(table))
    return path, load_config(path)


def test_a_resume_of_an_older_flwr_folder_says_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path, config = _older_folder(tmp_path, {"alpha": 0.5})
    with caplog.at_level(logging.WARNING, logger=runner.__name__):
        runner._say_added_options(path, config)
    assert [r.getMessage() for r in caplog.records] == []


def test_a_resume_names_an_option_that_is_not_the_class_default(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing key resolved now to a value other than the class's default is named, with the value the resumed rounds
    take (the resolved options are stubbed to hold 7: a resolved flwr config takes its defaults from the class installed
    now, the same class _no_news compares with, so a default a newer flwr-datasets changed is NOT detected: that needs
    the flwr-datasets version recorded at the run's start, which no run folder holds)."""
    path, config = _older_folder(tmp_path, {"alpha": 0.5})
    monkeypatch.setattr(runner, "added_options", lambda written, cfg: {"partition.options.min_partition_size": 7})
    with caplog.at_level(logging.WARNING, logger=runner.__name__):
        runner._say_added_options(path, config)
    assert [r.getMessage() for r in caplog.records] == ["resume: options added since this run started take their defaults: "
                                                        "partition.options.min_partition_size = 7"]
