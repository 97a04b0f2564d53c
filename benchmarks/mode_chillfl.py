"""chillfl on a benchmark workload, through its public config API.

The synthetic data is memory-mapped from the ``.npy`` files (copy-on-write,
so pages are read when a sampled client first touches them, as BlazeFL's and
Flower's workers do) and handed to chillfl as a ``FederatedData`` (client
``c`` owns rows ``[c*n, (c+1)*n)``), because no registered dataset is
CIFAR-shaped and synthetic. Two ways of driving a run:

* ``api = "loop"`` (per-round timing): inside ``intra_op_threads(cfg.threads)``,
  ``build_experiment(cfg, data=...)`` then the round generator
  ``rounds_for(exp)(exp)`` -- exactly what
  ``run_experiment(write=False, progress=False)`` does, minus the progress bar
  -- with a timestamp at every yielded round. (Runs A-H left out the thread
  setting: the loop then ran with torch's default of one intra-op thread per
  core, and each vectorised worker thread with as many.)
* ``api = "run_experiment"`` (start-up timing): one
  ``run_experiment(cfg, write=False, progress=False, data=...)`` call of one
  round; the runner measures from launching this process to its return.

* ``api = "ops"`` (op count, issue 39): as ``loop``, for 2 rounds; round 2 runs
  under ``op_count.OpCounter`` (every aten op dispatched in this process, the
  vectorised executor's worker threads included); on CUDA round 3 runs under
  ``torch.profiler`` for its kernel launches (``cudaLaunchKernel`` and kin). Ops per client step = round 2's
  ops / the round's client SGD steps (``Workload.client_sgd_steps_per_round``: on workload
  3 the clients' distillation steps too; the server's distillation and the predictions add ops, no steps). The
  ``processes`` executor trains in worker processes: not counted.

Every api first imports chillfl's run modules (torch with the GC paused) and then freezes them out of the cyclic GC
(:func:`own_process`), as the ``chillfl`` command does: the worker owns its process as the command does, so its
timings are the command's (the clock notes ``gc_frozen``, the objects frozen).

``vectorized`` and ``processes`` need ``chillfl.executors.parallel``; when that
module is missing chillfl silently falls back to sequential, so this worker
reports "not available" for them instead of a misleading number (``auto``
then legitimately means sequential; the result notes ``parallel_module``).

Variants: ``<executor>``, then optional ``+<precision>`` (the override ``precision =
"bf16"`` or ``"tf32"``), ``+channels_last`` / ``+contiguous`` (``memory_format``) and
``+gemm`` / ``+grouped`` / ``+nhwc`` / ``+loop`` (``batched_conv``), ``+graphs`` (``cuda_graphs = true``), ``+compile`` (``compile = true``) and
``+nondet`` (``deterministic = false``: what PyTorch's deterministic algorithms cost on a GPU; no effect on a CPU);
a config that rejects one makes the mode "not available: <reason>".
The spec's ``device`` becomes the config's ``device``.

Data per workload (built through the public ``FederatedData``): client ``c``
trains on rows ``client_slice(w, c)``. Workload 3 adds the public pool
(``public_indices`` = the rows after the clients') and the SCARLET section
``[distillation] method = "scarlet", public_size = 10000, subset_size = 1000``
(its defaults otherwise: one distillation epoch at the client batch size, a
50-round cache). Every client's rows are one range of a
``ClientRows`` (two int64 numbers a client); workload 4's 100,000 clients are
ranges into workload 2's 1,000 blocks, each block shared by the 100 clients
``c`` with ``c mod 1000`` equal (a documented choice: the data are
memory-mapped once, and 100,000 distinct CIFAR-shaped clients would be 61 GB).
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

try:  # chillfl before torch, as ``chillfl run`` and ``chillfl.run()`` import it (torch then comes in with the GC paused)
    import chillfl._torch  # noqa: F401
except ImportError:  # reported as "not available" in main()
    pass

import numpy as np
import torch

from workloads import NUM_CLASSES, Workload, load_data, public_slice, read_spec

PARALLEL_ONLY = ("vectorized", "processes")
EVAL_EVERY = 1
"""chillfl evaluates the global model on the workload's 100 test rows after every round, not only after the last.

