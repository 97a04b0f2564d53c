"""Mutation audit of the SCARLET family (soft-label cache, Enhanced ERA / ERA, CFD's quantiser): hand-worked kills.

Each test here kills a small change of the code that the rest of the suite let through (flipped
comparison, a row counted that is not sent, a row aggregated over the wrong clients). The
expected numbers are worked out by hand in the comments; papers/scarlet.txt is cited by section,
algorithm and equation.
"""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.config import RunConfig, load_config
from chillfl.distillation.era import power_sharpen
from chillfl.distillation.quantize import compress, hard_label_bits, payload_bytes, quantize
from chillfl.distillation.selective import server_keep_mask
from chillfl.protocols.softlabels import (
    CacheOutOfSyncError,
    CacheSignal,
    ClientCache,
    ServerCache,
    SoftLabelDownlink,
    SoftLabelMethod,
    SoftLabelUplink,
    make_method,
)
from chillfl.runner import run_experiment
from chillfl.settings.distillation import parse_distillation

pytestmark = pytest.mark.usefixtures("one_thread")

N, C, E = int(CacheSignal.NEWLY_CACHED), int(CacheSignal.CACHED), int(CacheSignal.EXPIRED)


def row(round: int, index: int) -> torch.Tensor:
    """An identifiable aggregated soft-label for (round, index)."""
    return torch.tensor([[10.0 * round + index, 1.0]])


# ---------------------------------------------------------------- Algorithm 1-2: bytes of a SCARLET round


def test_scarlet_round_bytes_count_only_fresh_rows_and_two_bit_signals() -> None:
    # Algorithm 1: at round t the server sends I_req^t and, from t = 2, gamma^{t-1}, zhat_req^{t-1} and I^{t-1};
    # only the *requested* rows of round t-1 travel (cached ones are read from C_k), the signals are 2 bits each
    # (Sec. III-C: "represented as integers", three values). K = 4 clients, n = |P^t| = 40, C = 10 classes,
    # float32 rows, int32 indices, full participation; r_t = public_requested of round t:
    #   up.soft_labels     = K * r_t * C * 4                    (every requested row, from every client)
    #   down.indices       = K * 4 * r_1                        (t = 1: I_req^1 only)
    #                        K * 4 * (r_t + n)                   (t >= 2: I_req^t and I^{t-1})
    #   down.soft_labels   = K * r_{t-1} * C * 4                 (zhat_req^{t-1}, not the n rows of zhat^{t-1})
    #   down.cache_signals = K * ceil(n * 2 / 8) = 4 * 10 = 40
    #   down.sync          = 0                                   (nobody missed a round)
    k, n, c = 4, 40, 10
    cfg = load_config(None, {
        "dataset.name": "digits", "partition.name": "dirichlet", "partition.alpha": 0.3, "model.name": "flexchill_cnn",
        "federation.num_clients": k, "federation.rounds": 3, "client.epochs": 1, "client.batch_size": 32, "client.lr": 0.05,
        "eval.client_split_size": 20, "distillation.method": "scarlet", "distillation.public_size": 120,
        "distillation.subset_size": n, "distillation.server_epochs": 1, "distillation.distill_batch_size": 32,
        "distillation.cache_duration": 3,
    })
    records = run_experiment(cfg, write=False, progress=False).records
    req = [r["public_requested"] for r in records]
    assert req[0] == n and req[-1] < n  # the draws overlap: rows were served from the cache, or the test proves nothing
    first = records[0]["bytes_detail"]
    assert first == {"down.indices": k * 4 * n, "up.soft_labels": k * n * c * 4}
    for prev, r in zip(req, records[1:]):
        d = r["bytes_detail"]
        assert d["up.soft_labels"] == k * r["public_requested"] * c * 4
        assert d["down.indices"] == k * 4 * (r["public_requested"] + n)
        assert d["down.soft_labels"] == k * prev * c * 4
        assert d["down.cache_signals"] == k * math.ceil(n * 2 / 8) == 40
        assert d["down.sync"] == 0


def test_downlink_prices_quantised_rows_at_their_bits() -> None:
    # A downlink of 3 fresh 10-class rows at 1 bit: ceil(3 * 10 * 1 / 8) = 4 bytes, not 3 * 10 * 4 = 120;
    # indices 4 x int32 = 16 B, signals 4 x 2 bits = 1 B.
    down = SoftLabelDownlink(round=2, indices=torch.arange(4), signals=torch.tensor([N, N, C, N], dtype=torch.uint8),
                             soft_labels=torch.zeros(3, 10), bits=1)
    assert down.nbytes() == {"indices": 16, "soft_labels": 4, "cache_signals": 1}


