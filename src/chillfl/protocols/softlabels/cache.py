"""The synchronized soft-label cache (SCARLET Algorithm 2): the server's and each client's copy.

Checked against papers/scarlet.txt Algorithms 1-2 and Sec. III-C, and kitsuyaazuma/SCARLET ``algorithm/scarlet.py`` (``get_next_indices``, ``update_global_cache``, ``update_local_cache``), 2026-12-02.

Its messages (the downlink's signals, the catch-up delta) are in :mod:`.messages`.

One round ``t`` of the soft-label protocol, as the engine drives it::

    I_t   = sorted draw of public indices (P^t)
    req   = server.request(t, I_t)                     # I_req^t: not validly cached -> SoftLabelRequest
    ... participating clients upload soft-labels on req (SoftLabelUplink) ...
    fresh = enhanced_era(stack of uploads, beta)        # aggregated, in the order of req
    upd   = server.update(t, I_t, fresh)                # upd.soft_labels: full zhat^t for the server's own
                                                        # distillation; upd.downlink: SoftLabelDownlink
    # next round, for each participating client k (before it distils on P^t):
    delta = server.sync(k, t)                           # catch-up for rounds k missed (empty if none)
    clients[k].apply_sync(delta)
    zhat  = clients[k].rebuild(upd.downlink)            # == upd.soft_labels, row for row

Signals (gamma^t in Algorithm 2), one per index of I^t:

* NEWLY_CACHED -- fresh soft-label in the downlink; store it;
* CACHED       -- read the soft-label from the local cache;
* EXPIRED      -- fresh soft-label in the downlink; delete the local entry
  (``on_expire="drop"``, the paper's pseudo-code).

Choices
-------
* **One validity rule.** An entry stored at round t_c is valid at round t iff
  ``t - t_c <= D``. The same predicate decides the request (I_req^t) and the
  signal. Algorithm 1's pseudo-code requests only ``i not in dom(C_g)``, which
  ignores expiry, yet UPDATELOCALCACHE pops a *fresh* soft-label for an
  EXPIRED index -- one the server never asked for. The prose (Section III-C:
  "Only the samples that are not cached (either not previously stored or whose
  entries have expired) are selected for soft-label updates") resolves it:
  expired entries are requested again. Algorithm 2's ``t - t_c <= D`` is the
  rule used for both by default. Entry stored at t_c: CACHED at t_c + 1 ...
  t_c + D, expired at t_c + D + 1.
* **The authors' request rule** (``request="authors"``, off by default). The
  authors' code (``get_next_indices``) requests an index unless
  ``t_c + D > t``, but signals with ``t - t_c <= D`` (``update_global_cache``):
  at the edge round t = t_c + D the index is requested (the clients upload a
  soft-label for it) and yet signalled CACHED, the entry kept as stored at t_c.
  The fresh row then goes nowhere: the downlink carries only the rows of
  non-CACHED signals, and zhat^t holds the cached row for server and clients
  alike (the authors' server distils on the fresh row at that edge while its
  clients read the cached one; here the two stay one zhat^t, which the
  clients' digest check relies on). D = 0 is the same under both rules.
* **D = 0 is no cache.** Every drawn index is requested every round (an entry is
  only valid in the round it was stored), so the soft-label traffic is that of
  the baseline; the signals are the only extra bytes and an engine may skip
  them when ``duration == 0`` (:attr:`ServerCache.caching`).
* **Expiry.** ``on_expire="drop"`` (default, Algorithm 2): the fresh value is
  used this round, the entry is deleted on both sides and re-cached the next
  time the index is drawn. ``"refresh"``: the fresh value replaces the entry
  with timestamp t and the signal is NEWLY_CACHED, so clients need no option.
* **Partial participation.** A client that missed downlinks cannot read its
  cache. The server keeps, per client, the last round whose downlink it
  applied, and :meth:`ServerCache.sync` returns the entries stored (and the
  deletions made) strictly between that round and the downlink about to be
  applied -- changes in the downlink's own round travel in the downlink.
  Deletions are sent only for entries the client actually holds (the server
  keeps the lifetimes of dropped entries until every known client has synced
  past them). Delta bytes:
  indices of all items + soft-labels of stored items (kind ``"sync"``).
  Eager: the whole catch-up, drawn again or not (the authors' ``cache_update_by_client`` updates only the round's
  public indices, from a server copy of every client's cache); at low participation it can cost more bytes than
  no cache (docs/scarlet.md), and the change log is kept back to the oldest round a client that took part synced to.
  A sync reads only the log's rounds the client missed, or, when those hold more than the cache, the live entries
  and the lifetimes: O(min(changes missed, |P|)), never O(rounds kept).
* **Quantised downlinks.** The cache stores what ``update`` is given; if the
  downlink is quantised, pass the *dequantised* values so that both caches
  hold identical numbers.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import numpy as np
import torch

from chillfl.errors import ConfigError
from chillfl.options import require
from chillfl.state_keys import check_state_keys

from .messages import CacheSignal, CacheSyncDelta, SoftLabelDownlink

OnExpire = Literal["drop", "refresh"]
RequestRule = Literal["valid", "authors"]
"""Which entries are requested again: ``"valid"`` those not valid (t - t_c > D, Algorithm 2); ``"authors"`` also the
edge t - t_c = D (the SCARLET authors' ``t_c + D > t``)."""


class CacheOutOfSyncError(RuntimeError):
    """A client cache was asked to apply a downlink it is not synchronised for."""


def is_valid(stored_round: int | np.ndarray, round: int, duration: int) -> bool | np.ndarray:
    """The one validity rule: an entry stored at ``stored_round`` is valid at ``round`` iff round - stored_round <= D.

    Works elementwise on numpy arrays (used by the Fig. 3 simulation).
    """
    return round - stored_round <= duration


def is_served(stored_round: int, round: int, duration: int, request: RequestRule = "valid") -> bool:
    """Whether an entry stored at ``stored_round`` is served at ``round`` without a request: valid (:func:`is_valid`),
    or under ``request="authors"`` ``stored_round + D > round``, one round shorter."""
    if request == "authors":
        return stored_round + duration > round
    return bool(is_valid(stored_round, round, duration))


@dataclass(frozen=True)
class CacheOptions:
    """Cache options: ``duration`` = D (SCARLET Sec. IV: 50 in the main runs, 25 when plugged into other methods);
    ``request``: which entries are requested again (:data:`RequestRule`)."""

    duration: int = 50
    on_expire: OnExpire = "drop"
    request: RequestRule = "valid"

    def validate(self, section: str) -> None:
        require(0 <= self.duration <= 10**7, f"{section}.duration", f"must be in [0, 10000000] rounds, got {self.duration}")
        require(
            self.on_expire in ("drop", "refresh"),
            f"{section}.on_expire",
            f"unknown value {self.on_expire!r}; allowed: drop, refresh",
        )
        require(self.request in ("valid", "authors"), f"{section}.request", f"unknown value {self.request!r}; allowed: valid, authors")


def _as_index_tensor(indices: torch.Tensor | list[int]) -> torch.Tensor:
    idx = torch.as_tensor(indices, dtype=torch.long).flatten()
    if idx.numel() != torch.unique(idx).numel():
        raise ValueError("public indices of one round must be distinct")
    return idx


@dataclass(frozen=True)
class CacheUpdate:
    """Result of :meth:`ServerCache.update`: the full zhat^t (rows in I^t order) and the downlink to broadcast.

    ``cached_age``: mean age t - t_c (rounds, 1..D) of the rows served from the
    cache this round, None when none was: how stale the targets are.
    """

    soft_labels: torch.Tensor
    downlink: SoftLabelDownlink
    cached_age: float | None = None
    num_cached: int = 0
    """Rows of I^t served from the cache (signalled CACHED): under ``request="authors"`` the edge rows too, which
    were requested as well, so ``|I^t| - |I_req^t|`` undercounts them."""


def _rows_state(values: list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """Cached rows as one stacked tensor (one safetensors entry, not thousands) when they share shape and dtype."""
    if values and all(v.shape == values[0].shape and v.dtype == values[0].dtype and v.device == values[0].device for v in values):
        return torch.stack(values)
    return list(values) if values else torch.empty((0, 0))


def _load_rows(state: Any, n: int) -> list[torch.Tensor]:
    """Inverse of :func:`_rows_state`; each row gets its own storage, as the cache's clones had, on the host.

    The caches live on the host, as the soft-labels they hold travel (messages); a checkpoint read
    onto the run's device must not bring them to it (a GPU resume mixed devices in the next rebuild)."""
    if isinstance(state, torch.Tensor) and state.dim() >= 1:
        rows = list(state.unbind(0))
    elif isinstance(state, list) and all(isinstance(r, torch.Tensor) for r in state):
        rows = list(state)
    else:
        raise ValueError(f"cache state: soft-label rows must be a stacked tensor or a list of tensors, got {type(state).__name__}")
    if len(rows) != n:
        raise ValueError(f"cache state holds {len(rows)} soft-label rows for {n} indices")
    return [r.to("cpu", copy=True) for r in rows]


def _int_list(state: Any, name: str) -> list[int]:
    if isinstance(state, torch.Tensor):
        return [int(v) for v in state.tolist()]
    raise ValueError(f"cache state entry {name!r} must be an integer tensor, got {type(state).__name__}")


def _life_end(life: tuple[int, int]) -> int:
    return life[1]


def _covering_end(lives: list[tuple[int, int]], round: int) -> int | None:
    """The end of the index's past lifetime ``(stored, deleted)`` that covers ``round`` (stored <= round < deleted), or
    None if none does: a client synced through ``round`` held that entry, and the server has since dropped it.

    A lifetime is appended when its entry is dropped, rounds increasing, and the next one starts after it ended, so
    they are sorted and disjoint: only the first that ended after ``round`` can cover it (a bisection, not a scan of
    every lifetime the index had)."""
    j = bisect.bisect_right(lives, round, key=_life_end)
    return lives[j][1] if j < len(lives) and lives[j][0] <= round else None


@dataclass
class _Entry:
    value: torch.Tensor
    stored_round: int


@dataclass
class ServerCache:
    """The global cache C_g (Algorithm 2, UPDATEGLOBALCACHE) plus per-client sync bookkeeping."""

    duration: int
    on_expire: OnExpire = "drop"
    request_rule: RequestRule = "valid"
    """Which entries :meth:`request` asks for again (:data:`RequestRule`); the signals follow Algorithm 2 under both."""
    _entries: dict[int, _Entry] = field(default_factory=dict, init=False, repr=False)
    # index -> past lifetimes (stored_round, deleted_round) of dropped entries, for catch-up deletions
    _lifetimes: dict[int, list[tuple[int, int]]] = field(default_factory=dict, init=False, repr=False)
    _synced: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    # round -> indices stored or deleted in that round (for catch-up deltas)
    _changes: dict[int, set[int]] = field(default_factory=dict, init=False, repr=False)
    _last_round: int | None = field(default=None, init=False, repr=False)
    # the oldest sync round the change log was last pruned to (None: not since made or loaded); not checkpointed
    _pruned_through: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.duration < 0:
            raise ConfigError("cache.duration", f"must be >= 0, got {self.duration}")
        if self.on_expire not in ("drop", "refresh"):
            raise ConfigError("cache.on_expire", f"unknown value {self.on_expire!r}; allowed: drop, refresh")
        if self.request_rule not in ("valid", "authors"):
            raise ConfigError("cache.request", f"unknown value {self.request_rule!r}; allowed: valid, authors")

    @classmethod
    def from_options(cls, options: CacheOptions) -> "ServerCache":
        return cls(duration=options.duration, on_expire=options.on_expire, request_rule=options.request)

    @property
    def caching(self) -> bool:
        """False when D = 0: nothing is ever served from the cache (the traffic of a method without the cache)."""
        return self.duration > 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, index: int) -> bool:
        return int(index) in self._entries

    def entries(self) -> dict[int, torch.Tensor]:
        """Snapshot index -> cached soft-label."""
        return {i: e.value for i, e in self._entries.items()}

    def stored_round(self, index: int) -> int | None:
        e = self._entries.get(int(index))
        return None if e is None else e.stored_round

    def _served(self, index: int, round: int) -> bool:
        """Served from the cache at ``round`` without a request (:func:`is_served` under :attr:`request_rule`)."""
        e = self._entries.get(index)
        return e is not None and is_served(e.stored_round, round, self.duration, self.request_rule)

    def request(self, round: int, indices: torch.Tensor | list[int]) -> torch.Tensor:
        """I_req^t: the indices of P^t not served from the cache at ``round`` (no valid entry; under ``request_rule =
        "authors"`` also the edge t - t_c = D), in the order given."""
        idx = _as_index_tensor(indices)
        keep = [i for i in idx.tolist() if not self._served(i, round)]
        return torch.tensor(keep, dtype=torch.long)

    def update(self, round: int, indices: torch.Tensor | list[int], fresh: torch.Tensor) -> CacheUpdate:
        """UPDATEGLOBALCACHE for round t: store fresh rows, emit gamma^t, assemble zhat^t.

        ``fresh`` holds the aggregated soft-labels of ``request(round, indices)``
        in that order. Must be called once per round, rounds increasing.
        """
        idx = _as_index_tensor(indices)
        if self._last_round is not None and round <= self._last_round:
            raise ValueError(f"rounds must increase: got {round} after {self._last_round}")
        if fresh.dim() != 2:
            raise ValueError(f"fresh soft-labels must be [n_req, C], got shape {tuple(fresh.shape)}")
        index_list = idx.tolist()
        n_fresh = sum(1 for i in index_list if not self._served(i, round))
        if fresh.shape[0] != n_fresh:
            raise ValueError(f"expected {n_fresh} fresh soft-labels (the requested indices), got {fresh.shape[0]}")
        num_classes = fresh.shape[1] if n_fresh else self._num_classes(index_list, fresh)
        full = torch.empty((len(index_list), num_classes), dtype=fresh.dtype)
        signals = torch.empty(len(index_list), dtype=torch.uint8)
        changed: set[int] = set()
        q = age_sum = num_cached = 0
        unused: list[int] = []  # fresh rows requested at the edge (request_rule "authors") of entries still valid
        for pos, i in enumerate(index_list):
            entry = self._entries.get(i)
            requested = not self._served(i, round)
            if requested:
                q += 1
            if entry is not None and bool(is_valid(entry.stored_round, round, self.duration)):
                if requested:
                    unused.append(q - 1)
                full[pos] = entry.value
                signals[pos] = CacheSignal.CACHED
                age_sum, num_cached = age_sum + round - entry.stored_round, num_cached + 1
                continue
            value = fresh[q - 1].clone()
            full[pos] = value
            changed.add(i)
            if entry is None or self.on_expire == "refresh":
                self._entries[i] = _Entry(value, round)
                signals[pos] = CacheSignal.NEWLY_CACHED
            else:
                del self._entries[i]
                self._lifetimes.setdefault(i, []).append((entry.stored_round, round))
                signals[pos] = CacheSignal.EXPIRED
        self._last_round = round
        if changed:
            self._changes[round] = changed
        sent = fresh.clone()
        if unused:  # the downlink carries the rows of non-CACHED signals only
            keep = torch.ones(fresh.shape[0], dtype=torch.bool)
            keep[unused] = False
            sent = fresh[keep].clone()
        downlink = SoftLabelDownlink(round=round, indices=idx.clone(), signals=signals, soft_labels=sent)
        return CacheUpdate(soft_labels=full, downlink=downlink, cached_age=age_sum / num_cached if num_cached else None, num_cached=num_cached)

    def _num_classes(self, index_list: list[int], fresh: torch.Tensor) -> int:
        for i in index_list:
            if i in self._entries:
                return int(self._entries[i].value.shape[-1])
        return int(fresh.shape[1])

    # ---- partial participation -------------------------------------------------
    def last_synced(self, client_id: int) -> int | None:
        """Round of the last downlink the client applied (None: never)."""
        return self._synced.get(int(client_id))

    def _delta_items(self, client_id: int, round: int) -> tuple[list[int], list[int]]:
        last = self._synced.get(int(client_id))
        if last is not None and round <= last:
            raise ValueError(f"client {client_id} already synced through round {last}; cannot sync for round {round}")
        if last is None:  # empty client cache: every live entry stored before `round`, nothing to delete
            return sorted(i for i, e in self._entries.items() if e.stored_round < round), []
        logged = self._logged_between(last, round)
        if logged is None:
            return self._delta_from_cache(last, round)
        stores: set[int] = set()
        deletes: set[int] = set()
        for changed in logged:
            for i in changed:
                entry = self._entries.get(i)
                if entry is not None:
                    if last < entry.stored_round < round:
                        stores.add(i)
                    continue  # stored in `round`: the downlink itself overwrites it
                lives = self._lifetimes.get(i, [])
                dropped_in_round = bool(lives) and lives[-1][1] == round  # downlink signals EXPIRED
                if _covering_end(lives, last) is not None and not dropped_in_round:
                    deletes.add(i)
        return sorted(stores), sorted(deletes)

    def _logged_between(self, last: int, round: int) -> list[set[int]] | None:
        """The change log's index sets of the rounds strictly between ``last`` and ``round``, or None when reading them
        would cost more than reading the cache itself (:meth:`_delta_from_cache`).

        Only those rounds are looked up: the log is kept back to the oldest sync of any client, which at partial
        participation hardly moves, and scanning all of it made every sync O(rounds kept) and a run O(rounds^2)."""
        budget = len(self._entries) + len(self._lifetimes)
        if round - last - 1 > budget:
            return None
        logged: list[set[int]] = []
        size = 0
        for u in range(last + 1, round):
            changed = self._changes.get(u)
            if changed:
                logged.append(changed)
                size += len(changed)
                if size > budget:
                    return None
        return logged

    def _delta_from_cache(self, last: int, round: int) -> tuple[list[int], list[int]]:
        """The same delta as the log gives, read from the live entries and the lifetimes (O(|P|), whatever the gap).

        Stores: the live entries stored strictly between ``last`` and ``round``, each logged in its round. Deletions:
        the indices with no live entry whose lifetime that covered ``last`` ended before ``round`` (the log holds the
        round it ended in; one ended in ``round`` the downlink signals EXPIRED). Such a lifetime ended after ``last``,
        so no prune (up to the oldest sync, at most ``last``) has dropped it."""
        stores = sorted(i for i, e in self._entries.items() if last < e.stored_round < round)
        deletes = []
        for i, lives in self._lifetimes.items():
            if i in self._entries or lives[-1][1] == round:
                continue
            ended = _covering_end(lives, last)
            if ended is not None and ended < round:
                deletes.append(i)
        return stores, sorted(deletes)

    def pending_sync_entries(self, client_id: int, round: int) -> int:
        """Number of items (stores + deletions) :meth:`sync` would send before the downlink of ``round``."""
        stores, deletes = self._delta_items(client_id, round)
        return len(stores) + len(deletes)

    def sync(self, client_id: int, round: int) -> CacheSyncDelta:
        """Catch-up delta to apply before the downlink of ``round``; records the client as synced through ``round``.

        Call it for every participating client before it rebuilds; it is empty
        (0 bytes) when the client applied the previous round's downlink.
        """
        stores, deletes = self._delta_items(client_id, round)
        values = torch.stack([self._entries[i].value for i in stores]) if stores else torch.empty((0, 0))
        self._synced[int(client_id)] = round
        self._prune_changes()
        return CacheSyncDelta(
            client_id=int(client_id),
            through_round=round - 1,
            store_indices=torch.tensor(stores, dtype=torch.long),
            store_soft_labels=values,
            delete_indices=torch.tensor(deletes, dtype=torch.long),
        )

    def _prune_changes(self) -> None:
        """Forget change logs no known client can still need (clients never synced take the full-scan path).

        Only when the oldest sync has moved since the last prune: a round logged, or a lifetime ended, after it cannot
        be pruned before it moves, and scanning the whole log at every sync was O(rounds kept) again. The mark is never
        past the last update: a sync taken before its round's update (the public :meth:`sync` allows it) must not keep
        that round's changes from the next prune, which the full scan made."""
        oldest = min(self._synced.values())
        if self._pruned_through is not None and oldest <= self._pruned_through:
            return
        self._pruned_through = min(oldest, -1 if self._last_round is None else self._last_round)
        for u in [u for u in self._changes if u <= oldest]:
            del self._changes[u]
        for i in [i for i, lives in self._lifetimes.items() if lives[-1][1] <= oldest]:
            del self._lifetimes[i]  # no known client can still hold a lifetime that ended by `oldest`

    # ---- checkpoints -----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Entries, lifetimes of dropped entries, per-client sync rounds, change log and the last round.

        Integer bookkeeping is stored as int64 tensors (flattened, insertion
        order kept) so a large public set stays a handful of tensors:
        ``entries``: ``indices``, ``stored_rounds``, ``values`` (rows stacked);
        ``lifetimes``: ``indices``, ``stored``, ``deleted`` (one row per past lifetime);
        ``changes``: ``rounds``, ``indices`` (one row per changed index).
        """
        life = [(i, s, d) for i, lives in self._lifetimes.items() for s, d in lives]
        changes = [(u, i) for u, changed in self._changes.items() for i in sorted(changed)]
        return {
            "entries": {
                "indices": torch.tensor(list(self._entries), dtype=torch.long),
                "stored_rounds": torch.tensor([e.stored_round for e in self._entries.values()], dtype=torch.long),
                "values": _rows_state([e.value for e in self._entries.values()]),
            },
            "lifetimes": {
                "indices": torch.tensor([x[0] for x in life], dtype=torch.long),
                "stored": torch.tensor([x[1] for x in life], dtype=torch.long),
                "deleted": torch.tensor([x[2] for x in life], dtype=torch.long),
            },
            "synced": {str(cid): int(r) for cid, r in self._synced.items()},
            "changes": {
                "rounds": torch.tensor([x[0] for x in changes], dtype=torch.long),
                "indices": torch.tensor([x[1] for x in changes], dtype=torch.long),
            },
            "last_round": self._last_round,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("entries", "lifetimes", "synced", "changes", "last_round"), "ServerCache")
        ent = state["entries"]
        check_state_keys(ent, ("indices", "stored_rounds", "values"), "ServerCache entries")
        indices = _int_list(ent["indices"], "entries.indices")
        stored = _int_list(ent["stored_rounds"], "entries.stored_rounds")
        values = _load_rows(ent["values"], len(indices))
        if len(stored) != len(indices):
            raise ValueError("ServerCache state: entries.indices and entries.stored_rounds differ in length")
        life = state["lifetimes"]
        check_state_keys(life, ("indices", "stored", "deleted"), "ServerCache lifetimes")
        life_rows = list(zip(*(_int_list(life[k], f"lifetimes.{k}") for k in ("indices", "stored", "deleted")), strict=True))
        ch = state["changes"]
        check_state_keys(ch, ("rounds", "indices"), "ServerCache changes")
        change_rows = list(zip(_int_list(ch["rounds"], "changes.rounds"), _int_list(ch["indices"], "changes.indices"), strict=True))

        self._entries = {i: _Entry(v, r) for i, r, v in zip(indices, stored, values)}
        self._lifetimes = {}
        for i, s, d in life_rows:
            self._lifetimes.setdefault(i, []).append((s, d))
        for lives in self._lifetimes.values():
            lives.sort(key=_life_end)  # :func:`_covering_end` bisects on the end rounds (our own checkpoints are in order)
        self._pruned_through = None
        self._synced = {int(cid): int(r) for cid, r in state["synced"].items()}
        self._changes = {}
        for u, i in change_rows:
            self._changes.setdefault(u, set()).add(i)
        last = state["last_round"]
        self._last_round = None if last is None else int(last)


@dataclass
class ClientCache:
    """A client's local cache C_k (Algorithm 2, UPDATELOCALCACHE)."""

    client_id: int
    synced_round: int | None = None
    _values: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)

    def __len__(self) -> int:
        return len(self._values)

    def entries(self) -> dict[int, torch.Tensor]:
        """Snapshot index -> cached soft-label."""
        return dict(self._values)

    def apply_sync(self, delta: CacheSyncDelta) -> None:
        """Apply a catch-up delta from :meth:`ServerCache.sync`."""
        if delta.client_id != self.client_id:
            raise ValueError(f"delta for client {delta.client_id} applied to client {self.client_id}")
        for i in delta.delete_indices.tolist():
            self._values.pop(i, None)
        for i, value in zip(delta.store_indices.tolist(), delta.store_soft_labels):
            self._values[i] = value.clone()
        self.synced_round = delta.through_round

    def rebuild(self, downlink: SoftLabelDownlink) -> torch.Tensor:
        """UPDATELOCALCACHE: update C_k from gamma^t and return zhat^t for every index of I^t (rows in order)."""
        if self.synced_round != downlink.round - 1:
            raise CacheOutOfSyncError(
                f"client {self.client_id} is synced through round {self.synced_round}; "
                f"apply ServerCache.sync(...) before the downlink of round {downlink.round}"
            )
        fresh = downlink.soft_labels
        signals = downlink.signals.to(torch.int64)
        if bool(((signals < 0) | (signals > max(CacheSignal))).any()):
            raise ValueError(f"unknown cache signal {int(signals[(signals < 0) | (signals > max(CacheSignal))][0])}")
        cached = signals == CacheSignal.CACHED
        n_fresh = int((~cached).sum())
        if n_fresh > fresh.shape[0]:
            raise CacheOutOfSyncError("downlink carries fewer fresh soft-labels than its signals need")
        if n_fresh < fresh.shape[0]:
            raise CacheOutOfSyncError("downlink carries more fresh soft-labels than its signals use")
        index_list = downlink.indices.tolist()
        if not index_list:
            self.synced_round = downlink.round
            return torch.empty((0, fresh.shape[1] if fresh.dim() == 2 else 0), dtype=fresh.dtype)
        # One copy of the fresh block (entries keep views of it) and one gather of the cached rows,
        # instead of a clone and a stack per row: a round's 100 clients x 1,000 rows stay cheap.
        block = fresh.clone()
        cached_rows = []
        for i, c in zip(index_list, cached.tolist()):
            if c:
                value = self._values.get(i)
                if value is None:
                    raise CacheOutOfSyncError(f"client {self.client_id}: index {i} signalled CACHED but not in the local cache")
                cached_rows.append(value)
        width = block.shape[1] if n_fresh else cached_rows[0].shape[-1]
        rows = torch.empty((len(index_list), width), dtype=block.dtype if n_fresh else cached_rows[0].dtype)
        if n_fresh:  # index_copy_: a boolean-mask assignment took ~50x longer here
            rows.index_copy_(0, (~cached).nonzero().squeeze(1), block.to(rows.dtype))
        if cached_rows:
            rows.index_copy_(0, cached.nonzero().squeeze(1), torch.stack(cached_rows).to(rows.dtype))
        fresh_rows = iter(block.unbind(0))  # views of the one copy, made in one call
        cached_code, new_code = int(CacheSignal.CACHED), int(CacheSignal.NEWLY_CACHED)  # plain ints: no enum lookups per row
        for i, s in zip(index_list, signals.tolist()):
            if s == cached_code:
                continue
            value = next(fresh_rows)
            if s == new_code:
                self._values[i] = value
            else:  # EXPIRED
                self._values.pop(i, None)
        self.synced_round = downlink.round
        return rows

    # ---- checkpoints -----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The local entries (``indices`` int64, ``values`` rows stacked), the sync round, and the owner's id as a check."""
        return {
            "client_id": int(self.client_id),
            "synced_round": self.synced_round,
            "indices": torch.tensor(list(self._values), dtype=torch.long),
            "values": _rows_state(list(self._values.values())),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("client_id", "synced_round", "indices", "values"), "ClientCache")
        if int(state["client_id"]) != self.client_id:
            raise ValueError(f"cache state of client {state['client_id']} loaded into client {self.client_id}")
        indices = _int_list(state["indices"], "indices")
        values = _load_rows(state["values"], len(indices))
        self._values = dict(zip(indices, values))
        synced = state["synced_round"]
        self.synced_round = None if synced is None else int(synced)
