"""``partition.from`` on a ``feature_noise`` split: the file keeps each client's noise sigma, and the run reading it applies it.

Found by report-partition, Finding 1: ``partition.json`` kept only the index lists, so a run reusing a feature-shift
split trained on the same rows without their noise, silently (FedChill Table 6 turned into an IID run). Now the file has a
``noise`` list (only for a partition that adds noise: every other file keeps its bytes), the reading run applies it as
the writer did, and an older file of a noisy partition without the list is refused in one line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chillfl
from chillfl.cli import main
from chillfl.config import config_from_dict
from chillfl.data.federated import FederatedData
from chillfl.data.partition_file import encode_partition, partition_record
from chillfl.data.show import describe
from chillfl.experiment import build_data

BASE: dict[str, Any] = {
    "seed": 3,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "model": {"name": "mlp", "hidden": [8]},
    "partition": {"name": "feature_noise"},
    "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1},
    "client": {"batch_size": 32, "lr": 0.05},
}


def _config(**partition: Any) -> dict[str, Any]:
    return {**BASE, "partition": partition or BASE["partition"]}


def _data(config: dict[str, Any]) -> FederatedData:
    return build_data(config_from_dict(config))


def _saved(tmp_path: Path, config: dict[str, Any], **changes: Any) -> str:
    """The partition.json a run of ``config`` writes (what the runner's ``_write_partition`` records, the clients' noise
    included), with ``changes`` made to it (a value None: the key deleted)."""
    cfg = config_from_dict(config)
    data = build_data(cfg)
    record = partition_record(data.dataset.name, len(data.dataset.y_train), cfg.partition, data.train_indices,
                              row_labels=data.row_labels, dataset_table=cfg.dataset, noise=data.noise)
    for key, value in changes.items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    path = tmp_path / "partition.json"
    path.write_bytes(encode_partition(record))
    return str(path)


def _from(path: str) -> dict[str, Any]:
    return {**BASE, "partition": {"from": path}}


def test_a_run_on_the_file_of_a_feature_noise_split_trains_on_the_same_noisy_inputs(tmp_path: Path) -> None:
    """Random spacing: the sigmas come from the partition's draw, so only the file can give them back."""
    config = _config(name="feature_noise", spacing="random")
    path = _saved(tmp_path, config)
    original, copy = _data(config), _data(_from(path))
    assert original.noise is not None and copy.noise == original.noise and len(set(original.noise)) == 4
    for cid in range(4):
        for split in (original.client_train, original.client_eval):
            x, y = split(cid)
            x2, y2 = (copy.client_train if split == original.client_train else copy.client_eval)(cid)
            assert torch.equal(x, x2) and torch.equal(y, y2)
    first = chillfl.run(config=config, out_dir=tmp_path / "original", progress=False)
    second = chillfl.run(config=_from(path), out_dir=tmp_path / "from", progress=False)
    assert first.records == second.records
    assert {k: v for k, v in first.summary.items() if k.startswith("final_")} == {k: v for k, v in second.summary.items() if k.startswith("final_")}


