"""flwr_femnist (by writer) and flwr_shakespeare (by speaker) from parquet files in the Flower Datasets layout, written here.

The files mimic ``flwrlabs/femnist`` (``image`` = struct of PNG bytes and path, ``writer_id``, ``hsf_id``,
``character``) and ``flwrlabs/shakespeare`` (``character_id``, ``x`` = 80 characters, ``y``); nothing is downloaded.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pa = pytest.importorskip("pyarrow")  # the `test` extra installs it (through datasets)
import pyarrow.parquet as pq  # noqa: E402
from PIL import Image  # noqa: E402

from chillfl.data import load_dataset  # noqa: E402
from chillfl.data.leaf_hub import LEAF_LETTERS, encode_text  # noqa: E402
from chillfl.data.partition import partition  # noqa: E402
from chillfl.errors import ConfigError, Unreachable  # noqa: E402
from chillfl.models import build_model, count_parameters  # noqa: E402

WRITERS = ("f0002_31", "f0000_14", "f0001_07")
"""Out of order in the file, so the sorted natural-id order is checked."""


def _png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buf, format="PNG")
    return buf.getvalue()


def write_femnist(root: Path, per_writer: int = 10) -> dict[str, list[int]]:
    """3 writers x ``per_writer`` 28x28 images, rows interleaved across writers; {writer: labels in file order}."""
    rng = np.random.default_rng(0)
    rows: list[tuple[bytes, str, int]] = []
    labels: dict[str, list[int]] = {w: [] for w in WRITERS}
    for j in range(per_writer):
        for k, w in enumerate(WRITERS):
            label = (7 * j + 13 * k) % 62
            rows.append((_png(rng.integers(0, 256, (28, 28), dtype=np.uint8)), w, label))
            labels[w].append(label)
    image = pa.StructArray.from_arrays([pa.array([r[0] for r in rows], pa.binary()), pa.array([None] * len(rows), pa.string())], names=["bytes", "path"])
    table = pa.table({"image": image, "writer_id": [r[1] for r in rows], "hsf_id": [0] * len(rows), "character": pa.array([r[2] for r in rows], pa.int64())})
    (root / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "data" / "train-00000-of-00001.parquet")
    return labels


SPEAKERS = {"THE_TEMPEST_ARIEL": 5, "HAMLET_HAMLET": 6, "KING_LEAR_FOOL": 4}


def _line(seed: int) -> str:
    rng = np.random.default_rng(seed)
    return "".join(LEAF_LETTERS[i] for i in rng.integers(0, len(LEAF_LETTERS), 81))


def write_shakespeare(root: Path) -> dict[str, list[str]]:
    """Each speaker's 81-character windows split into x (80) and y (the 81st); {speaker: y in file order}."""
    ids, xs, ys = [], [], []
    out: dict[str, list[str]] = {}
    for s, (speaker, n) in enumerate(SPEAKERS.items()):
        for j in range(n):
            text = _line(100 * s + j)
            ids.append(speaker)
            xs.append(text[:80])
            ys.append(text[80])
            out.setdefault(speaker, []).append(text[80])
    (root / "default" / "train").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"character_id": ids, "x": xs, "y": ys}), root / "default" / "train" / "0000.parquet")
    return out


@pytest.fixture
def femnist_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "flwrlabs" / "femnist"
    write_femnist(root)
    return root


# ---------------------------------------------------------------- FEMNIST


def test_femnist_writers_sorted_as_natural_clients(tmp_path: Path) -> None:
    root = tmp_path / "fem"
    labels = write_femnist(root)
    ds = load_dataset("flwr_femnist", {"path": str(root)}, data_dir=tmp_path / "data")
    assert ds.num_classes == 62 and tuple(ds.x_train.shape[1:]) == (1, 28, 28)
    assert ds.train_groups is not None and ds.test_groups is not None
    # 10 samples a writer, train_fraction 0.9: max(1, floor(0.9 * 10)) = 9 train, 1 test
    assert [len(g) for g in ds.train_groups] == [9, 9, 9] and [len(g) for g in ds.test_groups] == [1, 1, 1]
    for g, writer in enumerate(sorted(WRITERS)):  # client g = the g-th writer id in sorted order
        got = sorted(ds.y_train[ds.train_groups[g]].tolist() + ds.y_test[ds.test_groups[g]].tolist())
        assert got == sorted(labels[writer])
    # standardised with the train set's statistics
    assert abs(float(ds.x_train.mean())) < 1e-4 and abs(float(ds.x_train.std()) - 1.0) < 1e-2


