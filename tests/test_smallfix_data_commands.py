"""The commands chillfl prints for fetching a dataset name the ``--data-dir`` given, but bare: ``--data-dir "/tmp/my
data"`` printed ``hf download flwrlabs/femnist ... --local-dir /tmp/my data/flwrlabs/femnist``, which pasted put the
files in ``/tmp/my`` (rev102c #6). Each such command names the folder as one shell word now; these tests read each
printed command as a shell does (``shlex.split``) and check the folder it names."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.data import load_dataset
from chillfl.errors import ConfigError


def _folder(tmp_path: Path) -> Path:
    return tmp_path / "my data" / "it's"  # a space and a quote: both split or broke the pasted command


def _argument(command: str, flag: str) -> str:
    """What a shell passes as ``flag``'s value in ``command``."""
    words = shlex.split(command)
    return words[words.index(flag) + 1]


def _quoted_command(said: str) -> str:
    (command,) = re.findall(r"`(hf download [^`]*)`", said)
    return command


@pytest.mark.parametrize("name", ["flwr_femnist", "femnist"])
def test_download_of_a_dataset_chillfl_does_not_fetch_names_the_folder_as_one_word(name: str, tmp_path: Path,
                                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = _folder(tmp_path)
    assert main(["data", "download", name, "--data-dir", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert _argument(_quoted_command(err), "--local-dir") == str(data / "flwrlabs" / "femnist")


def test_the_listing_names_the_hub_folder_as_one_word(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _folder(tmp_path)
    assert main(["data", "download", "--data-dir", str(data)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("flwr_femnist ")]
    assert _argument(row.split("missing: ", 1)[1], "--local-dir") == str(data / "flwrlabs" / "femnist")


def test_a_missing_dataset_names_the_download_command_with_the_folder_as_one_word(tmp_path: Path) -> None:
    data = _folder(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_dataset("cifar10", data_dir=data)
    command = err.value.message.split("fetch it with: ", 1)[1].split(" (source: ")[0]
    assert shlex.split(command)[:4] == ["chillfl", "data", "download", "cifar10"] and _argument(command, "--data-dir") == str(data)


def test_the_leaf_femnist_and_the_hub_hints_name_the_folder_as_one_word(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _folder(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_dataset("femnist", data_dir=data)
    assert _argument(_quoted_command(err.value.message), "--local-dir") == str(data / "flwrlabs" / "femnist")
    assert f"({data}/femnist/all_data/ or train/ and test/)" in err.value.message  # prose, not a command: as it is
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as err:
        load_dataset("flwr_shakespeare", {}, data_dir=data)
    assert _argument(_quoted_command(err.value.message), "--local-dir") == str(data / "flwrlabs" / "shakespeare")


def test_a_plain_folder_is_printed_as_before() -> None:
    from chillfl.data.sources import HUB, MANUAL, download_command

    assert HUB["flwr_femnist"].command() == "hf download flwrlabs/femnist --repo-type dataset --local-dir data/flwrlabs/femnist"
    assert download_command("mnist", "data") == "chillfl data download mnist --data-dir data"
    assert MANUAL["femnist"].for_dir("/d").startswith("FEMNIST needs no build step") and "--local-dir /d/flwrlabs/femnist`" in MANUAL["femnist"].for_dir("/d")


def test_a_folder_starting_with_a_dash_is_printed_so_that_the_pasted_command_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--data-dir -x`` pasted back is refused by argparse (``-x`` read as a flag): the folder is printed ``./-x``."""
    from chillfl.data.sources import download_command
    monkeypatch.chdir(tmp_path)
    command = download_command("mnist", "-x")
    assert _argument(command, "--data-dir") == "./-x"
    assert main(["data", "download", "flwr_femnist", "--data-dir=-x"]) == 2
    local = _argument(_quoted_command(capsys.readouterr().err), "--local-dir")
    assert local == "./-x/flwrlabs/femnist" and (tmp_path / local).resolve() == (tmp_path / "-x" / "flwrlabs" / "femnist").resolve()
    assert main(["data", "download", "femnist", "--data-dir=-x"]) == 2  # its hub instructions, a ManualSource's (rev104a 4)
    local = _argument(_quoted_command(capsys.readouterr().err), "--local-dir")
    assert local == "./-x/flwrlabs/femnist"
    with pytest.raises(SystemExit):  # what the old text did, pasted: argparse takes -x for a flag
        main(shlex.split("data download mnist --data-dir -x"))
