"""SCARLET's catch-up delta reads only the rounds a client missed (cpuperf finding 3).

``ServerCache._delta_items`` scanned every round of the change log and skipped those outside (last sync, round), and
``_prune_changes`` listed the whole log at every sync; the log is kept back to the oldest sync of any client, which at
partial participation among many clients hardly moves, so each sync cost O(rounds kept) and a run O(rounds^2). What is
sent must not change: :func:`reference_delta_items` is the old full scan, kept here to compare against.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest
import torch

from chillfl.protocols.softlabels import ClientCache, ServerCache

from test_distillation_protocol import run

pytestmark = pytest.mark.usefixtures("one_thread")


def reference_delta_items(self: ServerCache, client_id: int, round: int) -> tuple[list[int], list[int]]:
    """The old ``_delta_items``, verbatim: every round of the log, every lifetime of a changed index."""
    last = self._synced.get(int(client_id))
    if last is not None and round <= last:
        raise ValueError(f"client {client_id} already synced through round {last}; cannot sync for round {round}")
    if last is None:
        return sorted(i for i, e in self._entries.items() if e.stored_round < round), []
    stores: set[int] = set()
    deletes: set[int] = set()
    for u, changed in self._changes.items():
        if not last < u < round:
            continue
        for i in changed:
            entry = self._entries.get(i)
            if entry is not None:
                if last < entry.stored_round < round:
                    stores.add(i)
                continue
            lives = self._lifetimes.get(i, [])
            dropped_in_round = bool(lives) and lives[-1][1] == round
            held = any(stored <= last < deleted for stored, deleted in lives)
            if held and not dropped_in_round:
                deletes.add(i)
    return sorted(stores), sorted(deletes)


@pytest.mark.parametrize("on_expire, request_rule", [("drop", "valid"), ("refresh", "valid"), ("drop", "authors")])
@pytest.mark.parametrize("duration", [1, 3, 8])
def test_the_delta_equals_the_full_scans_at_random_partial_participation(
    on_expire: str, request_rule: str, duration: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients away for 1 to 60 rounds, one that took part once and never returns (the log is never pruned past it),
    a checkpoint reloaded half-way: every delta is the old full scan's, read from the log or (a long absence) from
    the cache, both taken."""
    from_cache = []
    real = ServerCache._delta_from_cache
    monkeypatch.setattr(ServerCache, "_delta_from_cache", lambda self, last, round: from_cache.append(round) or real(self, last, round))
    rng = np.random.default_rng(duration)
    server = ServerCache(duration=duration, on_expire=on_expire, request_rule=request_rule)  # type: ignore[arg-type]
    clients = {k: ClientCache(k) for k in range(12)}
    checked = deleted = 0
    for t in range(1, 121):
        if t == 60:  # a resumed run: the lifetimes and the log come back from the checkpoint
            again = ServerCache(duration=duration, on_expire=on_expire, request_rule=request_rule)  # type: ignore[arg-type]
            again.load_state_dict(server.state_dict())
            server = again
        idx = sorted(rng.choice(30, size=6, replace=False).tolist())
        req = server.request(t, idx)
        upd = server.update(t, idx, torch.as_tensor(rng.random((req.numel(), 3)), dtype=torch.float32))
        sampled = [0] if t == 1 else sorted(1 + rng.choice(11, size=2, replace=False))
        for k in sampled:
            expected = reference_delta_items(server, int(k), t)
            assert server._delta_items(int(k), t) == expected, (t, k)
            checked, deleted = checked + 1, deleted + len(expected[1])
            clients[k].apply_sync(server.sync(int(k), t))
            assert torch.equal(clients[k].rebuild(upd.downlink), upd.soft_labels)
    assert checked == 239 and server.last_synced(0) == 1 and min(server._changes) == 2  # never pruned past client 0
    assert deleted > 0 or on_expire == "refresh"  # the deletions' lifetimes path was taken
    assert 0 < len(from_cache) < checked - 1  # both ways of reading the delta (the first sync of each client: neither)


class VisitCountingLog(dict[int, set[int]]):
    """A change log that counts the rounds it hands out, however it is read."""

    visits: int = 0

    def __iter__(self) -> Iterator[int]:
        for u in super().__iter__():
            self.visits += 1
            yield u

    def keys(self) -> Any:
        return list(iter(self))

    def items(self) -> Any:
        return [(u, super(VisitCountingLog, self).__getitem__(u)) for u in self]

    def values(self) -> Any:
        return [v for _, v in self.items()]

    def get(self, key: Any, default: Any = None) -> Any:
        self.visits += 1
        return super().get(key, default)

    def __getitem__(self, key: int) -> set[int]:
        self.visits += 1
        return super().__getitem__(key)


