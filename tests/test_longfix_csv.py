"""The CSV sink appends: a round that draws clients not seen before rewrites nothing (report-longrun finding 1).

Before, each client was a column of ``metrics.csv`` (``client_train_loss/<id>``), and every round that brought a new
one rewrote the whole file: a run of thousands of clients spent its late rounds rewriting the CSV. The tables are now
lines of ``metrics_clients.csv`` (``round,key,client,value``), appended; ``metrics.csv`` holds the record's own numbers.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

from chillfl.sinks import CLIENTS_CSV_FILE, CLIENTS_HEADER, CSV_FILE, CsvSink, clients_path, table_cells


def records(rounds: int = 30, clients: int = 200, per_round: int = 5, seed: int = 0) -> list[dict[str, Any]]:
    """Records as a run keeps them in memory: client tables in id order (``client_train_loss`` keyed by text, the
    aggregator's ``agg_scores`` by int), new clients in most rounds, an evaluation column from round 3 on."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for rnd in range(1, rounds + 1):
        drawn = sorted(rng.sample(range(clients), per_round))
        record: dict[str, Any] = {"round": rnd, "clients": drawn, "train_loss": rng.random(), "bytes_up": rnd * 1000,
                                  "client_train_loss": {str(c): rng.random() for c in drawn}, "agg_scores": {c: rng.random() for c in drawn}}
        if rnd >= 3:
            record["global_acc"] = rng.random()
        out.append(record)
    return out


def read_back(records_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as a resume reads them from ``metrics.jsonl`` (``sort_keys``: table keys as text, in text order)."""
    return [json.loads(json.dumps(r, sort_keys=True)) for r in records_]


def test_new_clients_every_round_only_append(tmp_path: Path) -> None:
    """Each round's write leaves what both files held before as it was (append-only), though nearly every round draws
    clients never seen before; the old sink rewrote metrics.csv (a new column) on each such round."""
    path = tmp_path / CSV_FILE
    stream = records()
    sink = CsvSink(path)
    assert clients_path(path) == tmp_path / CLIENTS_CSV_FILE
    new_clients, seen = 0, set()
    before = {p: p.read_bytes() for p in (path, clients_path(path))}
    for record in stream:
        new_clients += bool(set(record["clients"]) - seen)
        seen |= set(record["clients"])
        sink.on_round(record)
        after = {p: p.read_bytes() for p in before}
        if record["round"] not in (1, 3):  # round 1's and 3's numbers (the first evaluation) are new columns of metrics.csv
            assert after[path].startswith(before[path]) and len(after[path]) > len(before[path]), record["round"]
        assert after[clients_path(path)].startswith(before[clients_path(path)]), record["round"]
        before = after
    assert new_clients >= 25  # the case the finding is about: new clients in (nearly) every round
    rows = list(csv.reader(path.open(newline="")))
    assert rows[0] == ["round", "bytes_up", "global_acc", "train_loss"]  # no column per client
    assert [r[0] for r in rows[1:]] == [str(r["round"]) for r in stream]


def test_the_clients_file_holds_every_table_cell_long_format(tmp_path: Path) -> None:
    """One line per table, client and round, tables by key and clients by id within a round, values as metrics.jsonl's."""
    stream = records(rounds=3, clients=30)
    sink = CsvSink(tmp_path / "m.csv")
    for record in stream:
        sink.on_round(record)
    lines = list(csv.reader((tmp_path / "m_clients.csv").open(newline="")))
    assert lines[0] == list(CLIENTS_HEADER)
    expected = [[str(r["round"]), key, str(c), repr(r[key][c if key == "agg_scores" else str(c)])]
                for r in stream for key in ("agg_scores", "client_train_loss") for c in r["clients"]]
    assert lines[1:] == expected


def test_clients_in_id_order_whether_read_back_or_in_memory() -> None:
    """``2`` before ``10``: the in-memory order; metrics.jsonl's sorted keys read back put ``"10"`` first."""
    record = {"round": 1, "t": {"10": 0.5, "2": 0.25, "x": 1.0, "-1": 3, "02": 4.0}, "a": {10: 1, 2: 2}}
    assert [(c.key, c.client) for c in table_cells(record)] == [("a", "2"), ("a", "10"), ("t", "-1"), ("t", "2"), ("t", "10"), ("t", "02"), ("t", "x")]
    assert table_cells(record) == table_cells(json.loads(json.dumps(record, sort_keys=True)))


def test_a_resumed_sinks_files_equal_the_uninterrupted_ones(tmp_path: Path) -> None:
    """A resume's sink starts from the rounds up to its checkpoint, read back from metrics.jsonl (keys as sorted text),
    and writes both files again from them: byte for byte what the sink of the run that never stopped wrote."""
    stream = records()
    (tmp_path / "whole").mkdir()
    whole = CsvSink(tmp_path / "whole" / CSV_FILE)
    for record in stream:
        whole.on_round(record)
    (tmp_path / "resumed").mkdir()
    stopped = CsvSink(tmp_path / "resumed" / CSV_FILE)
    for record in stream[:14]:  # it ran to round 14 and stopped; its checkpoint is at round 10
        stopped.on_round(record)
    resumed = CsvSink(tmp_path / "resumed" / CSV_FILE, read_back(stream[:10]))
    for record in stream[10:]:
        resumed.on_round(record)
    for name in (CSV_FILE, CLIENTS_CSV_FILE):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_tables_non_finite_value_gives_the_same_files_after_a_resume(tmp_path: Path) -> None:
    """metrics.jsonl keeps a table's NaN or inf as null (only the record's own values are marked), so a resumed run read
    them back as None: the uninterrupted sink wrote ``1,local_losses,1,inf`` and the resumed one had no such line
    (rev104a 3). A table's non-finite value has no line now, in memory as read back."""
    from chillfl.storage.jsonl import decode_record, encode_record

    stream = records(rounds=12, clients=20)
    stream[3]["client_train_loss"][next(iter(stream[3]["client_train_loss"]))] = float("inf")
    stream[4]["agg_scores"][next(iter(stream[4]["agg_scores"]))] = float("nan")
    from_disk = [decode_record(json.loads(json.dumps(encode_record(r), sort_keys=True))) for r in stream[:8]]
    (tmp_path / "whole").mkdir()
    whole = CsvSink(tmp_path / "whole" / CSV_FILE)
    for record in stream:
        whole.on_round(record)
    (tmp_path / "resumed").mkdir()
    resumed = CsvSink(tmp_path / "resumed" / CSV_FILE, from_disk)
    for record in stream[8:]:
        resumed.on_round(record)
    for name in (CSV_FILE, CLIENTS_CSV_FILE):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    text = (tmp_path / "whole" / CLIENTS_CSV_FILE).read_text()
    assert "inf" not in text and "nan" not in text