# ---------------------------------------------------------------- Algorithm 2: the catch-up and the sync check


def test_catch_up_sends_no_deletion_the_downlink_already_signals() -> None:
    # D = 1 (valid iff t - t_c <= 1); index 0 drawn in rounds 1, 3, 4, 6 (rounds 2 and 5 draw nothing):
    #   t=1: absent -> N, stored at 1                 (client 0 applies this downlink, then misses 2..5)
    #   t=3: 3 - 1 = 2 > 1 -> E, dropped (lifetime 1..3)
    #   t=4: absent -> N, stored at 4
    #   t=6: 6 - 4 = 2 > 1 -> E, dropped (lifetime 4..6)
    # Before downlink 6 client 0 still holds the stale row stored at 1. Downlink 6 signals E for index 0, which
    # deletes it (UPDATELOCALCACHE: "C_k <- C_k \ {i}"), so the catch-up needs to carry nothing: 0 items, 0 bytes.
    # A catch-up that also sends the deletion would bill 4 bytes (one int32 index) for nothing.
    server = ServerCache(duration=1)
    client = ClientCache(0)
    for t, idx in ((1, [0]), (3, [0]), (4, [0]), (6, [0])):
        upd = server.update(t, idx, torch.cat([row(t, i) for i in server.request(t, idx).tolist()]))
        if t in (1, 6):
            delta = server.sync(0, t)
            if t == 6:
                assert upd.downlink.signals.tolist() == [E]
                assert delta.num_entries == 0 and delta.nbytes() == 0
            client.apply_sync(delta)
            assert torch.equal(client.rebuild(upd.downlink), upd.soft_labels)
            assert client.entries().keys() == server.entries().keys()
    assert len(client) == 0


def test_rebuild_refuses_a_never_synced_client_and_a_replayed_downlink() -> None:
    # A client must apply ServerCache.sync before a downlink (Sec. III-C, synchronised caches): one that never did
    # (synced_round None) may hold nothing the server thinks it holds; one that already applied downlink 1 must not
    # apply it again (its cache is at round 1, the downlink expects round 0). Both are refused, not silently rebuilt.
    server = ServerCache(duration=2)
    upd = server.update(1, [0, 1], torch.cat([row(1, 0), row(1, 1)]))
    assert upd.downlink.signals.tolist() == [N, N]  # no CACHED row: a missing entry would not be noticed otherwise
    with pytest.raises(CacheOutOfSyncError):
        ClientCache(5).rebuild(upd.downlink)
    client = ClientCache(6)
    client.apply_sync(server.sync(6, 1))
    client.rebuild(upd.downlink)
    with pytest.raises(CacheOutOfSyncError):
        client.rebuild(upd.downlink)


def test_rebuild_refuses_a_downlink_with_a_surplus_row() -> None:
    # Downlink 1 of [0, 1]: two NEWLY_CACHED signals, so exactly two fresh rows; a third row belongs to no index
    # (a server and client that disagree on the signals): refused rather than silently ignored.
    server = ServerCache(duration=2)
    upd = server.update(1, [0, 1], torch.cat([row(1, 0), row(1, 1)]))
    d = upd.downlink
    padded = SoftLabelDownlink(d.round, d.indices, d.signals, torch.cat([d.soft_labels, row(1, 2)]))
    client = ClientCache(0)
    client.apply_sync(server.sync(0, 1))
    with pytest.raises(CacheOutOfSyncError, match="more fresh"):
        client.rebuild(padded)


def test_request_keeps_the_given_order() -> None:
    # update() pairs the fresh rows with the requested indices in the order of I^t, so request() must return
    # I_req^t in that order too, sorted or not: I^1 = [2, 0, 1] (empty cache) -> I_req^1 = [2, 0, 1].
    server = ServerCache(duration=2)
    assert server.request(1, [2, 0, 1]).tolist() == [2, 0, 1]
    upd = server.update(1, [2, 0, 1], torch.cat([row(1, 2), row(1, 0), row(1, 1)]))
    assert {i: v[0].item() for i, v in server.entries().items()} == {2: 12.0, 0: 10.0, 1: 11.0}
    assert upd.soft_labels[:, 0].tolist() == [12.0, 10.0, 11.0]


