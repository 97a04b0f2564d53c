"""A loss term named by its import path (``mypkg.reg:L2``, dots and a colon) is found by the replaced-override check as
:func:`chillfl.training.terms.with_term_option` finds it: the term's name is everything before the key's last dot.

Why: the check split ``objective.terms.ckptmend_pkg.reg:L2.weight`` on every dot and looked for a term named
``ckptmend_pkg``; it found none and let through an override every run replaced, which the comparison's config.toml
then recorded as its base (rev113 1)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

import chillfl
from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.sweeps.replaced import value_at
from test_clifix2_compare_overrides import _error
from test_clifix2_datasets import BASE

TERM = '''
from dataclasses import dataclass

import torch


class L2:
    """A weighted sum of squares of the parameters."""

    reads = ()

    @dataclass(frozen=True)
    class Options:
        weight: float = 0.01

    def __init__(self, options):
        self.weight = options.weight

    def __call__(self, params, context):
        return self.weight * sum((p ** 2).sum() for p in params.values())
'''

NAME = "ckptmend_pkg.reg:L2"
KEY = f"objective.terms.{NAME}.weight"
TOML = BASE.replace('name = "t"', 'name = "pl"', 1) + (f'[eval]\nvalidation = 0.2\n[objective]\nterms = [{{ name = "{NAME}", weight = 0.01 }}]\n'
                                                       f'[tune]\n"{KEY}" = [0.001, 0.1]\n')


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``ckptmend_pkg.reg`` importable while the test runs: a dotted module path, as a user's package gives."""
    (tmp_path / "ckptmend_pkg").mkdir()
    (tmp_path / "ckptmend_pkg" / "__init__.py").write_text("")
    (tmp_path / "ckptmend_pkg" / "reg.py").write_text(TERM)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for module in ("ckptmend_pkg.reg", "ckptmend_pkg"):
        sys.modules.pop(module, None)


def test_value_at_finds_a_term_by_its_whole_dotted_name() -> None:
    config = {"objective": {"terms": ["proximal", {"name": NAME, "weight": 0.5}, {"name": "ntd", "beta": 3.0}]}}
    assert value_at(config, KEY) == (True, 0.5)
    assert value_at(config, "objective.terms.ntd.beta") == (True, 3.0)
    assert value_at(config, f"objective.terms.{NAME}.other") == (False, None)  # an option the entry does not give
    assert value_at(config, "objective.terms.ckptmend_pkg.weight") == (False, None)  # a part of the name is no term
    assert value_at(config, "objective.terms.weight") == (False, None)  # no term name at all


def test_the_command_line_refuses_an_import_path_terms_option_the_tuning_axis_replaces(package: None, tmp_path: Path,
                                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pl.toml"
    path.write_text(TOML)
    assert main(["compare", str(path), "--dry-run", f"{KEY}=0.5"]) == 2
    assert _error(capsys).startswith(f"{KEY}: every run of pl replaces the command line's {KEY}=0.5 (the tuning grid's [tune] {KEY})")


def test_python_compare_refuses_an_import_path_terms_option_the_tuning_axis_replaces(package: None, tmp_path: Path) -> None:
    path = tmp_path / "pl.toml"
    path.write_text(TOML)
    with pytest.raises(ConfigError) as info:
        chillfl.compare(config=str(path), out_dir=tmp_path / "out", progress=False, **{KEY: 0.5})
    assert info.value.field == KEY
    assert info.value.message.startswith(f"every run of pl replaces the override {KEY}=0.5 (the tuning grid's [tune] {KEY})")
    assert not (tmp_path / "out").exists()
