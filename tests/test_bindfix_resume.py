"""A run on an aggregator from Python that the run binds (its spec's ``bind``: ``Scaffold(3)`` takes ``client.momentum``)
records ``bound = true`` in ``[algorithm]``, and :func:`chillfl.resume` refuses a folder an older chillfl saved without it:
there the instance ran unbound under the same recorded options, so resuming changed the method midway (bindfix #1)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import chillfl
from chillfl.errors import ConfigError
from chillfl.experiment import Plugged, plugged_records
from chillfl.extend import FedAvg
from test_plugged_records import _as_older_chillfl_saved_it, _tiny


def test_a_bound_instance_says_so_in_its_record() -> None:
    from chillfl.aggregation.pa3fed import PA3Fed
    from chillfl.aggregation.scaffold import Scaffold

    assert plugged_records(Plugged(Scaffold(3)))["algorithm"]["bound"] is True
    assert plugged_records(Plugged(PA3Fed(Scaffold(3))))["algorithm"]["bound"] is True  # a wrapped base's bind counts
    assert "bound" not in plugged_records(Plugged(FedAvg()))["algorithm"]  # nothing to bind: older folders resume as before


def test_a_folder_saved_before_binding_is_refused_in_one_line(tmp_path: Any) -> None:
    from chillfl.aggregation.scaffold import Scaffold

    cut, data = _tiny(tmp_path, Scaffold(2))
    assert cut.folder is not None and cut.config.algorithm.get("bound") is True
    _as_older_chillfl_saved_it(cut.folder, lambda raw: raw["algorithm"].pop("bound"))
    with pytest.raises(ConfigError) as err:
        chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=Scaffold(2), progress=False)
    assert err.value.field == "aggregator" and "predates" in err.value.message and "Scaffold" in err.value.message
    assert "\n" not in err.value.message


def test_a_folder_saved_with_the_binding_resumes(tmp_path: Any) -> None:
    from chillfl.aggregation.scaffold import Scaffold

    cut, data = _tiny(tmp_path, Scaffold(2))
    assert cut.folder is not None
    torch.manual_seed(0)
    done = chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=Scaffold(2), progress=False)
    assert [r["round"] for r in done.records] == [1, 2]
