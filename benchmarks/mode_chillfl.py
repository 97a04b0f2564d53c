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

``vectorized`` and ``processes`` need ``chillfl.engine.parallel``; when that
module is missing chillfl silently falls back to sequential, so this worker
reports "not available" for them instead of a misleading number (``auto``
then legitimately means sequential; the result notes ``parallel_module``).
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import numpy as np
import torch

from workloads import NUM_CLASSES, Workload, load_data, read_spec

PARALLEL_ONLY = ("vectorized", "processes")


def overrides(w: Workload, executor: str, rounds: int, seed: int) -> dict[str, Any]:
    model = {"name": "mcmahan_cnn"} if w.model == "cnn" else {"name": "mlp", "hidden": [64]}
    return {
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
        "eval.every": rounds,
        "model": model,
    }


def main() -> int:
    w, spec, clock = read_spec(sys.argv)
    executor, api = spec["variant"], spec.get("api", "loop")
    try:
        import chillfl
        from chillfl.config import load_config
        from chillfl.data.datasets import ArrayDataset
        from chillfl.data.federated import FederatedData
        from chillfl.runner import intra_op_threads, rounds_for, run_experiment
        from chillfl.experiment import build_experiment

        import importlib.util

        has_parallel = importlib.util.find_spec("chillfl.engine.parallel") is not None
        if executor in PARALLEL_ONLY:
            import chillfl.engine.parallel  # noqa: F401  (without it chillfl would silently run sequentially)
        clock.note(parallel_module=has_parallel)
    except Exception as exc:  # noqa: BLE001 - any import failure makes the mode unavailable
        clock.note(error=f"not available: {type(exc).__name__}: {exc}")
        clock.save()
        return 3

    try:
        arrays = load_data(spec["data"], mmap=True)  # pages are read when a sampled client first touches them
        t = torch.from_numpy
        dataset = ArrayDataset("synthetic_cifar", t(arrays["x"]), t(arrays["y"]), t(arrays["x_test"]), t(arrays["y_test"]), NUM_CLASSES)
        n = w.samples_per_client
        data = FederatedData(
            dataset=dataset,
            train_indices=[np.arange(c * n, (c + 1) * n, dtype=np.int64) for c in range(w.num_clients)],
            eval_indices=[np.zeros(0, dtype=np.int64) for _ in range(w.num_clients)],
            noise=None,
            public_indices=np.zeros(0, dtype=np.int64),
            seed=spec["seed"],
        )
        cfg = load_config(None, overrides(w, executor, spec["rounds"], spec["seed"]))
        clock.note(chillfl_version=getattr(chillfl, "__version__", "?"))
        if api == "run_experiment":
            clock.start()
            out = run_experiment(cfg, write=False, progress=False, data=data)
            clock.round_done()
            clock.note(num_parameters=out.summary.get("num_parameters"))
        else:
            with intra_op_threads(cfg.threads):  # as run_experiment does: the config's intra-op threads
                exp = build_experiment(cfg, data=data)
                clock.note(num_parameters=sum(v.numel() for v in exp.initial_state.values() if v.is_floating_point()))
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
