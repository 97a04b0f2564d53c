"""``chillfl list experiments``: the bundled experiments as a table a newcomer can choose from.

Each row says which paper table or figure the experiment reruns, whether it is one run or a
comparison, whether its data are embedded (offline) or need ``chillfl data download X``, and
how long it takes. Times are honest about where they come from:

- **measured**: CPU time of the whole experiment on the development machine (2-core Intel Xeon,
  AVX-512; the numbers quoted in the docs pages), in ``MEASURED_CPU_MIN``;
- **est.**: extrapolated from the config by a two-term cost model (per-step overhead plus FLOPs at a
  measured throughput) calibrated on the measured rows; expect a factor of 2 either way.

No GPU time has been measured for any bundled experiment: the GPU column says so rather than guess.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

from chillfl.config import RunConfig, load_config
from chillfl.experiments import DEMO_GRID, bundled_experiments, resolve_config

PAPERS = {"flexchill": "FLex&Chill", "fedchill": "FedChill", "pa3fed": "PA3Fed", "scarlet": "SCARLET"}
EMBEDDED = ("digits", "mnist1d", "synthetic")

# (training samples, test samples, input shape, classes) of the datasets the bundled configs use.
DATASETS: dict[str, tuple[int, int, tuple[int, ...], int]] = {
    "digits": (1438, 359, (1, 8, 8), 10),
    "mnist1d": (4000, 1000, (1, 40), 10),
    "cifar10": (50000, 10000, (3, 32, 32), 10),
    "cifar100": (50000, 10000, (3, 32, 32), 100),
    "svhn": (73257, 26032, (3, 32, 32), 10),
    "mnist": (60000, 10000, (1, 28, 28), 10),
    "fashion_mnist": (60000, 10000, (1, 28, 28), 10),
    "femnist": (36000, 4000, (1, 28, 28), 62),
}

MEASURED_CPU_MIN: dict[str, float] = {
    "demo": 1.6,  # 95 s of CPU time, 2026-11-26 (README)
    # CPU minutes of the whole experiment, executor "sequential", threads 1, on the 2-core Xeon
    # development machine (sources: docs/fedchill.md, docs/scarlet.md, the README's demo).
    "fedchill/table2-digits": 1.8,
    "fedchill/table3-digits": 1.5,
    "fedchill/table4-digits": 1.8,
    "fedchill/table5-digits": 1.1,
    "fedchill/table7-digits": 5.8,
    "fedchill/table10-digits": 1.9,
    "scarlet/dsfl-vs-scarlet-digits": 3.0,
}

SOFT_LABEL_FACTOR = 3.5
"""Soft-label protocols add distillation on the public set each round: measured 3.4x the model's estimate
(scarlet/dsfl-vs-scarlet-digits) and about 3.8x (scarlet/fig7-digits-strong, docs/scarlet.md)."""
STEP_S = 0.00076
"""Seconds of per-step overhead of one local SGD step, one core: fitted (least squares, with SMALL_FLOPS)
to the measured digits rows below and the demo (each within 0.8-1.1x of its measurement)."""
SMALL_FLOPS = 1.1e10
"""FLOP/s of local training of small models (under 10 MFLOP a sample: the CPU-scale CNNs), one core, fitted as above."""
CPU_FLOPS = 5.0e10
"""FLOP/s of local training of large models on one core of the development machine (the McMahan CNN of
benchmarks/README.md's workload 1: 123 GFLOP/s on both cores for the compute bound)."""
LARGE = 1.0e7
"""Forward FLOPs a sample from which a model counts as large."""


def throughput(flops: float) -> float:
    """FLOP/s of local training on one core for a model of ``flops`` forward FLOPs a sample."""
    return CPU_FLOPS if flops >= LARGE else SMALL_FLOPS


@dataclass(frozen=True)
class Entry:
    name: str
    paper: str
    target: str
    kind: str
    data: str
    cpu_min: float | None
    measured: bool


def _target(stem: str) -> str:
    """``table4-digits`` -> ``Table 4``; ``fig7-...`` -> ``Fig. 7``; anything else: a study of ours."""
    head = stem.split("-")[0]
    for prefix, label in (("table", "Table"), ("fig", "Fig.")):
        if head.startswith(prefix) and head[len(prefix):].isdigit():
            return f"{label} {head[len(prefix):]}"
    return "study"


def _runs(config: RunConfig) -> int:
    seeds = config.compare.get("seeds") or [config.seed]
    tuned = math.prod(len(v) for v in config.tune.values()) if config.tune else 1
    variants = len(config.variants) or (math.prod(len(g.split("=", 1)[1].split(",")) for g in DEMO_GRID) if config.name == "demo" else 1)
    return variants * len(seeds) * tuned


def _forward_flops(config: RunConfig) -> float | None:
    """FLOPs of one sample's forward pass through the config's model (None: the model cannot be built here)."""
    return _model_flops(str(config.dataset.get("name")), tuple(sorted((k, repr(v)) for k, v in config.model.items())))


@functools.cache
def _model_flops(dataset: str, model_items: tuple[tuple[str, str], ...]) -> float | None:
    spec = DATASETS.get(dataset)
    if spec is None:
        return None
    import ast
    import torch  # lazy, with the models below: `chillfl list` imports no torch until a FLOP count is asked for
    from torch.utils.flop_counter import FlopCounterMode

    from chillfl.models import build_model

    _, _, shape, classes = spec
    options = {k: ast.literal_eval(v) for k, v in model_items}
    for device in ("meta", "cpu"):  # meta: shapes only, no weights initialised (resnet18: 0.2 s instead of 4.6 s)
        try:
            with torch.device(device):
                model = build_model(str(options["name"]), shape, classes, options)
                model.eval()
                with torch.no_grad(), FlopCounterMode(display=False) as counter:
                    model(torch.zeros((1, *shape)))
            return float(counter.get_total_flops())
        except Exception:  # noqa: BLE001 - a model that cannot run on meta tensors is counted on the CPU; failing both, "-"
            continue
    return None


def estimate_cpu_minutes(config: RunConfig) -> float | None:
    """The cost model: steps x overhead + training and evaluation FLOPs at ``CPU_FLOPS``, in minutes."""
    spec = DATASETS.get(str(config.dataset.get("name")))
    flops = _forward_flops(config)
    if spec is None or flops is None:
        return None
    train, test, _, _ = spec
    fed = config.federation
    clients = fed.clients_per_round or max(1, round(fed.client_fraction * fed.num_clients))
    per_client = train / fed.num_clients
    steps = fed.rounds * clients * config.client.epochs * math.ceil(per_client / config.client.batch_size)
    samples = fed.rounds * clients * config.client.epochs * per_client
    seconds = steps * STEP_S + (3 * samples + fed.rounds * test) * flops / throughput(flops)
    factor = SOFT_LABEL_FACTOR if config.distillation else 1.0
    return factor * _runs(config) * seconds / 60


def _data(config: RunConfig) -> str:
    name = str(config.dataset.get("name"))
    return "offline" if name in EMBEDDED else f"data download {name}"


def entry(name: str) -> Entry:
    config = load_config(resolve_config(name), {})
    paper = PAPERS.get(Path(name).parts[0], "-") if "/" in name else "-"
    target = _target(Path(name).name) if "/" in name else "demo"
    if config.variants or config.tune or len(config.compare.get("seeds") or []) > 1:
        kind = f"compare ({_runs(config)} runs)"
    else:
        kind = "run"
    measured = name in MEASURED_CPU_MIN
    minutes = MEASURED_CPU_MIN[name] if measured else estimate_cpu_minutes(config)
    return Entry(name, paper, target, kind, _data(config), minutes, measured)


def _minutes(value: float | None, measured: bool) -> str:
    if value is None:
        return "-"
    if value >= 1440:  # a CPU is the wrong machine for it: say so in units a reader takes in
        shown = f"{value / 1440:,.0f} days"
    else:
        shown = f"{value:.1f}" if value < 10 else f"{value:,.0f}"
    return shown if measured else f"{shown} est."


def catalogue() -> list[Entry]:
    return [entry(name) for name in bundled_experiments()]


def format_catalogue(entries: list[Entry]) -> str:
    """A markdown table, one experiment a row, then what the time columns mean."""
    lines = [
        "| experiment | paper | reruns | run or compare | data | CPU minutes (2 cores) | GPU minutes |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        lines.append(f"| {e.name} | {e.paper} | {e.target} | {e.kind} | {e.data} | {_minutes(e.cpu_min, e.measured)} | not measured |")
    lines += [
        "",
        "CPU minutes: measured on the 2-core Xeon development machine (executor \"sequential\", one thread), or",
        "'est.' = extrapolated from the config (steps x per-step overhead + FLOPs at the measured throughput of",
        "one core; expect a factor of 2 either way). GPU: no bundled experiment has been timed on a GPU yet;",
        "the full-size ones (those needing a download) are meant for one: `--device cuda`.",
        "Run one: `chillfl run NAME` (a comparison runs all its variants). Data: `chillfl data download NAME`.",
    ]
    return "\n".join(lines)