Why: chillfl always evaluates after the final round. With ``eval.every = rounds`` that first evaluation (its
kernels loaded and run for the first time) fell in the last, timed round. On the H200 (2026-11-30) the last round
of workloads 2 and 4 took 3-6x the one before it, e.g. [0.407, 0.0148, 0.091] s, while BlazeFL's rounds do no
evaluation at all. Every round evaluating puts the one-off cost in round 1, which is never timed, and charges
every timed round a warm evaluation that BlazeFL does not do: the comparison can only err against chillfl."""


def overrides(w: Workload, variant: str, rounds: int, seed: int, device: str = "cpu") -> dict[str, Any]:
    """The run's config overrides; ``variant``: the executor, then optional ``+<precision>`` / ``+<memory_format>`` / ``+<batched_conv>`` /
    ``+graphs`` / ``+compile`` / ``+nondet`` parts."""
    executor, *options = variant.split("+")
    formats = [o for o in options if o in ("channels_last", "contiguous")]
    convs = [o for o in options if o in ("grouped", "gemm", "nhwc", "loop")]
    switches = {o for o in options if o in ("graphs", "compile", "nondet")}
    precision = next((o for o in options if o not in formats and o not in convs and o not in switches), "")
    model = {"name": "mcmahan_cnn"} if w.model == "cnn" else {"name": "mlp", "hidden": [64]}
    out: dict[str, Any] = {
        "name": f"bench-w{w.key}-{executor}",
        "seed": seed,
        "executor": executor,
        "federation.num_clients": w.num_clients,
        "federation.clients_per_round": w.clients_per_round,
        "federation.rounds": rounds,
        "client.epochs": w.epochs,
        "client.batch_size": w.batch_size,
        "client.lr": w.lr,
        "eval.clients": "none",
        "eval.client_split": "none",
        "eval.every": EVAL_EVERY,
        "model": model,
        "device": device,
    }
    if precision:
        out["precision"] = precision
    if formats:
        out["memory_format"] = formats[0]
    if convs:
        out["batched_conv"] = convs[0]
    if "graphs" in switches:
        out["cuda_graphs"] = True
    if "compile" in switches:
        out["compile"] = True
    if "nondet" in switches:
        out["deterministic"] = False
    if w.public_per_round:
        out["distillation"] = {"method": "scarlet", "public_size": w.public_size, "subset_size": w.public_per_round}
    return out


def federated_data(w: Workload, arrays: dict[str, np.ndarray], seed: int) -> Any:
    """The workload's clients (and public pool) as a chillfl ``FederatedData`` over the memory-mapped arrays."""
    from chillfl.data.datasets import ArrayDataset
    from chillfl.data.client_rows import ClientRows
    from chillfl.data.federated import FederatedData

    t = torch.from_numpy
    dataset = ArrayDataset("synthetic_cifar", t(arrays["x"]), t(arrays["y"]), t(arrays["x_test"]), t(arrays["y_test"]), NUM_CLASSES)
    starts = (np.arange(w.num_clients, dtype=np.int64) % w.blocks) * w.samples_per_client  # = client_slice(w, c).start
    public = public_slice(w)
    return FederatedData(
        dataset=dataset,
        train_indices=ClientRows.ranges(starts, w.samples_per_client),
        eval_indices=ClientRows.empty(w.num_clients),
        noise=None,
        public_indices=np.arange(public.start, public.stop, dtype=np.int64),
        seed=seed,
    )


def count_round_ops(rounds: Any, client_steps: int, device: str) -> dict[str, Any]:
    """Round 1 uncounted (the probe, lazy set-up), round 2 counted: aten ops (and CUDA kernel launches) per client step."""
    from op_count import HOST_READ, OpCounter, counting_threads, count_cuda_launches

    counter = OpCounter()
    with counting_threads(counter), counter:  # the executor's pool starts inside: its threads count too
        next(rounds)
        before, views_before = counter.snapshot()
        next(rounds)
        after, views_after = counter.snapshot()
    ops = sum(after.values()) - sum(before.values())
    out: dict[str, Any] = {
        "ops_per_round": ops,
        "compute_ops_per_round": ops - (views_after - views_before),
        "host_reads_per_round": after[HOST_READ] - before[HOST_READ],
        "client_steps_per_round": client_steps,
        "ops_per_client_step": ops / client_steps,
        "top_ops": (after - before).most_common(12),
    }
    if device == "cuda":
        launches = count_cuda_launches(lambda: next(rounds))  # round 3, not under the op counter
        out.update(cuda_launches_per_round=launches.launches, cuda_launches_per_client_step=launches.launches / client_steps,
                   cuda_launch_calls=launches.by_name)
    return out