def test_null_ids_and_labels_that_are_not_class_ids_are_one_line(tmp_path: Path) -> None:
    """A null writer/speaker id was silently a client named "None"; string or null labels were a traceback (or a cast warning)."""
    png = _png(np.zeros((28, 28), dtype=np.uint8))
    image = pa.StructArray.from_arrays([pa.array([png] * 4, pa.binary()), pa.array([None] * 4, pa.string())], names=["bytes", "path"])
    cases = {
        "writer": (pa.table({"image": image, "writer_id": ["a", None, "a", "b"], "hsf_id": [0] * 4, "character": [0, 1, 2, 3]}), "no 'writer_id'"),
        "strings": (pa.table({"image": image, "writer_id": ["a", "b"] * 2, "hsf_id": [0] * 4, "character": ["0", "1", "2", "3"]}), "class ids"),
        "nulls": (pa.table({"image": image, "writer_id": ["a", "b"] * 2, "hsf_id": [0] * 4, "character": pa.array([0, None, 2, 3], pa.int64())}), "class ids"),
        "speaker": (pa.table({"character_id": ["A", None, "A", "B"], "x": ["a" * 80] * 4, "y": ["b"] * 4}), "no 'character_id'"),
    }
    for name, (table, words) in cases.items():
        (tmp_path / name).mkdir()
        pq.write_table(table, tmp_path / name / "train.parquet")
        dataset = "flwr_shakespeare" if name == "speaker" else "flwr_femnist"
        with pytest.raises(ConfigError, match=words) as err:
            load_dataset(dataset, {"path": str(tmp_path / name)}, data_dir=tmp_path / "data")
        assert err.value.field == "dataset.path"


def test_femnist_default_path_under_data_dir_and_the_cache(femnist_dir: Path) -> None:
    data_dir = femnist_dir.parents[1]
    a = load_dataset("flwr_femnist", {}, data_dir=data_dir)  # path "flwrlabs/femnist" found under data_dir
    assert any(p.name.startswith("flwr_femnist-") for p in (data_dir / ".chillfl-cache").iterdir())
    b = load_dataset("flwr_femnist", {}, data_dir=data_dir)  # mapped from the cache
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)


def test_femnist_sampling_options(femnist_dir: Path) -> None:
    data_dir = femnist_dir.parents[1]
    ds = load_dataset("flwr_femnist", {"max_clients": 2, "train_fraction": 0.5}, data_dir=data_dir)
    # floor(0.5 * 10) = 5 train and 5 test samples for each of the first 2 writers
    assert [len(g) for g in ds.train_groups or ()] == [5, 5] and [len(g) for g in ds.test_groups or ()] == [5, 5]
    with pytest.raises(ConfigError) as err:
        load_dataset("flwr_femnist", {"min_samples": 11}, data_dir=data_dir)
    assert err.value.field == "dataset.min_samples"


def test_natural_id_partitioner_gives_the_natural_clients(femnist_dir: Path) -> None:
    ds = load_dataset("flwr_femnist", {}, data_dir=femnist_dir.parents[1])
    labels = ds.y_train.numpy()
    natural = partition("natural", labels, 3, np.random.default_rng(0), dataset=ds)
    flwr = partition("flwr", labels, 3, np.random.default_rng(0), {"partitioner": "NaturalIdPartitioner"}, dataset=ds)
    assert all(np.array_equal(a, b) for a, b in zip(natural.client_indices, flwr.client_indices))
    grouped = partition("flwr", labels, 2, np.random.default_rng(0), {"partitioner": "GroupedNaturalIdPartitioner", "options": {"group_size": 2}}, dataset=ds)
    assert [len(ix) for ix in grouped.client_indices] == [18, 9]  # writers {0, 1} and {2}: 9 train rows each
    with pytest.raises(ConfigError) as err:
        partition("flwr", labels, 3, np.random.default_rng(0), {"partitioner": "NaturalIdPartitioner", "options": {"partition_by": "writer_id"}}, dataset=ds)
    assert err.value.field == "partition.options.partition_by"
    with pytest.raises(ConfigError) as err:
        partition("flwr", labels, 4, np.random.default_rng(0), {"partitioner": "NaturalIdPartitioner"}, dataset=ds)
    assert err.value.field == "federation.num_clients" and "3 partitions" in err.value.message


