"""``dp-sgd``: sample-level DP-SGD in local training (Abadi et al. 2016): per-sample gradients clipped to C, summed, noised.

The privacy unit is a sample of one client: client k spends each local step it completes at
q_k = batch_size / n_k, so ``delta`` must be below 1/n of the largest client. ``target_epsilon`` plans for the
worst case, every client in every round. The step is :class:`chillfl.privacy.dpsgd.PerSampleClipping`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

from chillfl.capabilities import Cost
from chillfl.privacy.spec import Accounting, Charge, MechanismSpec, Noise, Participant, RunSizes

if TYPE_CHECKING:
    from chillfl.privacy.dpsgd import PerSampleClipping


@dataclass(frozen=True)
class DpSgdOptions:
    """``clip_norm`` bounds each sample's gradient. ``divide_by``: the noised sum over the batch's own size (``"batch"``)
    or over ``client.batch_size`` always (``"lot"``, Abadi et al.'s fixed lot size L: an epoch's short last batch then
    takes a smaller step)."""

    divide_by: Literal["batch", "lot"] = "batch"


def accounts(options: DpSgdOptions, sizes: RunSizes) -> Accounting:
    """Client k's steps over every round (worst case: it takes part in all of them), q_k = b / n_k."""
    from chillfl.training.schedule import planned_steps

    b = sizes.batch_size
    largest = max(sizes.client_sizes)
    steps = sorted({(min(1.0, b / n), sizes.rounds * planned_steps(n, b, sizes.epochs)) for n in sizes.client_sizes if n})
    why = f"1/n = {1 / largest:.3g} (n: the largest client's {largest} samples, the privacy unit is a sample)"
    return Accounting(tuple(steps), 1 / largest, why)


def charges(options: DpSgdOptions, sizes: RunSizes, participants: Sequence[Participant]) -> list[Charge]:
    """Each client that trained: the local steps it completed, at its own rate."""
    from chillfl.privacy.protocol import completed

    out = []
    for p in participants:
        n = sizes.client_sizes[p.client_id]
        out.append(Charge(f"client {p.client_id}", min(1.0, sizes.batch_size / n), completed(n, sizes.batch_size, sizes.epochs, p.work)))
    return out


def step(options: DpSgdOptions, noise: Noise) -> PerSampleClipping:
    from chillfl.privacy.dpsgd import PerSampleClipping

    return PerSampleClipping(noise.clip_norm, noise.noise_multiplier, noise.sizes.batch_size if options.divide_by == "lot" else 0)


PER_SAMPLE_STEP = 8.5
"""The overhead of a step from clipped per-sample gradients (``torch.func.grad`` under ``vmap``, each sample's norm, the
noise drawn from the step's own seed), in plain steps' overheads, FLOPs as a plain step's, together with the per-round
accountant it stands in for. Fitted 2026-12-02 on the 2-vCPU Xeon (``benchmarks/estimates.py --methods
fedavg,dpsgd,fedavg_mlp,dpsgd_mlp --repeats 3``, digits, batch 16), after the ledger began computing each (sigma, q)'s
one-step RDP once a run: 9.7 units on the MLP, 7.0 on the FLex&Chill CNN (16 before that, when the accountant's
per-round epsilon was 80 % of the MLP run's CPU; docs/privacy.md, "Cost")."""


SPEC = MechanismSpec(
    "dp-sgd",
    DpSgdOptions,
    accounts,
    summary="sample-level DP-SGD: each local step's per-sample gradients clipped to C, summed, plus N(0, (sigma C)^2)",
    charges=charges,
    step=step,
    cost=Cost(pass_overhead=PER_SAMPLE_STEP),
)
