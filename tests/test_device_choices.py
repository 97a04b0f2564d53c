"""An unknown ``device`` listed ``mps`` among the allowed values, which chillfl then refuses as not supported yet: the
list offers only what runs, and says mps is not supported."""

from __future__ import annotations

import pytest

from chillfl.config import config_from_dict
from chillfl.errors import ConfigError


def test_an_unknown_device_lists_what_runs() -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict({"device": "gpu"})
    assert err.value.field == "device"
    assert err.value.message.endswith("allowed: cpu, cuda, cuda:N, auto (mps is not supported yet)")