def _config(data_dir: Path, dataset: dict, model: dict, partition_table: dict) -> dict:
    return {
        "data_dir": str(data_dir),
        "dataset": dataset,
        "partition": partition_table,
        "model": model,
        "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 2},
        "client": {"batch_size": 4, "epochs": 1},
        "eval": {"client_split": "natural", "clients": "all"},
    }


@pytest.mark.parametrize("table", [{"name": "natural"}, {"name": "flwr", "partitioner": "NaturalIdPartitioner"}], ids=["natural", "flwr"])
def test_femnist_by_writer_two_rounds_with_a_cnn(femnist_dir: Path, table: dict) -> None:
    from chillfl.api import run

    config = _config(femnist_dir.parents[1], {"name": "flwr_femnist"}, {"name": "flexchill_cnn"}, table)
    records = run(config=config, write=False, progress=False).records
    assert [r["round"] for r in records if "global_acc" in r][-1] == 2
    last = records[-1]
    assert 0.0 <= last["global_acc"] <= 1.0 and 0.0 <= last["local_acc"] <= 1.0


# ---------------------------------------------------------------- Shakespeare


def test_leaf_alphabet_and_encoding_by_hand() -> None:
    # LEAF_LETTERS: "\n"=0, " "=1, "!"=2, '"'=3, "&"=4, "'"=5, "("=6, ")"=7, ","=8, "-"=9, "."=10, "0".."9"=11..20,
    # ":"=21, ";"=22, ">"=23, "?"=24, "A".."Z"=25..50, "["=51, "]"=52, "a".."z"=53..78, "}"=79: 80 letters
    assert len(LEAF_LETTERS) == 80 and len(set(LEAF_LETTERS)) == 80
    x, unknown = encode_text(["Aa }", "\n0z~"])
    assert x.tolist() == [[25, 53, 1, 79], [0, 11, 78, 0]] and unknown == 1  # "~" is outside: index 0, counted
    with pytest.raises(ConfigError, match="different lengths"):
        encode_text(["ab", "abc"])


def test_shakespeare_speakers_and_temporal_split(tmp_path: Path) -> None:
    root = tmp_path / "data" / "flwrlabs" / "shakespeare"
    ys = write_shakespeare(root)
    ds = load_dataset("flwr_shakespeare", {}, data_dir=tmp_path / "data")
    assert ds.num_classes == 80 and tuple(ds.x_train.shape[1:]) == (80,) and ds.x_train.dtype == torch.float32
    # sorted speakers: HAMLET_HAMLET (6), KING_LEAR_FOOL (4), THE_TEMPEST_ARIEL (5);
    # train = the first max(1, floor(0.9 n)): floor(5.4) = 5, floor(3.6) = 3, floor(4.5) = 4; the rest test
    assert [len(g) for g in ds.train_groups or ()] == [5, 3, 4] and [len(g) for g in ds.test_groups or ()] == [1, 1, 1]
    for g, speaker in enumerate(sorted(SPEAKERS)):
        y = [LEAF_LETTERS[i] for i in ds.y_train[ds.train_groups[g]].tolist()] + [LEAF_LETTERS[i] for i in ds.y_test[ds.test_groups[g]].tolist()]
        assert y == ys[speaker]  # file order kept: the test sample is the speaker's last one
    first = _line(100 * 1 + 0)[:80]  # HAMLET_HAMLET's first window (speaker 1 in the file)
    assert ds.x_train[0].tolist() == [float(LEAF_LETTERS.index(c)) for c in first]


def test_shakespeare_two_rounds_with_the_char_lstm(tmp_path: Path) -> None:
    from chillfl.api import run

    write_shakespeare(tmp_path / "data" / "flwrlabs" / "shakespeare")
    config = _config(tmp_path / "data", {"name": "flwr_shakespeare"}, {"name": "char_lstm", "hidden": 16}, {"name": "natural"})
    records = run(config=config, write=False, progress=False).records
    assert [r["round"] for r in records if "global_acc" in r][-1] == 2
    assert 0.0 <= records[-1]["local_acc"] <= 1.0


