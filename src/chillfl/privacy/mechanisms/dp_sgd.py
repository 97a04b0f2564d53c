"""``dp-sgd``: sample-level DP-SGD in local training (Abadi et al. 2016): per-sample gradients clipped to C, summed, noised.

The privacy unit is a sample of one client: client k spends each local step it completes at
q_k = batch_size / n_k, so ``delta`` must be below 1/n of the largest client; an epoch's last batch that holds
batch_size + 1 samples (n_k = j * batch_size + 1: :func:`~chillfl.training.local.batch_order` merges the trailing single
sample into it) at (batch_size + 1) / n_k, the chance that a given sample is in it (:func:`step_rates`).
``target_epsilon`` plans for the worst case, every client in every round, each step at the client's largest rate.
The step is :class:`chillfl.privacy.dpsgd.PerSampleClipping`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

from chillfl.capabilities import Cost
from chillfl.privacy.spec import Accounting, Charge, MechanismSpec, Noise, Participant, RunSizes

if TYPE_CHECKING:
    from chillfl.config import RunConfig
    from chillfl.privacy.dpsgd import PerSampleClipping


@dataclass(frozen=True)
class DpSgdOptions:
    """``clip_norm`` bounds each sample's gradient. ``divide_by``: the noised sum over the batch's own size (``"batch"``)
    or over ``client.batch_size`` always (``"lot"``, Abadi et al.'s fixed lot size L: an epoch's short last batch then
    takes a smaller step)."""

    divide_by: Literal["batch", "lot"] = "batch"


def step_rates(num_samples: int, batch_size: int, steps: int) -> list[tuple[float, int]]:
    """(sampling rate, steps) of the first ``steps`` local steps of a client of ``num_samples`` samples, steps > 0 only.

    A step is charged at max(batch_size, its batch's size) / n: the chance that a given sample is in its batch (each
    epoch a fresh permutation cut into batches), the rate the Poisson approximation needs, or batch_size / n for an
    epoch's short last batch (more than its r / n: on the safe side). Where n = k * batch_size + 1 the last batch holds
    batch_size + 1 (:func:`~chillfl.training.schedule.merges_tail`): charged at (batch_size + 1) / n, so that an epoch's
    rates sum to 1, each sample used once (all k at batch_size / n summed to k b / (k b + 1) < 1, and n = b + 1's one
    full-data batch was charged q = b / (b + 1) instead of 1). The merged batch is each epoch's last, so a prefix of
    ``steps`` holds ``steps // steps a epoch`` of them (a straggler's partial work)."""
    from chillfl.training.schedule import merges_tail, planned_steps

    if steps <= 0:
        return []
    rate = min(1.0, batch_size / num_samples)
    if not merges_tail(num_samples, batch_size):
        return [(rate, steps)]
    merged = steps // planned_steps(num_samples, batch_size, 1)
    pairs = [(rate, steps - merged), (largest_rate(num_samples, batch_size), merged)]
    return [(q, n) for q, n in pairs if n > 0]


def largest_rate(num_samples: int, batch_size: int) -> float:
    """The largest rate :func:`step_rates` charges a client of ``num_samples`` (> 0) at: (batch_size + 1) / n with a merged last batch, else batch_size / n (at most 1)."""
    from chillfl.training.schedule import merges_tail

    return min(1.0, (batch_size + merges_tail(num_samples, batch_size)) / num_samples)


def accounts(options: DpSgdOptions, sizes: RunSizes) -> Accounting:
    """Client k's steps over every round (worst case: it takes part in all of them), each at its largest rate: q_k = b / n_k,
    or (b + 1) / n_k with a merged last batch (:func:`step_rates`; the sigma found is then a little more than it needs)."""
    from chillfl.training.schedule import planned_steps

    b = sizes.batch_size
    largest = max(sizes.client_sizes)
    steps = sorted({(largest_rate(n, b), sizes.rounds * planned_steps(n, b, sizes.epochs)) for n in sizes.client_sizes if n})
    why = f"1/n = {1 / largest:.3g} (n: the largest client's {largest} samples, the privacy unit is a sample)"
    return Accounting(tuple(steps), 1 / largest, why)


def charges(options: DpSgdOptions, sizes: RunSizes, participants: Sequence[Participant]) -> list[Charge]:
    """Each client that trained: the local steps it completed, each at its batch's rate (:func:`step_rates`)."""
    from chillfl.privacy.protocol import completed

    out: list[Charge] = []
    for p in participants:
        n = sizes.client_sizes[p.client_id]
        out.extend(Charge(f"client {p.client_id}", q, k) for q, k in step_rates(n, sizes.batch_size, completed(n, sizes.batch_size, sizes.epochs, p.work)))
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


def approximation(options: DpSgdOptions, config: RunConfig) -> str:
    """Its epsilon charges each step as a Poisson-sampled batch (:func:`step_rates`), and the batches are shuffled and
    fixed-size: the usual approximation whatever ``federation.sampling`` is, which picks clients, not batches.

    Said conditionally: the hook sees the config, not the clients' sizes, and a client whose epoch is one batch
    (n_k <= batch_size, or batch_size + 1 merged into one) is charged q = 1, a proven bound; a full-batch run's caveat
    must not claim otherwise."""
    return ("each client's shuffled fixed-size batches as Poisson sampled at q = batch_size / n_k, where its epoch is more "
            "than one batch (n_k > batch_size + 1; a one-batch epoch is charged q = 1, a proven bound)")


SPEC = MechanismSpec(
    "dp-sgd",
    DpSgdOptions,
    accounts,
    summary="sample-level DP-SGD: each local step's per-sample gradients clipped to C, summed, plus N(0, (sigma C)^2)",
    charges=charges,
    step=step,
    approximation=approximation,
    cost=Cost(pass_overhead=PER_SAMPLE_STEP),
)
