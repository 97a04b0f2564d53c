"""A library's deprecation met while a flwr-datasets partitioner runs (pyarrow's ``null_placement``, inside
``datasets``' sort under ``ShardPartitioner``) is not the user's mistake: it no longer reaches them as a warning
naming ``partition.options``. The library's other warnings, and flwr-datasets' own deprecations, still do."""

from __future__ import annotations

import logging
import warnings

import pytest

from chillfl.data.flwr_partition import library_warnings


def test_a_deprecation_below_flwr_datasets_names_no_option(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="chillfl"), library_warnings("ShardPartitioner", "partition"):
        warnings.warn_explicit("Specifying null_placement in SortOptions is deprecated", FutureWarning, "/env/pyarrow/compute.py", 231)
        warnings.warn_explicit("old_arg is deprecated, use new_arg", DeprecationWarning, "/env/flwr_datasets/partitioner/shard_partitioner.py", 9)
        warnings.warn_explicit("the draw failed, trying again", UserWarning, "/env/flwr_datasets/partitioner/dirichlet_partitioner.py", 5)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [
        "partition.options: ShardPartitioner: old_arg is deprecated, use new_arg",
        "partition.options: ShardPartitioner: the draw failed, trying again",
    ]
    assert any("null_placement" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)  # kept for whoever debugs
