"""The digits data are read from scikit-learn's bundled CSV without importing scikit-learn, bit for bit what its
``load_digits`` returns; ``load_digits`` still reads them where the file is elsewhere or not of digits' shape.

Why: importing scikit-learn cost a digits run 0.75-1.3 s of start-up (the demo's too) to read one file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chillfl.data import datasets
from chillfl.errors import MissingExtra
from chillfl.extras import package_file


def _fresh() -> tuple[np.ndarray, np.ndarray]:
    datasets._digits_arrays.cache_clear()
    try:
        return datasets._digits_arrays()
    finally:
        datasets._digits_arrays.cache_clear()


def test_the_csv_read_is_load_digits_bit_for_bit() -> None:
    from sklearn.datasets import load_digits

    want_x, want_y = load_digits(return_X_y=True)
    x, y = _fresh()
    assert (x.dtype, y.dtype, x.shape, y.shape) == (want_x.dtype, want_y.dtype, want_x.shape, want_y.shape)
    assert np.array_equal(x, want_x) and np.array_equal(y, want_y)
    assert not x.flags.writeable and not y.flags.writeable  # shared by every run of a process: read-only


def test_reading_digits_imports_no_sklearn() -> None:
    code = "import sys\nfrom chillfl.data.datasets import _digits_arrays\nx, y = _digits_arrays()\nprint(x.shape, 'sklearn' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(1797,", "64)", "False"]


def test_load_digits_reads_them_where_the_file_is_missing_or_misshapen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sklearn.datasets import load_digits

    want_x, _ = load_digits(return_X_y=True)
    monkeypatch.setattr(datasets, "package_file", lambda *a: None)  # another layout: no file where 1.x keeps it
    assert np.array_equal(_fresh()[0], want_x)
    odd = tmp_path / "digits.csv.gz"
    np.savetxt(odd, np.zeros((3, 65)), delimiter=",")  # a file of another shape is not taken for digits
    monkeypatch.setattr(datasets, "package_file", lambda *a: odd)
    assert np.array_equal(_fresh()[0], want_x)


def test_package_file_finds_without_importing_and_names_the_extra() -> None:
    found = package_file("sklearn", "datasets", "the digits data", "datasets", "data", "digits.csv.gz")
    assert found is not None and found.name == "digits.csv.gz" and found.parent.parent.parent.name == "sklearn"
    assert package_file("sklearn", "datasets", "the digits data", "no", "such.csv") is None
    with pytest.raises(MissingExtra, match=r'no-such-package-xyz is needed for the data: pip install "chillfl\[datasets\]"'):
        package_file("no-such-package-xyz", "datasets", "the data")
