"""What the data commands say of where a dataset comes from matches what fetches it: MNIST's missing-data hint names the
downloader's URLs (it named https://yann.lecun.com, which the downloader never tries), and ``chillfl data download``
without a name lists the hub datasets too, with the ``hf download`` command that fetches them (it left them out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.data import load_dataset
from chillfl.data.sources import SOURCES
from chillfl.errors import ConfigError


def test_the_mnist_hint_names_the_urls_the_downloader_tries(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_dataset("mnist", data_dir=tmp_path)
    tried = [url.rsplit("/", 1)[0] + "/" for url in SOURCES["mnist"].files[0].urls]
    assert tried == ["https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"]
    assert err.value.message.endswith(f"(source: {tried[0]}, then {tried[1]})")
