"""SCARLET's downlink bytes, counted by hand (metcalc finding 3): only the uplink and "fewer than DS-FL" were checked, so a
ledger that priced cached rows, dropped the cache signals or sent them at a byte each would have passed.

Per round t, each of the K clients receives, as int32 indices and float32 soft labels:
  I_req^t              4 bytes a requested index              (the rows the clients must label)
  I^{t-1}              4 bytes an index of last round's subset (|P^{t-1}| = |P| = subset_size)
  gamma^{t-1}          2 bits a row of last round's subset, rounded up to whole bytes
  zhat^{t-1}, fresh    C * 4 bytes a row last round requested (the cached rows are not sent again)
Round 1 has no previous round: only I_req^1. Up: C * 4 bytes a requested row."""

from __future__ import annotations

import math

from test_distillation_protocol import C, K, N_SUB, run

INDEX, VALUE, SIGNAL_BITS = 4, 4, 2


def down_by_hand(requested: int, previous: int | None) -> dict[str, int]:
    """One round's downlink, by part, from this round's and the previous round's requested counts (None: round 1)."""
    if previous is None:
        return {"down.indices": K * INDEX * requested}
    return {
        "down.indices": K * (INDEX * requested + INDEX * N_SUB),
        "down.cache_signals": K * math.ceil(N_SUB * SIGNAL_BITS / 8),
        "down.soft_labels": K * previous * C * VALUE,
    }


def test_scarlet_downlink_bytes_by_hand() -> None:
    records = run("scarlet", cache_duration=3, **{"federation.rounds": 4})
    requested = [r["public_requested"] for r in records]
    assert requested[0] == N_SUB and min(requested[1:]) < N_SUB  # the cache held rows back: the test tells cached from fresh
    for t, r in enumerate(records):
        parts = down_by_hand(requested[t], requested[t - 1] if t else None)
        assert r["bytes_down"] == sum(parts.values()), t
        assert {k: v for k, v in r["bytes_detail"].items() if k.startswith("down.") and k != "down.sync"} == parts, t
        assert r["bytes_detail"].get("down.sync", 0) == 0  # full participation: no client to catch up
        assert r["bytes_up"] == r["bytes_detail"]["up.soft_labels"] == K * requested[t] * C * VALUE
    # metcalc's worked case: requested 40 / 27 / 23 / 15 gave down 640 / 7512 / 5368 / 4600 on one machine (not pinned:
    # the requested counts follow the training's floats)