def test_an_older_file_of_a_noisy_split_without_its_noise_is_refused_in_one_line(tmp_path: Path,
                                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(tmp_path, BASE, noise=None)
    with pytest.raises(chillfl.ConfigError) as err:
        _data(_from(path))
    assert err.value.field == "partition.from" and "\n" not in str(err.value)
    assert "'feature_noise'" in err.value.message and "Make the split again" in err.value.message
    config = tmp_path / "run.toml"
    config.write_text(f'[dataset]\nname = "digits"\n[partition]\nfrom = "{path}"\n[federation]\nnum_clients = 4\n', encoding="utf-8")
    assert main(["data", "show", str(config), "-o", str(tmp_path / "h.png")]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("chillfl: error: partition.from: ")


def test_an_older_file_of_a_split_that_adds_no_noise_is_read_as_before(tmp_path: Path) -> None:
    """feature_noise with sigma_max = 0 adds none: its file without a noise list has nothing to lose."""
    silent = _config(name="feature_noise", sigma_min=0.0, sigma_max=0.0)
    data = _data(_from(_saved(tmp_path, silent, noise=None)))
    assert data.noise is None
    table = {"name": "feature_noise", "sigma_max": "high"}  # options this chillfl cannot parse: refused, it may have added noise
    with pytest.raises(chillfl.ConfigError, match="'feature_noise', which adds noise"):
        _data(_from(_saved(tmp_path, silent, noise=None, partition=table)))


@pytest.mark.parametrize("noise, words", [
    ([0.1, 0.2, 0.3], r"'noise' in .* one noise sigma per client \(4\), got a list of 3"),
    ({"0": 0.1}, r"one noise sigma per client \(4\), got \{'0': 0.1\}"),
    ([0.1, math.nan, 0.2, 0.3], "client 1's noise sigma .* must be a finite number >= 0, got nan"),
    ([0.1, 0.2, math.inf, 0.3], "client 2's noise sigma .* got inf"),
    ([0.1, 0.2, 0.3, -0.1], "client 3's noise sigma .* got -0.1"),
    (["0.1", 0.2, 0.3, 0.4], "client 0's noise sigma .* got '0.1'"),
    ([True, 0.2, 0.3, 0.4], "client 0's noise sigma .* got True"),
    ([10**400, 0.2, 0.3, 0.4], "client 0's noise sigma"),  # finite as an int, inf as the float it would become
])
def test_a_bad_noise_list_is_one_line_on_partition_from(tmp_path: Path, noise: object, words: str) -> None:
    with pytest.raises(chillfl.ConfigError, match=words) as err:
        _data(_from(_saved(tmp_path, BASE, noise=noise)))
    assert err.value.field == "partition.from" and "\n" not in str(err.value)


def test_a_noise_list_of_ints_and_zeros_is_read_as_floats(tmp_path: Path) -> None:
    data = _data(_from(_saved(tmp_path, BASE, noise=[0, 1, 0.5, 0])))
    assert data.noise == [0.0, 1.0, 0.5, 0.0] and all(type(s) is float for s in data.noise)
    x, _ = data.client_train(0)
    assert torch.equal(x, data.dataset.x_train[torch.from_numpy(data.train_indices[0])])  # sigma 0: the rows as they are


def test_data_show_on_the_file_shows_each_clients_sigma(tmp_path: Path) -> None:
    shown = describe(_data(_from(_saved(tmp_path, BASE)))).splitlines()
    assert shown[1].split()[:4] == ["client", "train", "eval", "sigma"]
    assert [row.split()[3] for row in shown[2:6]] == ["0.100", "0.167", "0.233", "0.300"]
    assert "sigma: its feature noise" in shown[-1]


@pytest.mark.parametrize("partition", [{"name": "iid"}, {"name": "dirichlet", "alpha": 0.5}])
def test_a_partition_without_noise_writes_the_bytes_it_wrote_before(tmp_path: Path, partition: dict[str, Any]) -> None:
    """The noise list is the only new key, and only a noisy partition's file has it: others are byte for byte as before
    (format, version, dataset, train_size, partition, rows, clients; compact JSON and a newline)."""
    result = chillfl.run(config=_config(**partition), out_dir=tmp_path, progress=False)
    assert result.folder is not None
    written = (result.folder / "partition.json").read_bytes()
    doc = json.loads(written)
    before = {key: doc[key] for key in ("format", "version", "dataset", "train_size", "partition", "rows", "clients")}
    assert written == (json.dumps(before, separators=(",", ":")) + "\n").encode("utf-8")
    assert list(doc) == list(before)


def test_a_feature_noise_runs_file_records_its_noise_and_a_run_on_it_trains_the_same(tmp_path: Path) -> None:
    first = chillfl.run(config=BASE, out_dir=tmp_path / "a", progress=False)
    assert first.folder is not None
    doc = json.loads((first.folder / "partition.json").read_text())
    assert doc["noise"] == np.linspace(0.1, 0.3, 4).tolist()  # feature_noise linear spacing, as the run applied it
    second = chillfl.run(config=_from(str(first.folder / "partition.json")), out_dir=tmp_path / "b", progress=False)
    assert second.folder is not None and first.records == second.records
    assert json.loads((second.folder / "partition.json").read_text())["noise"] == doc["noise"]  # a file run's file keeps it