def own_process() -> int:
    """Freeze the objects imported so far (torch's, chillfl's run modules') out of the cyclic GC's reach, as the ``chillfl``
    command does right after importing ``chillfl.runner`` (``chillfl.cli._own_process``); returns how many are frozen.

    Why: this worker owns its process, as the command does, and its start-up timing stands for ``chillfl run``'s. Since
    83e6198a ``import chillfl`` freezes nothing (it would keep a library caller's cycles alive), so without this call
    the worker's full collections walked torch's ~170k objects again, which the command no longer pays.
    """
    import gc

    from chillfl import _freeze_import_objects

    _freeze_import_objects()
    return gc.get_freeze_count()


def main() -> int:
    w, spec, clock = read_spec(sys.argv)
    variant, api = spec["variant"], spec.get("api", "loop")
    executor = variant.partition("+")[0]
    if api == "ops" and executor == "processes":
        clock.note(error="not counted: the processes executor trains in worker processes")
        clock.save()
        return 3
    try:
        import chillfl
        from chillfl.config import load_config
        from chillfl.errors import ConfigError
        from chillfl.runner import device_settings, intra_op_threads, rounds_for, run_experiment
        from chillfl.experiment import build_experiment

        clock.note(gc_frozen=own_process())

        import importlib.util

        has_parallel = importlib.util.find_spec("chillfl.executors.parallel") is not None
        if executor in PARALLEL_ONLY:
            import chillfl.executors.parallel  # noqa: F401  (without it chillfl would silently run sequentially)
        clock.note(parallel_module=has_parallel)
    except Exception as exc:  # noqa: BLE001 - any import failure makes the mode unavailable
        clock.note(error=f"not available: {type(exc).__name__}: {exc}")
        clock.save()
        return 3

    try:
        arrays = load_data(spec["data"], mmap=True)  # pages are read when a sampled client first touches them
        data = federated_data(w, arrays, spec["seed"])
        try:
            cfg = load_config(None, overrides(w, variant, spec["rounds"], spec["seed"], spec["device"]))
        except ConfigError as exc:  # e.g. precision = "bf16" before chillfl has it
            clock.note(error=f"not available: {exc}")
            clock.save()
            return 3
        clock.note(chillfl_version=getattr(chillfl, "__version__", "?"))
        if api == "ops":
            with intra_op_threads(cfg.threads):
                exp = build_experiment(cfg, data=data)
                with device_settings(cfg, exp.device):
                    clock.start()
                    clock.note(**count_round_ops(rounds_for(exp)(exp), w.client_sgd_steps_per_round, spec["device"]))
                    clock.round_done()
        elif api == "run_experiment":
            clock.start()
            out = run_experiment(cfg, write=False, progress=False, data=data)
            clock.round_done()
            clock.note(num_parameters=out.summary.get("num_parameters"))
        else:
            with intra_op_threads(cfg.threads):  # as run_experiment does: the config's intra-op threads
                exp = build_experiment(cfg, data=data)
                clock.note(num_parameters=sum(v.numel() for v in exp.initial_state.values() if v.is_floating_point()))
                with device_settings(cfg, exp.device):  # and its device settings (CUDA: deterministic algorithms, TF32)
                    clock.start()
                    for _ in rounds_for(exp)(exp):
                        clock.round_done()
    except Exception as exc:  # noqa: BLE001 - an executor that errors is reported, not fatal
        traceback.print_exc()
        clock.note(error=f"not available: {type(exc).__name__}: {exc}")
        clock.save()
        return 3
    clock.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
