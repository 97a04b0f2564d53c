"""The catalogue's CPU estimate against the measured time of one run a method, on one small config.

    python benchmarks/estimates.py                          # every method below, the best of 3 runs each
    python benchmarks/estimates.py --methods fedavg,fedsam --repeats 2 --rounds 5

8x8 digits, the FLex&Chill CNN, 20 clients (10 a round), 2 epochs at batch 16, the clients evaluated every round
(docs/performance.md, "Time estimates", shows a table made by it). Runs are in-process after a warm-up run, one
thread, nothing written; CPU time is the measure on a shared machine (wall time grows with its load). Compare a
method's ``cpu/est`` with FedAvg's from the same process: the FedAvg ratio is the machine, the rest the method.
The ``_mlp`` and ``_resnet`` entries swap the model (the MLP, resnet20) for methods compared with their own FedAvg row
(dp-sgd's per-sample step, FedAlign's reduced final stage, which needs a ResNet; APPLE's and pFedHN's work on the parameters);
``_n60`` has 60 clients (APPLE's mixture grows with them). ``pfedhn_h50``, ``fedpac_qp500``, ``fedala_pre2`` and ``fedgh_e20``
change one option against the plain entry, to fit the constant that option scales (docs/performance.md).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch

import chillfl
from chillfl.catalogue import estimate_cpu_minutes
from chillfl.config import config_from_dict

from bench_cli import OneLineParser  # benchmarks/ is on the path: this script's folder

BASE: dict[str, Any] = {
    "name": "estimates", "seed": 0,
    "dataset": {"name": "digits"}, "partition": {"name": "dirichlet", "alpha": 0.3}, "model": {"name": "flexchill_cnn"},
    "federation": {"num_clients": 20, "clients_per_round": 10, "rounds": 5},
    "client": {"epochs": 2, "batch_size": 16, "lr": 0.05},
    "eval": {"clients": "sampled", "client_split": "proportional", "client_split_size": 50, "validation": 0.2},
}
PUBLIC = {"public_size": 400, "subset_size": 100, "distill_epochs": 2, "distill_lr": 0.1, "server_epochs": 5}
METHODS: dict[str, dict[str, Any]] = {
    "fedavg": {},
    "fedprox": {"algorithm": {"name": "fedprox", "mu": 0.01}},
    "fedsam": {"client": {"sam_rho": 0.05}},
    "fedntd": {"objective": {"terms": [{"name": "ntd"}]}},
    "moon": {"algorithm": {"name": "moon", "mu": 1.0}},
    "ditto": {"algorithm": {"name": "ditto"}},
    "fedproto": {"prototypes": {"method": "fedproto"}},
    "fedgen": {"algorithm": {"name": "fedgen"}},
    "dsfl": {"distillation": {**PUBLIC, "method": "dsfl", "temperature": 0.1}},
    "fedavg_ft": {"algorithm": {"name": "fedavg_ft"}},
    "fedbabu": {"algorithm": {"name": "fedbabu"}},
    "fedrep": {"algorithm": {"name": "fedrep", "head_epochs": 4}},
    "pfedme": {"algorithm": {"name": "pfedme", "inner_steps": 3}},
    "apfl": {"algorithm": {"name": "apfl"}},
    "fml": {"algorithm": {"name": "fml"}},
    "perfedavg": {"algorithm": {"name": "perfedavg"}},
    "ifca": {"algorithm": {"name": "ifca", "clusters": 3}},
    "fedphp": {"algorithm": {"name": "fedphp"}},
    "dpsgd": {"privacy": {"mechanism": "dp-sgd", "clip_norm": 1.0, "noise_multiplier": 1.0}},
    "fedmd": {"distillation": {**PUBLIC, "method": "fedmd", "transfer_epochs": 4}},
    "fedavg_mlp": {"model": {"name": "mlp"}},
    "dpsgd_mlp": {"model": {"name": "mlp"}, "privacy": {"mechanism": "dp-sgd", "clip_norm": 1.0, "noise_multiplier": 1.0}},
    "fedavg_resnet": {"model": {"name": "resnet20"}},
    "fedalign": {"model": {"name": "resnet20"}, "algorithm": {"name": "fedalign"}},
    "apple": {"algorithm": {"name": "apple"}},
    "fedgh": {"prototypes": {"method": "fedgh"}},
    "pfedhn": {"algorithm": {"name": "pfedhn"}},
    "fedpac": {"algorithm": {"name": "fedpac"}},
    "selective_fd": {"distillation": {**PUBLIC, "method": "selective_fd"}},
    "fedala": {"algorithm": {"name": "fedala"}},
    "pacfl": {"algorithm": {"name": "pacfl"}},
    "perfedavg_adapt": {"algorithm": {"name": "perfedavg", "adapt_steps": 5}},
    "feddyn": {"algorithm": {"name": "feddyn"}},
    "scaffold": {"algorithm": {"name": "scaffold"}},
    "vrl_sgd": {"algorithm": {"name": "vrl_sgd"}},
    "fedavg_n60": {"federation": {"num_clients": 60}},
    "apple_n60": {"federation": {"num_clients": 60}, "algorithm": {"name": "apple"}},
    "apple_mlp": {"model": {"name": "mlp"}, "algorithm": {"name": "apple"}},
    "pfedhn_mlp": {"model": {"name": "mlp"}, "algorithm": {"name": "pfedhn"}},
    "pfedhn_h50": {"algorithm": {"name": "pfedhn", "hidden": 50}},
    "fedpac_qp500": {"algorithm": {"name": "fedpac", "qp_steps": 500}},
    "fedala_pre2": {"algorithm": {"name": "fedala", "num_pre_loss": 2}},
    "fedgh_e20": {"prototypes": {"method": "fedgh", "server_epochs": 20}},
}


def config(method: str, rounds: int) -> dict[str, Any]:
    """The base config with ``method``'s tables merged in."""
    out = copy.deepcopy(BASE)
    for key, table in METHODS[method].items():
        out[key] = {**out.get(key, {}), **table}
    out["federation"]["rounds"] = rounds
    return out


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="estimates.py", description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated, from: " + ", ".join(METHODS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.methods.split(",") if n.strip()]
    unknown = [n for n in names if n not in METHODS]  # once a KeyError, after the warm-up run
    if unknown or not names:
        parser.error(f"--methods: {f'unknown method {unknown[0]!r}' if unknown else 'names no method'}; known: {', '.join(METHODS)}")
    if args.repeats < 1 or args.rounds < 1:
        parser.error(f"--repeats and --rounds must be >= 1 (got {args.repeats} and {args.rounds})")
    torch.set_num_threads(1)
    chillfl.run(config=config("fedavg", 1), progress=False, write=False)  # warm-up: imports and first calls
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeats):
        for name in names:  # interleaved, so a burst of load falls on every method alike
            w0, c0 = time.perf_counter(), time.process_time()
            chillfl.run(config=config(name, args.rounds), progress=False, write=False)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            old = best.get(name, (wall, cpu))
            best[name] = (min(wall, old[0]), min(cpu, old[1]))
    print("| method | est. (s) | CPU (s) | wall (s) | cpu/est |\n|---|---|---|---|---|")
    for name, (wall, cpu) in best.items():
        est = (estimate_cpu_minutes(config_from_dict(config(name, args.rounds))) or 0.0) * 60
        print(f"| {name} | {est:.2f} | {cpu:.2f} | {wall:.2f} | {cpu / est:.2f} |")


if __name__ == "__main__":
    main()
