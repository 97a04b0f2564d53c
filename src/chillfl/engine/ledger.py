"""Communication ledger: every byte that crosses the network, per round, direction and kind.

SCARLET measures "cumulative communication cost ... the total amount of data
exchanged between the server and clients, including soft-labels and other
parameters, summed over all clients across communication rounds", excluding
the one-time download of the public set (Section IV-A, Evaluation Metrics),
and reports accuracy against it (Figs. 7-10) and the cost to reach a target
accuracy. Both round protocols (parameter sharing and soft-label sharing)
record into one :class:`CommunicationLedger` so that methods compare on the
same axis.

Byte conventions (the helpers below):

* tensors: ``numel * element_size`` (real dtype), or ``ceil(numel * bits / 8)``
  for a payload quantised to ``bits`` per element (CFD) -- rounded up to whole
  bytes once per message, not per element;
* indices: 4 bytes each (int32), or packed ``ceil(log2(universe))`` bits each,
  rounded up per message (``index_encoding="packed"``);
* cache signals: 2 bits each (three values: NEWLY_CACHED / CACHED / EXPIRED),
  rounded up per message;
* a method's scalars (a report's or context's Python floats and ints): 8 bytes
  each, as a float64 / int64 (``protocols.common.state_bytes``).

Choices
-------
* Default index encoding is int32: it is what a plain implementation puts on
  the wire and it overstates SCARLET's overhead rather than understating it.
  ``"packed"`` (ceil(log2 |P|) bits, 14 bits for |P| = 10,000) is the
  information-theoretic alternative.
* Message headers, framing, the protocol's fixed fields every method sends
  alike (round, lr, temperature, seeds, sample counts, training loss) and the
  cluster ids COMET sends are not counted
  (SCARLET Appendix B counts COMET's assignment as free).
* Evaluation-only traffic is not counted: ``eval.clients = "all"`` scores
  the global model on every client's split (clients not sampled that round
  included), and ``local_eval = "averaged"`` evaluates the clients' personal
  models on the server after the average (from their kept states). A
  deployment would pay for both; they measure the method, they are not part
  of its training, and counting them would make a method's bytes depend on
  how it is evaluated.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import torch

from chillfl.numeric import is_whole
from chillfl.options import require
from chillfl.state_keys import check_state_keys

Direction = Literal["up", "down"]
IndexEncoding = Literal["int32", "packed"]

DIRECTIONS: tuple[str, ...] = ("up", "down")
KINDS: tuple[str, ...] = ("params", "soft_labels", "indices", "cache_signals", "sync", "control", "other")
"""Kinds in common use; any non-empty name is accepted."""

SIGNAL_BITS = 2


@dataclass(frozen=True)
class LedgerOptions:
    """How indices are encoded when bytes are counted (``[communication]`` table)."""

    index_encoding: IndexEncoding = "int32"

    def validate(self, section: str) -> None:
        require(
            self.index_encoding in ("int32", "packed"),
            f"{section}.index_encoding",
            f"unknown value {self.index_encoding!r}; allowed: int32, packed",
        )


def tensor_bytes(t: torch.Tensor, bits: int | None = None) -> int:
    """Bytes of one tensor payload: real element size, or ``bits`` per element rounded up per message."""
    if bits is None:
        return t.numel() * t.element_size()
    if bits < 1:
        raise ValueError(f"bits must be >= 1, got {bits}")
    return math.ceil(t.numel() * bits / 8)


def index_bits(universe: int) -> int:
    """Bits per index when packed: ceil(log2(universe)), at least 1."""
    if universe < 1:
        raise ValueError(f"universe must be >= 1, got {universe}")
    return max(1, math.ceil(math.log2(universe)))


def index_bytes(n: int, universe: int | None = None, encoding: IndexEncoding = "int32") -> int:
    """Bytes for ``n`` indices into a set of size ``universe``: 4 each (int32) or packed bits rounded up per message."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if encoding == "int32":
        return 4 * n
    if encoding == "packed":
        if universe is None:
            raise ValueError("packed index encoding needs the universe size")
        return math.ceil(n * index_bits(universe) / 8)
    raise ValueError(f"unknown index encoding {encoding!r}; allowed: int32, packed")