def test_shakespeare_csv_as_the_hub_stores_it(tmp_path: Path) -> None:
    import pyarrow.csv as pcsv

    root = tmp_path / "shakespeare.csv"
    texts = [_line(j) for j in range(3)]
    texts[0] = "a,\"b\"\n" + texts[0][6:]  # commas, quotes and a newline inside x survive the CSV
    pcsv.write_csv(pa.table({"character_id": ["A", "A", "B"], "x": [t[:80] for t in texts], "y": ["1", "2", "3"]}), root)  # digits stay text
    ds = load_dataset("flwr_shakespeare", {"path": str(root), "train_fraction": 0.5}, data_dir=tmp_path)
    assert ds.x_train[0, :6].tolist() == [53.0, 8.0, 3.0, 54.0, 3.0, 0.0]  # a , " b " \n
    assert ds.y_train.tolist() == [12] and ds.y_test.tolist() == [13]  # "1" = 12, "2" = 13: characters, not numbers
    assert [len(g) for g in ds.train_groups or ()] == [1] and [len(g) for g in ds.test_groups or ()] == [1]  # B (1 sample) dropped


# ---------------------------------------------------------------- the hub, offline


def test_hub_name_offline_is_one_line_with_the_fetch_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as err:
        load_dataset("flwr_femnist", {}, data_dir=tmp_path)
    assert err.value.field == "dataset.path" and "\n" not in err.value.message
    assert f"hf download flwrlabs/femnist --repo-type dataset --local-dir {tmp_path / 'flwrlabs' / 'femnist'}" in err.value.message
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\ndata_dir = "{tmp_path}"\n[dataset]\nname = "flwr_shakespeare"\n')
    assert main(["run", str(config), "-q"]) == 2
    err_lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err_lines) == 1 and "dataset.path" in err_lines[0] and "flwrlabs/shakespeare" in err_lines[0]
    with pytest.raises(ConfigError, match="not found"):
        load_dataset("flwr_femnist", {"path": "./no/such/folder"}, data_dir=tmp_path)