def test_a_sync_visits_only_the_rounds_the_client_missed() -> None:
    """300 rounds logged (client 0 synced at round 1 and stays away, so nothing is pruned); a client that synced last
    round reads none of them, one away for 5 rounds at most 4, one away for 300 rounds none (it reads the cache, at
    most 50 indices here). The old full scan visited all 300 at each sync."""
    server = ServerCache(duration=2)
    rng = np.random.default_rng(0)
    for t in range(1, 311):
        idx = sorted(rng.choice(50, size=4, replace=False).tolist())
        req = server.request(t, idx)
        server.update(t, idx, torch.ones((req.numel(), 3)) * t)
        if t <= 305:
            server.sync(0 if t == 1 else 1, t)
        if t in (5, 305):
            server.sync(2 if t == 305 else 3, t)
    assert len(server._changes) >= 300
    log = server._changes = VisitCountingLog(server._changes)
    expected = {k: reference_delta_items(server, k, 310) for k in (2, 3)}
    log.visits = 0
    server.sync(1, 306)  # synced through 305: nothing missed
    assert log.visits == 0
    assert server._delta_items(2, 310) == expected[2]  # synced through 305: missed 306 ... 309
    assert 0 < log.visits <= 4
    log.visits = 0
    assert server._delta_items(3, 310) == expected[3] and expected[3][0]  # synced through 5: missed 6 ... 309
    assert log.visits == 0
    assert len(server._changes) >= 300  # and still nothing pruned (client 0)


def test_a_partial_participation_run_sends_what_the_full_scan_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SCARLET run, 2 of 4 clients a round, D = 2: its records (bytes included) and every sync payload are those of a
    run on the old full scan."""
    def recorded() -> tuple[list[dict[str, Any]], list[tuple[int, int, list[int], list[int], list[int], torch.Tensor]]]:
        payloads = []
        real_sync = ServerCache.sync

        def sync(self: ServerCache, client_id: int, round: int) -> Any:
            delta = real_sync(self, client_id, round)
            payloads.append((delta.client_id, delta.through_round, delta.store_indices.tolist(), delta.delete_indices.tolist(),
                             delta.store_soft_labels.shape, delta.store_soft_labels.clone()))
            return delta

        with monkeypatch.context() as m:
            m.setattr(ServerCache, "sync", sync)
            records = run("scarlet", cache_duration=2, **{"federation.clients_per_round": 2, "federation.rounds": 8, "model.name": "mlp"})
        return records, payloads

    new_records, new_payloads = recorded()
    monkeypatch.setattr(ServerCache, "_delta_items", reference_delta_items)
    old_records, old_payloads = recorded()
    assert new_records == old_records
    assert sum(r["bytes_detail"].get("down.sync", 0) for r in new_records) > 0  # some client was caught up
    assert len(new_payloads) == len(old_payloads) == 14
    assert any(p[2] for p in new_payloads) and any(p[3] for p in new_payloads)  # stores and deletions both sent
    for new, old in zip(new_payloads, old_payloads):
        assert new[:5] == old[:5]
        assert torch.equal(new[5], old[5])


def _state_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    from chillfl.storage.checkpoint import encode_state

    return encode_state(a) == encode_state(b)  # the checkpoint's bytes: every tensor's bytes and the rest


def test_a_sync_before_its_rounds_update_does_not_keep_that_rounds_log_from_the_next_prune() -> None:
    """rev105b 3: the public sync may come before the round's update; the prune mark taken then must not pass the last
    update, or that round's log stays until the oldest sync moves (the full scan dropped it at the next sync), and a
    cache reloaded from its checkpoint every round (its mark reset) ends in another state than the uninterrupted one."""
    rng = np.random.default_rng(1)
    straight, reloaded = ServerCache(duration=1), ServerCache(duration=1)
    for t in range(1, 8):
        idx = sorted(rng.choice(8, size=3, replace=False).tolist())
        values = rng.random((8, 2))
        for server in (straight, reloaded):
            for k in ([0, 1] if t <= 3 else [0]):
                server.sync(k, t)
            req = server.request(t, idx)
            server.update(t, idx, torch.as_tensor(values[: req.numel()], dtype=torch.float32))
        again = ServerCache(duration=1)
        again.load_state_dict(reloaded.state_dict())
        reloaded = again
    assert _state_equal(straight.state_dict(), reloaded.state_dict())
