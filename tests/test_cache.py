"""SCARLET soft-label cache (Algorithm 2): signals, contents, client rebuild, catch-up sync."""

import numpy as np
import pytest
import torch

from chillfl.protocols.softlabels import (
    CacheOptions,
    CacheOutOfSyncError,
    CacheSignal,
    ClientCache,
    ServerCache,
    is_valid,
)
from chillfl.errors import ConfigError
from chillfl.options import parse_options

N, C, E = CacheSignal.NEWLY_CACHED, CacheSignal.CACHED, CacheSignal.EXPIRED

# Fixed sequence of P^t (round -> indices).
ROUNDS = {1: [0, 1, 2], 2: [1, 3], 3: [0, 3, 4], 4: [0, 2, 4], 5: [0, 1, 3], 6: [0, 4]}


def fresh_value(round: int, index: int) -> torch.Tensor:
    """An identifiable 'aggregated soft-label' for (round, index)."""
    return torch.tensor([10.0 * round + index, 1.0])


def run_round(server: ServerCache, t: int):
    idx = ROUNDS[t]
    req = server.request(t, idx).tolist()
    fresh = torch.stack([fresh_value(t, i) for i in req]) if req else torch.empty((0, 2))
    return req, server.update(t, idx, fresh)


def test_validity_rule_boundary() -> None:
    # stored at 1, D = 2: valid at 1, 2, 3 (t - t_c = 2 = D), expired at 4 (= D + 1)
    assert [is_valid(1, t, 2) for t in (1, 2, 3, 4)] == [True, True, True, False]


def test_exact_signals_requests_and_contents_d2() -> None:
    # Worked by hand with D = 2 (valid iff t - t_c <= 2), on_expire = drop:
    # t=1 I=[0,1,2]: all absent -> req [0,1,2], N N N;      cache {0:1, 1:1, 2:1}
    # t=2 I=[1,3]:   1: 2-1=1 ok C; 3 absent N -> req [3];   cache {0:1, 1:1, 2:1, 3:2}
    # t=3 I=[0,3,4]: 0: 3-1=2 = D still valid C; 3: 1 C; 4 N; cache + {4:3}
    # t=4 I=[0,2,4]: 0: 4-1=3 > D E (re-requested, dropped); 2: 3 > D E; 4: 1 C -> req [0,2]
    #                cache {1:1, 3:2, 4:3}
    # t=5 I=[0,1,3]: 0 absent N; 1: 4 > D E; 3: 3 > D E -> req [0,1,3]; cache {0:5, 4:3}
    # t=6 I=[0,4]:   0: 1 C; 4: 6-3=3 > D E -> req [4];       cache {0:5}
    expected = {
        1: ([0, 1, 2], [N, N, N], {0: 1, 1: 1, 2: 1}),
        2: ([3], [C, N], {0: 1, 1: 1, 2: 1, 3: 2}),
        3: ([4], [C, C, N], {0: 1, 1: 1, 2: 1, 3: 2, 4: 3}),
        4: ([0, 2], [E, E, C], {1: 1, 3: 2, 4: 3}),
        5: ([0, 1, 3], [N, E, E], {0: 5, 4: 3}),
        6: ([4], [C, E], {0: 5}),
    }
    server = ServerCache(duration=2)
    for t in ROUNDS:
        req, upd = run_round(server, t)
        exp_req, exp_sig, exp_cache = expected[t]
        assert req == exp_req, t
        assert upd.downlink.signals.tolist() == [int(s) for s in exp_sig], t
        assert {i: server.stored_round(i) for i in server.entries()} == exp_cache, t
        for i, value in server.entries().items():
            assert torch.equal(value, fresh_value(exp_cache[i], i))
    # zhat^3 assembled from cache + fresh: [value stored at 1 for 0, at 2 for 3, fresh at 3 for 4]
    server = ServerCache(duration=2)
    for t in (1, 2):
        run_round(server, t)
    _, upd3 = run_round(server, 3)
    assert torch.equal(upd3.soft_labels, torch.stack([fresh_value(1, 0), fresh_value(2, 3), fresh_value(3, 4)]))
    assert torch.equal(upd3.downlink.soft_labels, fresh_value(3, 4).unsqueeze(0))


