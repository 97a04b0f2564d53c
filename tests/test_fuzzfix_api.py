"""Bad input through the Python API, from the fuzzer: one ConfigError naming the field, never a traceback of our own.

A config dict with a key that is not a string (``{1: 2}``, ``{"variants": {1: {}}}``, ``{"tune": {1: [1]}}``) raised an
AttributeError while its error was being worded, or deeper in; ``chillfl.compare``'s ``grid``, ``seeds`` and
``reference`` of the wrong type raised a TypeError or AttributeError; ``TensorData(name=3)`` was saved as the label "3".
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError, one_line
from chillfl.options import join_field

CONFIG: dict[str, Any] = {"federation": {"num_clients": 3, "rounds": 1, "clients_per_round": 2}, "eval": {"clients": "none"}}


def _data(**kw: Any) -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(30, 4, generator=g), torch.arange(30) % 3
    return chillfl.TensorData(x, y, x, y, num_classes=3, **kw)


def _refused(call: Callable[[], Any], field: str, *words: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        call()
    err = info.value
    assert err.field == field, str(err)
    assert "\n" not in str(err)
    for word in words:
        assert word in err.message, str(err)
    return err


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({1: 2}, "config"),
        ({"variants": {1: {}}}, "variants"),
        ({"tune": {1: [0.1]}}, "tune"),
        ({"tune": {"client": {1: [0.1]}}}, "tune.client"),  # a nested grid's key: was accepted as "client.1"
        ({"variants": {"a": {1: 2}}}, "variants.a"),
        ({"objective": {"terms": [{"name": "proximal", 1: 2}]}}, "objective.terms"),
    ],
)
def test_a_config_dict_with_a_key_that_is_not_a_string_is_one_error_naming_its_table(config: dict[Any, Any], field: str) -> None:
    _refused(lambda: chillfl.make_config(config), field, "must be a string", "(int)")


def test_run_and_compare_refuse_a_non_string_key_too(tmp_path: Any) -> None:
    for fn in (chillfl.run, chillfl.compare):
        _refused(lambda: fn(model=nn.Linear(4, 3), data=_data(), config={1: 2}, progress=False, write=False), "config", "must be a string")
    _refused(lambda: chillfl.make_config(None, {1: 2}), "overrides", "must be a string")
    assert not any(tmp_path.iterdir())


def test_an_error_about_a_key_that_is_not_a_string_can_be_worded() -> None:
    """The field of an error may be a dict's key as given: wording it raised AttributeError 'isprintable'."""
    assert one_line(1) == "1"
    assert join_field("", 1) == "1" and join_field("client", 1) == "client.1"
    assert str(ConfigError(1, "bad")) == "1: bad"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "field", "words"),
    [
        ({"grid": 3}, "grid", ("got int 3",)),
        ({"grid": ["client.lr=0.1,0.2", 3]}, "grid", ("item 1", "(int)")),
        ({"grid": [b"client.lr=0.1"]}, "grid", ("(bytes)",)),
        ({"grid": {3: [1, 2]}}, "grid", ("option name", "(int)")),
        ({"seeds": 3}, "seeds", ("list of integer seeds", "list(range(3))")),
        ({"tune": 3}, "tune", ("expected a dict",)),
        ({"tune": {1: [0.1, 0.2]}}, "tune", ("option name", "(int)")),
        ({"grid": {"client.lr": [0.1, 0.2]}, "reference": ["a"]}, "reference", ("variant label", "list")),
    ],
)
def test_compare_refuses_arguments_of_the_wrong_type_naming_them(kw: dict[str, Any], field: str, words: tuple[str, ...]) -> None:
    _refused(lambda: chillfl.compare(model=nn.Linear(4, 3), data=_data(), config=CONFIG, progress=False, write=False, **kw), field, *words)


def test_reproduce_paper_refuses_seeds_that_are_no_list() -> None:
    _refused(lambda: chillfl.api.reproduce_paper("flexchill", seeds=3), "seeds", "list of integer seeds")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [3, None, b"x"])
def test_tensor_data_name_must_be_a_string(name: Any) -> None:
    """``name=3`` was saved as ``dataset.source = "3"``, a label the user never wrote."""
    _refused(lambda: chillfl.run(model=nn.Linear(4, 3), data=_data(name=name), config=CONFIG, progress=False, write=False), "data.name", "must be a string")
