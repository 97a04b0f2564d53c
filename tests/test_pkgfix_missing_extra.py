"""A missing extra's line names the package first (``opacus is needed for [privacy]``): ``{what} need {module}`` read
"[privacy] need opacus" and "reading the LEAF parquet files need pyarrow", whatever subject the caller gave."""

from __future__ import annotations

import pickle

import pytest

from chillfl.errors import ConfigError, MissingExtra
from chillfl.extras import need


@pytest.mark.parametrize(
    ("what", "module", "extra", "line"),
    [
        ("[privacy]", "opacus", "privacy", 'opacus is needed for [privacy]: pip install "chillfl[privacy]"'),
        ("reading the LEAF parquet files", "pyarrow", "hf", 'pyarrow is needed for reading the LEAF parquet files: pip install "chillfl[hf]"'),
        ("plots", "matplotlib", "plots", 'matplotlib is needed for plots: pip install "chillfl[plots]"'),
    ],
)
def test_the_line_reads_right_for_any_subject(what: str, module: str, extra: str, line: str) -> None:
    error = MissingExtra(what, module, extra)
    assert str(error) == line and isinstance(error, ConfigError) and error.field == extra
    assert str(pickle.loads(pickle.dumps(error))) == line  # a worker sends it back by pickle


def test_need_names_the_package_pip_knows_first() -> None:
    with pytest.raises(MissingExtra) as info:
        need("chillfl_pkgfix_no_such_module.sub", "privacy", "[privacy]")
    assert str(info.value) == 'chillfl_pkgfix_no_such_module is needed for [privacy]: pip install "chillfl[privacy]"'
