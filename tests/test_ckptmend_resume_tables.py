"""Stopped and resumed through version 4 checkpoints, a run of a method with per-client state is bitwise the
uninterrupted run.

Why: ``tests/test_resume_every_method.py`` runs 10 clients, below
:data:`~chillfl.storage.checkpoint_tables.TABLE_MIN_ROWS` (256), so none of its resumes ever wrote or read a
per-client table as columns; only SCAFFOLD, FedAvg and FedDyn did (``test_ckptv4_tables``). Here the threshold is
2 rows, so every checkpoint is version 4, and each case checks that its method's own per-client (or per-cluster)
state, not only the ledger's, went through a table on the read the resume made: personalised models (Ditto, APFL,
FedFomo's per-client uploads), prototypes (FedProto, also under the vectorised executor, whose client weights are
transposed: a tensor column with strides), a soft-label cache (SCARLET), IFCA's cluster models, FedChill's
per-client temperature with SCAFFOLD's control variates, and the local-DP accountant's per-client ledger. Each
checkpoint read is also compared with the version 2/3 read of the same state, bit for bit and stride for stride: a
layout lost in a column need not show in a tiny run's metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from chillfl.storage import checkpoint, checkpoint_tables
from resume_cases import check_resume
from test_ckptv4_tables import _document, _same_strides
from test_state_dicts import assert_same

LOCAL_DP = {"privacy.mechanism": "local", "privacy.delta": 1e-3, "privacy.noise_multiplier": 1.2}

CASES = [  # method, executor, stop after round, its own table in the checkpoint, more overrides
    pytest.param("algorithm.ditto", "sequential", 1, "protocol.clients", {}, id="ditto"),
    pytest.param("algorithm.apfl", "sequential", 2, "protocol.clients", {}, id="apfl"),
    pytest.param("algorithm.fedfomo", "sequential", 1, "protocol.aggregator.models", {}, id="fedfomo"),
    pytest.param("prototypes.fedproto", "sequential", 2, "protocol.proto_acc", {}, id="fedproto"),
    pytest.param("prototypes.fedproto", "vectorized", 1, "protocol.clients", {}, id="fedproto-vectorized"),
    pytest.param("distillation.scarlet", "sequential", 2, "protocol.cache.changes", {}, id="scarlet"),
    pytest.param("algorithm.ifca", "sequential", 1, "protocol.aggregator.models", {}, id="ifca"),
    pytest.param("temperature.fedchill+algorithm.scaffold", "sequential", 3, "protocol.clients", {}, id="fedchill-scaffold"),
    pytest.param("algorithm.fedavg", "sequential", 1, "protocol.privacy.units", LOCAL_DP, id="local-dp"),  # slow_tests.txt: opacus' import, 7 s
]


def _tables(node: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    """The dotted paths of a skeleton's table marks."""
    if isinstance(node, dict):
        if len(node) == 1 and checkpoint_tables.TABLE_MARK in node:
            yield ".".join(path)
            return
        for key, value in node.items():
            yield from _tables(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _tables(value, (*path, str(i)))


@pytest.mark.parametrize(("method", "executor", "stop", "table", "extra"), CASES)
def test_a_resume_through_version_4_tables_is_bitwise_the_uninterrupted_run(
    method: str, executor: str, stop: int, table: str, extra: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint_tables, "TABLE_MIN_ROWS", 2)  # two clients a round: every per-client mapping a table from round 1
    written: list[int] = []
    as_json: dict[int, bytes] = {}  # round -> the same state written without tables (version 2/3), its latest checkpoint
    read: list[tuple[int, int, set[str]]] = []  # (version, round, table paths) of each checkpoint decoded
    encode, decode = checkpoint.encode_state, checkpoint.decode_checkpoint

    def encode_seen(tree: Any, *args: Any, **kwargs: Any) -> bytes:
        data = encode(tree, *args, **kwargs)
        written.append(_document(data)["version"])
        with monkeypatch.context() as tables_off:
            tables_off.setattr(checkpoint_tables, "TABLE_MIN_ROWS", 10**9)
            as_json[tree["round"]] = encode(tree, *args, **kwargs)
        return data

    def decode_seen(data: bytes, *args: Any, **kwargs: Any) -> Any:
        doc = _document(data)
        done = doc["tree"]["round"]
        read.append((doc["version"], done, set(_tables(doc["tree"]))))
        tree, run = decode(data, *args, **kwargs)
        old_tree, old_run = decode(as_json[done], *args, **kwargs)  # the version 2/3 read of the same state, strides included
        assert_same((tree, run), (old_tree, old_run))
        _same_strides(tree, old_tree)
        return tree, run

    monkeypatch.setattr(checkpoint, "encode_state", encode_seen)
    monkeypatch.setattr(checkpoint, "decode_checkpoint", decode_seen)
    check_resume(method, executor, stop, tmp_path, monkeypatch, **extra)  # metrics.jsonl and the model files byte for byte
    assert written and set(written) == {4}, written
    assert read and all(version == 4 for version, _, _ in read), read
    resumed_from = [paths for _, done, paths in read if done == stop]
    assert resumed_from and all(table in paths for paths in resumed_from), (table, resumed_from)