def test_refresh_policy_restores_expired_entries() -> None:
    # Same sequence with on_expire = refresh: at t=4, 0 and 2 are expired -> refreshed (stored at 4), signal N
    server = ServerCache(duration=2, on_expire="refresh")
    for t in (1, 2, 3):
        run_round(server, t)
    req, upd = run_round(server, 4)
    assert req == [0, 2]
    assert upd.downlink.signals.tolist() == [N, N, C]
    assert {i: server.stored_round(i) for i in server.entries()} == {0: 4, 1: 1, 2: 4, 3: 2, 4: 3}


def test_duration_zero_requests_everything_like_dsfl() -> None:
    server = ServerCache(duration=0)
    assert not server.caching
    for t in ROUNDS:
        req, upd = run_round(server, t)
        assert req == ROUNDS[t]  # DS-FL: every drawn index is recomputed every round
        assert CacheSignal.CACHED not in upd.downlink.signals.tolist()


def test_clients_rebuild_the_server_soft_labels_including_catch_up() -> None:
    server = ServerCache(duration=2)
    always = ClientCache(0)  # applies every downlink
    skipper = ClientCache(1)  # applies downlinks 1 and 5 only (misses 2, 3, 4)
    late = ClientCache(2)  # first participates for downlink 5
    for t in ROUNDS:
        _, upd = run_round(server, t)
        clients = [always] + ([skipper] if t in (1, 5) else []) + ([late] if t == 5 else [])
        for client in clients:
            delta = server.sync(client.client_id, t)
            if client is skipper and t == 5:
                # by hand: changes in rounds 2..4 that the skipper lacks: 4 stored at 3 (3 stored at 2
                # was dropped at 5 and is handled by the downlink); 2 (held since 1) deleted at 4.
                # 0 was deleted at 4 but re-stored at 5: handled by the downlink.
                assert delta.store_indices.tolist() == [4]
                assert delta.delete_indices.tolist() == [2]
                assert delta.num_entries == 2
                # bytes: 2 int32 indices (8) + one 2-class float32 soft-label (8)
                assert delta.nbytes() == 16
            if client is late:
                assert delta.store_indices.tolist() == [4] and delta.delete_indices.numel() == 0
            if client is always:
                assert delta.num_entries == 0 and delta.nbytes() == 0
            client.apply_sync(delta)
            rebuilt = client.rebuild(upd.downlink)
            assert torch.equal(rebuilt, upd.soft_labels), (t, client.client_id)
            assert client.entries().keys() == server.entries().keys()
            for i, v in server.entries().items():
                assert torch.equal(client.entries()[i], v)


def test_pending_sync_entries_counts_without_recording() -> None:
    server = ServerCache(duration=2)
    for t in (1, 2, 3, 4, 5):
        run_round(server, t)
        if t == 1:
            server.sync(7, 1)
    assert server.pending_sync_entries(7, 5) == 2
    assert server.pending_sync_entries(7, 5) == 2  # unchanged: nothing recorded
    assert server.last_synced(7) == 1
    server.sync(7, 5)
    assert server.last_synced(7) == 5


def test_rebuild_without_sync_raises() -> None:
    server = ServerCache(duration=2)
    client = ClientCache(1)
    _, upd1 = run_round(server, 1)
    client.apply_sync(server.sync(1, 1))
    client.rebuild(upd1.downlink)
    for t in (2, 3):
        _, upd = run_round(server, t)
    with pytest.raises(CacheOutOfSyncError):
        client.rebuild(upd.downlink)  # missed round 2's downlink and did not catch up


def test_update_checks_fresh_count_and_round_order() -> None:
    server = ServerCache(duration=2)
    run_round(server, 1)
    with pytest.raises(ValueError, match="expected 1 fresh"):
        server.update(2, [1, 3], torch.zeros((2, 2)))  # only 3 was requested
    with pytest.raises(ValueError, match="distinct"):
        server.request(2, [3, 3])
    with pytest.raises(ValueError, match="rounds must increase"):
        server.update(1, [5], torch.zeros((1, 2)))


def test_downlink_and_request_bytes() -> None:
    server = ServerCache(duration=2)
    for t in (1, 2, 3):
        run_round(server, t)
    _, upd = run_round(server, 4)  # I = [0, 2, 4], 2 fresh rows of 2 float32
    # indices 3 x 4 B = 12; soft-labels 2 x 2 x 4 B = 16; signals 3 x 2 bits = 6 bits -> 1 B
    assert upd.downlink.nbytes() == {"indices": 12, "soft_labels": 16, "cache_signals": 1}
    assert "cache_signals" not in upd.downlink.nbytes(with_signals=False)