def test_update_with_missing_fresh_rows_is_a_value_error() -> None:
    # Round 1, empty cache: index 0 is requested, so update needs 1 fresh row; given none it says so.
    with pytest.raises(ValueError, match="expected 1 fresh"):
        ServerCache(duration=2).update(1, [0], torch.zeros((0, 2)))


# ---------------------------------------------------------------- Eq. 2 and 4 when clients send different rows


def _method(name: str, **options: object) -> SoftLabelMethod:
    return make_method(parse_distillation({"method": name, "public_size": 2, "subset_size": 2, **options}), 3, 0)


def _partial_uplinks() -> list[SoftLabelUplink]:
    # Client 0 sends rows for public indices [0, 1], client 1 for [1] only (a selector or a privacy filter dropped
    # index 0). Dyadic values: exact in float32.
    return [
        SoftLabelUplink(0, 1, torch.tensor([0, 1]), torch.tensor([[0.25, 0.5, 0.25], [0.75, 0.25, 0.0]])),
        SoftLabelUplink(1, 1, torch.tensor([1]), torch.tensor([[0.25, 0.25, 0.5]])),
    ]


def test_enhanced_era_on_rows_sent_by_some_clients() -> None:
    # Each row is averaged over the clients that sent it, then Eq. (4), beta = 2:
    #   index 0: client 0 only   zbar = [0.25, 0.5, 0.25]       -> [1/16, 1/4, 1/16] / (3/8) = [1/6, 2/3, 1/6]
    #   index 1: clients 0 and 1 zbar = [0.5, 0.25, 0.25]       -> [1/4, 1/16, 1/16] / (3/8) = [2/3, 1/6, 1/6]
    # Both rows are kept (a row one client sent is a row).
    agg = _method("scarlet", beta=2.0).aggregate(1, torch.tensor([0, 1]), _partial_uplinks())
    assert agg.keep.tolist() == [True, True]
    expected = torch.tensor([[1 / 6, 2 / 3, 1 / 6], [2 / 3, 1 / 6, 1 / 6]])
    torch.testing.assert_close(agg.rows, expected, rtol=1e-6, atol=0.0)
    torch.testing.assert_close(agg.server_rows, expected, rtol=1e-6, atol=0.0)


def test_era_on_rows_sent_by_some_clients() -> None:
    # The same rows through Eq. (2), T = 0.25: softmax(zbar / T) = softmax(4 zbar)
    #   index 0: softmax([1, 2, 1]) = [1, e, 1] / (e + 2)
    #   index 1: softmax([2, 1, 1]) = [e, 1, 1] / (e + 2)
    #   e / (e + 2) = 2.718281828 / 4.718281828 = 0.5761168847, 1 / (e + 2) = 0.2119415576
    agg = _method("dsfl", temperature=0.25).aggregate(1, torch.tensor([0, 1]), _partial_uplinks())
    assert agg.keep.tolist() == [True, True]
    hi, lo = 0.5761168847, 0.2119415576
    torch.testing.assert_close(agg.rows, torch.tensor([[lo, hi, lo], [hi, lo, lo]]), rtol=1e-6, atol=0.0)


def test_power_sharpen_refuses_negative_soft_labels() -> None:
    # Eq. (4) raises probabilities to beta; a negative entry has no real power (log gives NaN): refused.
    with pytest.raises(ValueError, match="non-negative"):
        power_sharpen(torch.tensor([[-0.1, 1.1]], dtype=torch.float64), 2.0)


def test_server_selector_keeps_strictly_below_the_threshold() -> None:
    # Selective-FD's server selector (SCARLET Appendix B): keep a row iff its L1 distance to the one-hot of its
    # argmax, 2 (1 - max p), is strictly below tau_server. tau = 1: [0.5, 0.5] -> 2 * 0.5 = 1.0, not < 1: dropped;
    # [0.75, 0.25] -> 0.5 < 1: kept. (tau = 2 keeps every distribution: 2 (1 - max p) < 2.)
    probs = torch.tensor([[0.5, 0.5], [0.75, 0.25]], dtype=torch.float64)
    assert server_keep_mask(probs, 1.0).tolist() == [False, True]
    assert server_keep_mask(probs, 2.0).tolist() == [True, True]


