"""A run on the user's own module recorded its class and parameter count in ``[model]``, not its dtype: resuming a
float32 run on the same module in float64 (or the reverse) went on with the state cast to the new dtype, another run
from then on, and nothing in the folder said which dtype the rounds so far had. ``[model]`` records ``dtype`` now, and
resume refuses a module of other dtypes; a folder saved before the record resumes as it did."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_plugged_records import _as_older_chillfl_saved_it, _tiny

from chillfl.errors import ConfigError


def test_the_model_record_names_its_parameters_dtype(tmp_path: Any) -> None:
    from chillfl.api import model_record

    assert model_record(torch.nn.Linear(2, 2))["dtype"] == "float32"
    mixed = torch.nn.Sequential(torch.nn.Linear(2, 2).double(), torch.nn.Linear(2, 2))
    assert model_record(mixed)["dtype"] == "float32, float64"
    assert "dtype" not in model_record(torch.nn.Identity())  # no floating parameter: nothing to record


def test_resuming_on_a_module_of_another_dtype_is_refused(tmp_path: Any) -> None:
    import chillfl
    from chillfl.extend import FedAvg

    cut, data = _tiny(tmp_path, FedAvg())
    assert cut.folder is not None and cut.config.model["dtype"] == "float32"
    torch.manual_seed(0)
    with pytest.raises(ConfigError) as err:
        chillfl.resume(cut.folder, torch.nn.Linear(6, 3).double(), data, aggregator=FedAvg(), progress=False)
    assert err.value.field == "model" and "dtype 'float32', got 'float64'" in err.value.message and "\n" not in err.value.message
    torch.manual_seed(0)
    done = chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedAvg(), progress=False)
    assert [r["round"] for r in done.records] == [1, 2]


def test_a_folder_saved_without_the_dtype_resumes(tmp_path: Any) -> None:
    import chillfl
    from chillfl.extend import FedAvg

    cut, data = _tiny(tmp_path, FedAvg())
    assert cut.folder is not None
    _as_older_chillfl_saved_it(cut.folder, lambda raw: raw["model"].pop("dtype"))
    torch.manual_seed(0)
    done = chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedAvg(), progress=False)
    assert [r["round"] for r in done.records] == [1, 2]


def test_load_run_refuses_a_module_of_another_dtype(tmp_path: Any) -> None:
    """``load_run`` copied a float32 run's weights into a float64 module and scored it in float64, unlike the recorded
    metrics (rev102 #3); it refuses as resume does, and takes the module in the run's dtype."""
    import chillfl
    from chillfl.extend import FedAvg

    cut, data = _tiny(tmp_path, FedAvg())
    assert cut.folder is not None
    with pytest.raises(ConfigError) as err:
        chillfl.load_run(cut.folder, torch.nn.Linear(6, 3).double(), data)
    assert err.value.field == "model" and "trained in float32" in err.value.message and "\n" not in err.value.message
    assert chillfl.load_run(cut.folder, torch.nn.Linear(6, 3), data).model is not None
