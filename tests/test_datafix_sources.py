"""What the data commands say of where a dataset comes from matches what fetches it: MNIST's missing-data hint names the
downloader's URLs (it named https://yann.lecun.com, which the downloader never tries), and ``chillfl data download``
without a name lists the hub datasets too, with the ``hf download`` command that fetches them (it left them out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.data import load_dataset
from chillfl.data.leaf_hub import FemnistHubOptions, ShakespeareOptions
from chillfl.data.sources import SOURCES
from chillfl.errors import ConfigError


def test_the_mnist_hint_names_the_urls_the_downloader_tries(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_dataset("mnist", data_dir=tmp_path)
    tried = [url.rsplit("/", 1)[0] + "/" for url in SOURCES["mnist"].files[0].urls]
    assert tried == ["https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"]
    assert err.value.message.endswith(f"(source: {tried[0]}, then {tried[1]})")


def test_the_listing_names_the_hub_datasets_with_their_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    (data / "flwrlabs" / "shakespeare").mkdir(parents=True)
    (data / "flwrlabs" / "shakespeare" / "shakespeare.csv").write_bytes(b"character_id,x,y\n")  # a table file the loader reads (94ecf775)
    assert main(["data", "download", "--data-dir", str(data)]) == 0
    rows = {line.split()[0]: line.split(maxsplit=3)[1:] for line in capsys.readouterr().out.splitlines()}
    assert rows["flwr_shakespeare"] == ["flwrlabs/shakespeare/", "hub", "present"]
    command = f"hf download flwrlabs/femnist --repo-type dataset --local-dir {data / 'flwrlabs' / 'femnist'}"
    assert rows["flwr_femnist"] == ["flwrlabs/femnist/", "hub", f"missing: {command}"]


def test_downloading_a_hub_dataset_names_its_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command names the folder the download was asked for (``--data-dir``; a ``<data_dir>`` placeholder before,
    though the listing of the same command names it), so the line can be pasted as it is."""
    assert main(["data", "download", "flwr_shakespeare", "--data-dir", str(tmp_path / "dd")]) == 2  # the wrong tool: bad input, nothing written
    err = capsys.readouterr().err.strip()
    local = tmp_path / "dd" / "flwrlabs" / "shakespeare"
    assert len(err.splitlines()) == 1 and f"`hf download flwrlabs/shakespeare --repo-type dataset --local-dir {local}`" in err
    assert not (tmp_path / "dd").exists()


def test_the_hub_table_names_the_folders_the_loaders_read() -> None:
    from chillfl.data.sources import HUB  # new with the listing

    assert {name: hub.repo for name, hub in HUB.items()} == {"flwr_femnist": FemnistHubOptions().path, "flwr_shakespeare": ShakespeareOptions().path}