def test_cache_hit_ratio_is_over_the_drawn_subset_when_a_selector_drops_rows() -> None:
    # Fig. 3: the cache ratio is the share of P^t served from the cache (under "valid" 1 - |I_req^t| / |P^t|), over the *drawn*
    # subset, whatever Selective-FD's server selector (tau_server = 1.6: ambiguous rows dropped) keeps of the fresh rows.
    cfg = load_config(None, {
        "dataset.name": "digits", "partition.name": "dirichlet", "partition.alpha": 0.3, "model.name": "flexchill_cnn",
        "federation.num_clients": 4, "federation.rounds": 2, "client.epochs": 1, "client.batch_size": 32, "client.lr": 0.05,
        "eval.client_split_size": 20, "distillation.method": "selective_fd", "distillation.public_size": 120,
        "distillation.subset_size": 40, "distillation.server_epochs": 1, "distillation.distill_batch_size": 32,
        "distillation.cache_duration": 2, "distillation.tau_server": 1.6, "distillation.kernel_width": 2.0,
    })
    records = run_experiment(cfg, write=False, progress=False).records
    assert any(r["public_used"] < r["public_drawn"] for r in records)  # the selector dropped rows: used != drawn
    for r in records:
        assert r["cache_hit_ratio"] == 1.0 - r["public_requested"] / r["public_drawn"]


# ---------------------------------------------------------------- CFD's quantiser (SCARLET ref. [4], Table V)


def test_one_bit_quantiser_rounds_half_up() -> None:
    # b = 1, L = 1: code = floor(x + 1/2); x = 0.5 -> floor(1.0) = 1 (round half *up*, not half to even: 0);
    # 0.49 -> floor(0.99) = 0. So the 1-bit upload of [0.5, 0.5, 0] is [1, 1, 0].
    assert quantize(torch.tensor([0.5, 0.49, 1.0, 0.0]), 1).tolist() == [1, 0, 1, 0]
    assert compress(torch.tensor([[0.5, 0.5, 0.0]]), 1).tolist() == [[1.0, 1.0, 0.0]]


def test_hard_label_bits_at_powers_of_two() -> None:
    # ceil(log2 C) bits name one of C classes: C = 2 -> 1, 8 -> 3, 10 -> 4, 16 -> 4, 100 -> 7 (at least 1 for C = 1).
    assert [hard_label_bits(c) for c in (1, 2, 8, 10, 16, 100)] == [1, 1, 3, 4, 4, 7]
    # 3 hard labels over 8 classes: 3 x 3 bits = 9 bits -> 2 bytes (one rounding per message)
    assert payload_bytes(torch.zeros(3, 8), 1, one_bit="argmax") == 2


# ---------------------------------------------------------------- the paper's settings as defaults


def test_defaults_are_the_papers_main_settings() -> None:
    # Sec. IV-A: "SCARLET employed ... a cache duration of D=50", beta = 2.0 for CIFAR-10 at alpha = 0.05 (the
    # default dataset setting); Table V: DS-FL's ERA temperature T = 0.1 for CIFAR-10; DS-FL has no cache (D = 0).
    scarlet = parse_distillation({"method": "scarlet", "public_size": 2, "subset_size": 2})
    assert scarlet.cache_duration == 50 and scarlet.options.beta == 2.0
    dsfl = parse_distillation({"method": "dsfl", "public_size": 2, "subset_size": 2})
    assert dsfl.cache_duration == 0 and dsfl.options.temperature == 0.1 and dsfl.options.aggregation == "era"


# ---------------------------------------------------------------- the catch-up's rows cost what the downlink's cost


