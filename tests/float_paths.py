"""Comparing runs whose float paths differ, so that a test holds on any x86-64 CPU (docs/reproducibility.md).

Two runs are *bitwise* when they take the same float path: same executor
family (sequential and processes are one path), machine, torch build, CPU
capability and thread count. They are compared with ``==``, accuracies included.

Otherwise (vectorised against sequential; channels-last against contiguous;
AVX-512 against AVX2 kernels, ``ATEN_CPU_CAPABILITY`` / ``ONEDNN_MAX_CPU_ISA``)
every float op may round differently, by an ulp or so (float32: 1.2e-7
relative). So:

* continuous values (losses, Brier score, NLL, entropies, parameters, soft
  labels) agree within :data:`REL` / :data:`ABS`. Measured: the tests'
  seq-vs-vectorised differences are <= 4e-7 relative on AVX-512, AVX2 and
  plain (``default``) kernels alike, a 250x margin;
* argmax-based values (accuracies, ECE, whose bins follow the predicted
  class) are NOT compared: one rounding flips a near-tie, and one test sample
  moves an accuracy by 1/n. They are compared exactly only between bitwise runs;
* counts, client ids, byte totals: exactly.

A trajectory amplifies rounding through training. Where that amplification is
unbounded (FedMD's digest is the L1 distance on logits, whose gradient is a
sign: a rounding flips it), runs are compared in lockstep (:func:`lockstep`):
each round, both executors run the very same client tasks. Even within one
round FedMD's parameters move by 2e-3 (norm-wise) between AVX-512 and AVX2
kernels, against 1e-7 for every other method: its tests use :data:`FEDMD_REL`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import torch

REL = 1e-4
ABS = 1e-6
TRAJECTORY_REL = 2e-3
"""Whole runs on two float paths: rounding is amplified over rounds of training (measured up to 1.3e-4:
SCARLET + batch norm, round 2, ``default`` kernels), so whole trajectories get 2e-3; one round in lockstep gets REL."""
FEDMD_REL = 2e-2
"""FedMD's L1 digest on logits: each sign flip moves a weight by 2 lr / batch; measured 2e-3 in one round (10x margin)."""


def argmax_based(key: str) -> bool:
    """Whether a metric or field named ``key`` is decided by an argmax (accuracies, calibration bins)."""
    leaf = key.rsplit(".", 1)[-1]
    return "acc" in leaf or leaf.endswith("ece")


def assert_close(a: Any, b: Any, where: str = "", rel: float = REL) -> None:
    """``b`` equals ``a`` up to float rounding, the rest exactly; argmax-based fields are skipped.

    Floats: within ``rel`` (relative) or :data:`ABS`. Float tensors (parameters, soft labels, class means):
    norm-wise, ``|b - a| <= rel * |a| + ABS * sqrt(n)``: one rounding's effect spreads over a tensor, and an
    element near zero has no meaningful relative error.
    """
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            assert_close(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", rel)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for key in a:
            assert_close(a[key], b[key], f"{where}.{key}", rel)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{where}[{i}]", rel)
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        if a.is_floating_point() and not argmax_based(where):
            gap, size = torch.linalg.vector_norm((b - a).double()).item(), torch.linalg.vector_norm(a.double()).item()
            assert gap <= rel * size + ABS * math.sqrt(a.numel()), (where, gap, size)
        elif not a.is_floating_point():
            assert torch.equal(a, b), where
    elif isinstance(a, float) and not isinstance(b, bool):
        assert isinstance(b, float), where
        if not argmax_based(where) and not (math.isnan(a) and math.isnan(b)):
            assert math.isclose(b, a, rel_tol=rel, abs_tol=ABS), (where, a, b)
    else:
        assert a == b, where


def assert_records_close(reference: list[dict[str, Any]], other: list[dict[str, Any]], rel: float = TRAJECTORY_REL) -> None:
    """Per-round records of two float paths: :func:`assert_close` round by round (``where`` names round and key)."""
    assert len(reference) == len(other)
    for a, b in zip(reference, other):
        assert_close(a, b, f"round {a.get('round')}", rel)


def lockstep(cfg: Any, rel: float = REL) -> list[dict[str, Any]]:
    """Run ``cfg`` under the vectorised executor; each round, the sequential one runs the same tasks and its
    replies must be close (:func:`assert_close`). The vectorised replies drive the run (their states flow into
    the next rounds, as in a real vectorised run). Returns the run's records."""
    from chillfl.engine.loop import availability, sample_clients
    from chillfl.experiment import build_experiment, build_protocol, make_executor

    exp = build_experiment(cfg.with_overrides({"executor": "vectorized"}))
    protocol = build_protocol(exp)
    vec = make_executor(exp, protocol)
    seq = make_executor(dataclasses.replace(exp, config=exp.config.with_overrides({"executor": "sequential"})), protocol)
    fed, records = exp.config.federation, []
    try:
        for rnd in range(fed.rounds):
            sampled = sample_clients(exp.config.seed, rnd, exp.data.num_clients, fed.sample_size())
            tasks = protocol.configure(rnd, availability(exp.config.seed, rnd, sampled, fed).reporting)
            reference = seq.map(copy.deepcopy(tasks))  # an executor may train a task's own state in place
            replies = vec.map(tasks)
            assert_close(reference, replies, f"round {rnd + 1}", rel)
            records.append(protocol.server_update(rnd, tasks, replies).to_json())
    finally:
        vec.close()
        seq.close()
        protocol.close()
    return records