def _no_offline_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.data import leaf_hub

    for var in (*leaf_hub.OFFLINE_VARS, *leaf_hub.PROXY_VARS, "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


def test_a_hub_whose_name_does_not_resolve_is_one_line_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no network and no offline flag: huggingface_hub retried 5 times over ~25 s, a log line each, before failing
    import socket

    from chillfl.data import leaf_hub

    _no_offline_flags(monkeypatch)
    looked_up = []

    def no_dns(host: str, port: int, *args: object) -> list[object]:
        looked_up.append((host, port))
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def no_hub_client(*args: object) -> None:
        raise AssertionError("the hub was tried")

    monkeypatch.setattr(leaf_hub.socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(leaf_hub, "need", lambda module, *args: no_hub_client() if module == "datasets" else __import__(module))
    with pytest.raises(Unreachable) as err:  # the network, not the input: no ConfigError
        load_dataset("flwr_femnist", {}, data_dir=tmp_path)
    assert err.value.field == "dataset.path" and "\n" not in err.value.message
    assert "the hub cannot be reached (huggingface.co does not resolve" in err.value.message and "hf download flwrlabs/femnist" in err.value.message
    assert looked_up == [("huggingface.co", 443)]
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.org/")  # huggingface_hub's own variable: its host is the one looked up
    assert leaf_hub.unreachable_hub() == "hub.example.org does not resolve: [Errno -2] Name or service not known"


class _Hub:
    """``datasets`` as the loader sees it, without the network: ``load_dataset`` raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def load_dataset(self, path: str, split: str) -> None:
        raise self.error


@pytest.mark.parametrize("how", ["no dns", "no connection"])
@pytest.mark.parametrize("command", ["run", "compare"])
def test_an_unreachable_hub_exits_1_with_one_line_and_writes_nothing(
    how: str, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No network is not bad input: it was exit 2, the code of a config to fix, where `chillfl data download` without
    network exits 1. The line still names dataset.path and the command that fetches the files."""
    import socket

    from chillfl.cli import main
    from chillfl.data import leaf_hub

    _no_offline_flags(monkeypatch)
    if how == "no dns":
        def no_dns(*args: object) -> list[object]:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

        monkeypatch.setattr(leaf_hub.socket, "getaddrinfo", no_dns)
    else:  # the name resolves, the connection fails: datasets' own ConnectionError
        monkeypatch.setattr(leaf_hub, "unreachable_hub", lambda: None)
    hub = _Hub(ConnectionError("Couldn't reach 'flwrlabs/shakespeare' on the Hub (ConnectError)"))
    monkeypatch.setattr(leaf_hub, "need", lambda module, *args: hub if module == "datasets" else __import__(module))
    config = tmp_path / "shakespeare.toml"
    config.write_text('[dataset]\nname = "flwr_shakespeare"\n[model]\nname = "char_lstm"\n[federation]\nnum_clients = 4\n'
                      "clients_per_round = 2\nrounds = 1\n", encoding="utf-8")
    args = [command, str(config), f"data_dir={tmp_path / 'none'}", f"out_dir={tmp_path / 'out'}", *(["--grid", "client.lr=0.1,0.2"] if command == "compare" else [])]
    assert main(args) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("chillfl: error: dataset.path: ") and "hf download flwrlabs/shakespeare" in err[0], err
    assert not (tmp_path / "out").exists() and not (tmp_path / "none").exists()
    assert main([*args, "--dry-run"]) == 0  # a dry run checks names and options, as offline
    assert "names and options checked" in capsys.readouterr().err


def test_a_hub_that_answers_no_such_dataset_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.data import leaf_hub

    _no_offline_flags(monkeypatch)
    monkeypatch.setattr(leaf_hub, "unreachable_hub", lambda: None)
    hub = _Hub(FileNotFoundError("Dataset 'me/nothing' doesn't exist on the Hub or cannot be accessed."))
    monkeypatch.setattr(leaf_hub, "need", lambda module, *args: hub if module == "datasets" else __import__(module))
    with pytest.raises(ConfigError) as err:
        load_dataset("flwr_shakespeare", {"path": "me/nothing"}, data_dir=tmp_path)
    assert err.value.field == "dataset.path" and "doesn't exist on the Hub" in err.value.message


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_dry_run_of_a_hub_dataset_offline_checks_names_and_options(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the files and without the hub, a dry run says what it could check (as without a data_dir's files), not
    the hub's error: the config may be right for the machine it will run on. A run still stops on that one line."""
    from chillfl.cli import main
    from chillfl.errors import DataAbsent

    _no_offline_flags(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = tmp_path / "shakespeare.toml"
    config.write_text('[dataset]\nname = "flwr_shakespeare"\n[model]\nname = "char_lstm"\n[federation]\nnum_clients = 4\n'
                      "clients_per_round = 2\nrounds = 1\n", encoding="utf-8")
    args = [command, str(config), "--dry-run", f"data_dir={tmp_path / 'none'}", f"out_dir={tmp_path / 'out'}"]
    assert main([*args, *(["--grid", "client.lr=0.1,0.2"] if command == "compare" else [])]) == 0
    out, err = capsys.readouterr()
    assert "the files of dataset 'flwr_shakespeare' are not in" in err and "names and options checked" in err
    assert 'name = "flwr_shakespeare"' in out and not (tmp_path / "out").exists()
    assert main([*args, "model.hidden=-1"]) == 2  # the names and options are still checked
    assert "model.hidden" in capsys.readouterr().err
    with pytest.raises(DataAbsent) as absent:
        load_dataset("flwr_shakespeare", {}, data_dir=tmp_path)
    assert absent.value.field == "dataset.path" and "the hub is offline" in absent.value.message


def test_the_hub_check_is_skipped_behind_a_proxy_and_passes_a_name_that_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from chillfl.data import leaf_hub

    _no_offline_flags(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # an address: resolved locally, no network
    assert leaf_hub.unreachable_hub() is None

    def no_dns(*args: object) -> list[object]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(leaf_hub.socket, "getaddrinfo", no_dns)
    monkeypatch.setenv("https_proxy", "http://proxy.internal:3128")  # the proxy may resolve what the local resolver cannot
    assert leaf_hub.unreachable_hub() is None


# ---------------------------------------------------------------- the model


def test_char_lstm_reference_size_and_one_step_by_hand() -> None:
    # embedding 80*8 = 640; layer 1: ih 8*1024 + 1024 = 9216, hh 256*1024 + 1024 = 263168; layer 2: ih and hh
    # 263168 each; head 256*80 + 80 = 20560. Total 640 + 9216 + 3*263168 + 20560 = 819920 (nn.LSTM's count too).
    assert count_parameters(build_model("char_lstm", (80,), 80)) == 819920
    model = build_model("char_lstm", (1,), 2, {"embed_dim": 1, "hidden": 1, "layers": 1})
    with torch.no_grad():
        model.embed.weight.copy_(torch.tensor([[0.0], [1.0]]))
        layer = model.lstm[0]
        layer.ih.weight.fill_(1.0), layer.ih.bias.zero_(), layer.hh.weight.zero_(), layer.hh.bias.zero_()
        model.head.weight.copy_(torch.tensor([[1.0], [-1.0]])), model.head.bias.zero_()
    # token 1 -> embedding 1 -> every gate pre-activation 1: i = f = o = sigmoid(1) = 0.7310586, g = tanh(1) = 0.7615942;
    # c = f * 0 + i * g = 0.7310586 * 0.7615942 = 0.5567699; h = o * tanh(c) = 0.7310586 * 0.5055769 = 0.3696064; logits (h, -h)
    out = model(torch.tensor([[1.0]]))
    torch.testing.assert_close(out, torch.tensor([[0.3696064, -0.3696064]]), rtol=0, atol=2e-6)


def test_char_lstm_forget_bias_is_leafs_basic_lstm_cell() -> None:
    # LEAF's BasicLSTMCell adds forget_bias = 1 to the forget gate: with every pre-activation 1 (as above),
    # f = sigmoid(2) = 0.8807971 does not touch c from zero state: c = i * g = 0.5567699, h = 0.3696064 again;
    # on a second step (token 1 again; hh is zero) c = f * c + i * g = 0.8807971 * 0.5567699 + 0.5567699 = 1.0471713,
    # h = o * tanh(c) = 0.7310586 * 0.7807042 = 0.5707405 (with forget_bias 0: f = 0.7310586, c = 0.9638014,
    # h = 0.7310586 * 0.7459677 = 0.5453461)
    def two_steps(forget_bias: float) -> torch.Tensor:
        model = build_model("char_lstm", (2,), 2, {"embed_dim": 1, "hidden": 1, "layers": 1, "forget_bias": forget_bias})
        with torch.no_grad():
            model.embed.weight.copy_(torch.tensor([[0.0], [1.0]]))
            layer = model.lstm[0]
            layer.ih.weight.fill_(1.0), layer.ih.bias.zero_(), layer.hh.weight.zero_(), layer.hh.bias.zero_()
            model.head.weight.copy_(torch.tensor([[1.0], [-1.0]])), model.head.bias.zero_()
        return model(torch.tensor([[1.0, 1.0]]))

    torch.testing.assert_close(two_steps(1.0), torch.tensor([[0.5707405, -0.5707405]]), rtol=0, atol=2e-6)
    torch.testing.assert_close(two_steps(0.0), torch.tensor([[0.5453461, -0.5453461]]), rtol=0, atol=2e-6)
    with pytest.raises(ConfigError, match="forget_bias"):
        build_model("char_lstm", (2,), 2, {"forget_bias": math.nan})


def test_char_lstm_equals_torch_lstm_gate_for_gate() -> None:
    model = build_model("char_lstm", (7,), 80, {"hidden": 6}, seed=0)
    ref = torch.nn.LSTM(8, 6, num_layers=2, batch_first=True)
    with torch.no_grad():
        for k, layer in enumerate(model.lstm):
            getattr(ref, f"weight_ih_l{k}").copy_(layer.ih.weight), getattr(ref, f"bias_ih_l{k}").copy_(layer.ih.bias)
            getattr(ref, f"weight_hh_l{k}").copy_(layer.hh.weight), getattr(ref, f"bias_hh_l{k}").copy_(layer.hh.bias)
    x = torch.randint(0, 80, (3, 7), generator=torch.Generator().manual_seed(1)).float()
    expected = model.head(ref(model.embed(x.long()))[0][:, -1])
    torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="char_lstm needs"):
        build_model("char_lstm", (1, 28, 28), 62)