@pytest.mark.parametrize("on_expire", ["drop", "refresh"])
@pytest.mark.parametrize("seed", [3, 4])
def test_random_partial_participation_stays_in_sync(on_expire: str, seed: int) -> None:
    # Clients that skip rounds hold stale entries, entries dropped and re-stored while they were away, etc.
    rng = np.random.default_rng(seed)
    server = ServerCache(duration=3, on_expire=on_expire)  # type: ignore[arg-type]
    clients = {k: ClientCache(k) for k in range(5)}
    for t in range(1, 40):
        idx = sorted(rng.choice(40, size=8, replace=False).tolist())
        req = server.request(t, idx)
        fresh = torch.as_tensor(rng.random((req.numel(), 3)), dtype=torch.float32)
        upd = server.update(t, idx, fresh)
        for k in sorted(rng.choice(5, size=2, replace=False).tolist()):
            clients[k].apply_sync(server.sync(k, t))
            assert torch.equal(clients[k].rebuild(upd.downlink), upd.soft_labels)
            assert set(clients[k].entries()) == set(server.entries())
            assert all(torch.equal(clients[k].entries()[i], v) for i, v in server.entries().items())


def test_options() -> None:
    assert parse_options(CacheOptions, {"duration": 25}, "cache").duration == 25
    with pytest.raises(ConfigError, match="cache.duration"):
        parse_options(CacheOptions, {"duration": -1}, "cache")
    with pytest.raises(ConfigError, match="cache.on_expire"):
        parse_options(CacheOptions, {"on_expire": "keep"}, "cache")


def test_authors_request_rule_at_the_edge_round() -> None:
    # D = 2, the same sequence; request_rule = "authors" asks again unless t_c + D > t, the signal stays t - t_c <= D:
    # t=3 I=[0,3,4]: 0 stored at 1: 1 + 2 > 3 false -> requested (the default serves it), yet 3 - 1 = 2 <= D: CACHED,
    #     the fresh row (30) unused: zhat row = the cached 1.0 row, downlink carries only 4's row (34), 0 still stored at 1;
    #     3 stored at 2: 2 + 2 > 3 -> served, C; 4 absent -> N.
    # t=4 I=[0,2,4]: 0: 4 - 1 = 3 > D -> E (dropped); 2: E; 4 stored at 3: 3 + 2 > 4 -> served, C: the default's rounds.
    server, default = ServerCache(duration=2, request_rule="authors"), ServerCache(duration=2)
    for t in (1, 2):
        for cache in (server, default):
            run_round(cache, t)
    assert default.request(3, ROUNDS[3]).tolist() == [4]
    req, upd = run_round(server, 3)
    assert req == [0, 4]
    assert upd.downlink.signals.tolist() == [C, C, N]
    assert upd.downlink.soft_labels.tolist() == [fresh_value(3, 4).tolist()]
    assert upd.soft_labels.tolist() == [fresh_value(1, 0).tolist(), fresh_value(2, 3).tolist(), fresh_value(3, 4).tolist()]
    assert upd.cached_age == pytest.approx((2 + 1) / 2)
    assert server.stored_round(0) == 1
    req, upd = run_round(server, 4)
    assert req == [0, 2]
    assert upd.downlink.signals.tolist() == [E, E, C]
    assert {i: server.stored_round(i) for i in server.entries()} == {1: 1, 3: 2, 4: 3}


def test_authors_request_rule_keeps_the_clients_in_sync() -> None:
    server = ServerCache(duration=2, request_rule="authors")
    clients = [ClientCache(0), ClientCache(1)]
    for t in ROUNDS:
        _, upd = run_round(server, t)
        for client in clients if t % 2 else clients[:1]:
            client.apply_sync(server.sync(client.client_id, t))
            assert torch.equal(client.rebuild(upd.downlink), upd.soft_labels), (t, client.client_id)
    assert parse_options(CacheOptions, {"request": "authors"}, "cache").request == "authors"
    with pytest.raises(ConfigError, match="cache.request"):
        parse_options(CacheOptions, {"request": "paper"}, "cache")
    # D = 0: every drawn index is requested under both rules
    zero = ServerCache(duration=0, request_rule="authors")
    assert all(run_round(zero, t)[0] == ROUNDS[t] for t in ROUNDS)