def signal_bytes(n: int) -> int:
    """Bytes for ``n`` cache signals at 2 bits each, rounded up per message."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return math.ceil(n * SIGNAL_BITS / 8)


class CommunicationLedger:
    """Byte counts of the run so far, of its latest round and of each client, per (direction, kind).

    Kept as running totals (no per-message list, no per-round table), so both
    the ledger and its checkpoint stay the same size however many rounds a run
    has: a checkpoint written at round 10,000 is as small as one at round 10,
    and a round's ``bytes_cumulative`` costs no re-summing of past rounds.
    Each round's own bytes are in its record (``bytes_up``, ``bytes_down``,
    ``bytes_detail``, ``bytes_cumulative``), which is where curves and the
    cost to reach a target accuracy are read from
    (:mod:`chillfl.metrics.communication`). Keys of the dicts returned by
    :meth:`round_totals` and :meth:`cumulative`: ``"up"``, ``"down"``,
    ``"total"`` and ``"<direction>.<kind>"`` (e.g. ``"up.soft_labels"``).
    """

    def __init__(self) -> None:
        self._total: dict[tuple[str, str], int] = defaultdict(int)
        self._latest: int | None = None
        """The latest round with a record: the only one whose cells are kept (``_round``)."""
        self._round: dict[tuple[str, str], int] = defaultdict(int)
        self._by_client: dict[int, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))

    def record(self, round: int, direction: Direction, kind: str, nbytes: int, client_id: int | None = None) -> None:
        """Add one message of ``nbytes`` sent in ``direction`` during ``round`` (``client_id``: the client end).

        Rounds come in order: a record for a round before the latest one is refused (its cells are gone)."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
        if not kind:
            raise ValueError("kind must be a non-empty string")
        if isinstance(nbytes, bool) or int(nbytes) != nbytes or nbytes < 0:
            raise ValueError(f"nbytes must be a non-negative integer, got {nbytes!r}")
        round = int(round)
        if self._latest is None or round > self._latest:
            self._latest, self._round = round, defaultdict(int)
        elif round < self._latest:
            raise ValueError(f"round {round} recorded after round {self._latest}: the ledger keeps only the latest round")
        key = (direction, kind)
        self._round[key] += int(nbytes)
        self._total[key] += int(nbytes)
        if client_id is not None:
            self._by_client[int(client_id)][key] += int(nbytes)

    @staticmethod
    def _totals(cells: Mapping[tuple[str, str], int]) -> dict[str, int]:
        out: dict[str, int] = {"up": 0, "down": 0, "total": 0}
        for (direction, kind), nbytes in sorted(cells.items()):
            out[f"{direction}.{kind}"] = out.get(f"{direction}.{kind}", 0) + nbytes
            out[direction] += nbytes
            out["total"] += nbytes
        return out

    @property
    def latest_round(self) -> int | None:
        """The latest round with a record (None before the first)."""
        return self._latest

    def round_totals(self, round: int) -> dict[str, int]:
        """Bytes of one round: up, down, total and per ``direction.kind`` (zeros for a round with no record yet).

        Only the latest round's cells are kept: asking for an earlier round raises ValueError
        (its bytes are in its record)."""
        round = int(round)
        if self._latest is not None and round < self._latest:
            raise ValueError(f"round {round} is before the latest round {self._latest}: the ledger keeps only the latest round")
        return self._totals(self._round if round == self._latest else {})

    def client_totals(self, client_id: int) -> dict[str, int]:
        """Bytes exchanged with one client over the whole run (records that named it)."""
        return self._totals(self._by_client.get(int(client_id), {}))

    def cumulative(self) -> dict[str, int]:
        """Totals over every round so far."""
        return self._totals(self._total)

    # ---- checkpoints -----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The running totals: ``{"total": {"<direction>.<kind>": bytes}, "latest": {str(round): {...}}, "clients": {str(cid): {...}}}``.

        ``latest`` holds the latest round's cells (empty before the first record).
        Directions never contain a dot, so ``"up.a.b"`` splits back into
        ("up", "a.b"); insertion order is kept.
        """
        return {
            "total": self._cells_state(self._total),
            "latest": {} if self._latest is None else {str(self._latest): self._cells_state(self._round)},
            "clients": {str(c): self._cells_state(cells) for c, cells in self._by_client.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; also the per-round table of an older chillfl
        (``{"rounds": ..., "clients": ...}``), summed into the totals on load."""
        if set(state) == {"rounds", "clients"}:
            rounds = self._load_table(state["rounds"])
            total: dict[tuple[str, str], int] = defaultdict(int)
            for r in sorted(rounds):
                for key, nbytes in rounds[r].items():
                    total[key] += nbytes
            latest = {max(rounds): rounds[max(rounds)]} if rounds else {}
        else:
            check_state_keys(state, ("total", "latest", "clients"), "CommunicationLedger")
            total = self._load_cells(state["total"])
            latest = self._load_table(state["latest"])
            if len(latest) > 1:
                raise ValueError(f"CommunicationLedger state must hold at most one latest round, got {len(latest)}")
        by_client = self._load_table(state["clients"])
        self._total, self._by_client = total, by_client
        self._latest, self._round = next(iter(latest.items()), (None, defaultdict(int)))

    @staticmethod
    def _cells_state(cells: Mapping[tuple[str, str], int]) -> dict[str, int]:
        return {f"{direction}.{kind}": int(nbytes) for (direction, kind), nbytes in cells.items()}

    @staticmethod
    def _load_cells(cells: Mapping[str, Any]) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = defaultdict(int)
        for name, nbytes in cells.items():
            direction, _, kind = str(name).partition(".")
            if direction not in DIRECTIONS or not kind:
                raise ValueError(f"ledger cell {name!r} is not '<up|down>.<kind>'")
            if not is_whole(nbytes) or nbytes < 0:
                raise ValueError(f"ledger cell {name!r} must hold a non-negative integer, got {nbytes!r}")
            out[(direction, kind)] = nbytes
        return out

    @classmethod
    def _load_table(cls, table: Mapping[str, Any]) -> dict[int, dict[tuple[str, str], int]]:
        out: dict[int, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
        for key, cells in table.items():
            out[int(key)] = cls._load_cells(cells)
        return out