def test_catch_up_rows_are_priced_like_the_downlink_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # CFD with the cache (SCARLET Sec. IV-C, Fig. 9) and b_down = 2: a fresh row goes down as 10 codes of 2 bits.
    # A client that missed rounds receives the entries stored meanwhile in ServerCache.sync's delta; those rows are
    # the same dequantised codes and cost the same: per delta, 4 B per int32 index (stores and deletions) +
    # ceil(stores * 10 * 2 / 8) B, not 4 B per element (float32).
    deltas: dict[int, list] = {}
    real_sync = ServerCache.sync

    def recording_sync(self: ServerCache, client_id: int, round: int):  # type: ignore[no-untyped-def]
        delta = real_sync(self, client_id, round)
        deltas.setdefault(round + 1, []).append(delta)  # the downlink of round t-1 travels in round t
        return delta

    monkeypatch.setattr(ServerCache, "sync", recording_sync)
    cfg = load_config(None, {
        "dataset.name": "digits", "partition.name": "dirichlet", "partition.alpha": 0.3, "model.name": "flexchill_cnn",
        "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 5, "client.epochs": 1,
        "client.batch_size": 32, "client.lr": 0.05, "eval.client_split_size": 20, "distillation.method": "cfd",
        "distillation.bits_down": 2, "distillation.public_size": 120, "distillation.subset_size": 40,
        "distillation.server_epochs": 1, "distillation.distill_batch_size": 32, "distillation.cache_duration": 5,
    })
    records = run_experiment(cfg, write=False, progress=False).records
    assert sum(int(d.store_indices.numel()) for ds in deltas.values() for d in ds) > 0  # some client caught up
    for prev, r in zip(records, records[1:]):
        # the downlink's own fresh rows (CFD keeps every requested row): 2 sampled clients x ceil(r_{t-1} * 10 * 2 / 8)
        assert r["bytes_detail"]["down.soft_labels"] == 2 * math.ceil(prev["public_requested"] * 10 * 2 / 8)
        expected = sum(
            4 * d.num_entries + math.ceil(int(d.store_indices.numel()) * 10 * 2 / 8) for d in deltas[r["round"]] if d.num_entries
        )
        assert r["bytes_detail"]["down.sync"] == expected, r["round"]


def two_round_digits(**method: object) -> RunConfig:
    """Four digits clients, two rounds, a public set of 120 with subsets of 40: the soft-label method's options on top."""
    return load_config(None, {
        "dataset.name": "digits", "partition.name": "dirichlet", "partition.alpha": 0.3, "model.name": "flexchill_cnn",
        "federation.num_clients": 4, "federation.rounds": 2, "client.epochs": 1, "client.batch_size": 32, "client.lr": 0.05,
        "eval.client_split_size": 20, "distillation.public_size": 120, "distillation.subset_size": 40,
        "distillation.server_epochs": 1, "distillation.distill_batch_size": 32, **method,
    })


def test_server_targets_short_of_the_used_indices_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server distils on zhat^t over all of P^t (Algorithm 1: zhat^t = zhat_req^t u zhat_cached^t). A server that
    # handed its training only the fresh rows (27 of the 40 indices in round 2 with D = 2) would pair the first 27
    # inputs with them by position, silently: it must stop instead.
    from chillfl.protocols.softlabels.server import SoftLabelProtocol

    def fresh_only(self: SoftLabelProtocol, t: int, used: torch.Tensor, server_rows: torch.Tensor, rows_full: object) -> torch.Tensor:
        return server_rows.to(torch.float32)

    monkeypatch.setattr(SoftLabelProtocol, "_server_targets", fresh_only)
    cfg = two_round_digits(**{"distillation.method": "scarlet", "distillation.cache_duration": 2})
    with pytest.raises(ValueError, match="server targets for 40 public indices"):
        run_experiment(cfg, write=False, progress=False)


def test_a_client_refuses_rows_that_do_not_match_the_broadcast_indices(monkeypatch: pytest.MonkeyPatch) -> None:
    # Selective-FD's server selector (tau_server = 1.6) drops ambiguous fresh rows, so zhat^1 covers I^1 = the *used*
    # indices, fewer than the 40 drawn. A server that broadcast the drawn indices with it would have each client pair
    # 40 public inputs with fewer rows by position, silently: the client must stop instead.
    from chillfl.protocols.softlabels.server import Broadcast, SoftLabelProtocol

    real = SoftLabelProtocol._server_round

    def drawn_indices(self: SoftLabelProtocol, t: int, uplinks: list) -> tuple[Broadcast, dict]:
        b, metrics = real(self, t, uplinks)
        return Broadcast(b.round, self._draw[0], b.downlink, b.rows), metrics

    monkeypatch.setattr(SoftLabelProtocol, "_server_round", drawn_indices)
    cfg = two_round_digits(**{"distillation.method": "selective_fd", "distillation.tau_server": 1.6, "distillation.kernel_width": 2.0})
    with pytest.raises(CacheOutOfSyncError, match="soft-label rows for 40 public indices"):
        run_experiment(cfg, write=False, progress=False)
