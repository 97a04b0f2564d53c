"""One round's record: what a protocol's server update returns and ``metrics.jsonl`` holds, line by line.

The fields every protocol fills are typed attributes; what only some
protocols measure (traffic detail, SCARLET's cache, prototypes' accuracy,
evaluation on rounds that evaluate) goes into :attr:`RoundRecord.metrics`,
and the aggregator's own numbers into :attr:`RoundRecord.method`, written with
the ``agg_`` prefix. Every value is plain JSON (:data:`Json`), so the line is
the same bytes whichever executor or runtime made it (the writer sorts keys).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

Json = Union[None, bool, int, float, str, Sequence["Json"], Mapping[str, "Json"], Mapping[int, "Json"]]
"""A value ``json.dumps`` writes as it is (tables keyed by client id are written in client-id order)."""

METHOD_PREFIX = "agg_"
"""How the method section's keys appear in ``metrics.jsonl`` (``agg_fgn``, ``agg_clp``, ...)."""


@dataclass
class RoundRecord:
    """One round: who trained, at which lr and temperature, with which loss, and every metric the protocol took."""

    round: int
    """1-based round number."""
    clients: list[int]
    """The clients that trained this round, in client-id order (empty for a skipped round)."""
    lr: float | None = None
    train_loss: float | None = None
    """Sample-weighted mean of the clients' training losses."""
    temperature_mean: float | None = None
    client_train_loss: dict[str, float] | None = None
    metrics: dict[str, Json] = field(default_factory=dict)
    """The protocol's other measurements: traffic, temperatures, local and global evaluation, ..."""
    method: Mapping[str, Json] = field(default_factory=dict)
    """The aggregator's round metrics (PA3Fed's FGN and CLP flag, SCAFFOLD's control norm, ...)."""

    def to_json(self) -> dict[str, Json]:
        """The ``metrics.jsonl`` line as a dict (fields left at None are not written)."""
        out: dict[str, Json] = {"round": self.round, "clients": list(self.clients)}
        for name, value in (("lr", self.lr), ("train_loss", self.train_loss), ("temperature_mean", self.temperature_mean)):
            if value is not None:
                out[name] = value
        if self.client_train_loss is not None:
            out["client_train_loss"] = dict(self.client_train_loss)
        out.update(self.metrics)
        out.update({f"{METHOD_PREFIX}{k}": v for k, v in self.method.items()})
        return out


def round_number(record: Mapping[str, Json]) -> int:
    """The 1-based round of a record as ``metrics.jsonl`` holds it."""
    value = record["round"]
    if not isinstance(value, int):
        raise TypeError(f"a record's round must be an int, got {value!r}")
    return value
