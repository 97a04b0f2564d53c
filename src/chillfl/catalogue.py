"""``chillfl list experiments``: the bundled experiments as a table a newcomer can choose from.

Each row says which paper table or figure the experiment reruns, whether it is one run, a
comparison or made by another command (``_catalogue.toml``'s ``[commands]``), whether the data it
loads (its public set's too) are embedded (offline) or need ``chillfl data download X Y`` (or, for a
dataset with no download, what docs/datasets.md says), and how long it takes. Times are honest about
where they come from:

- **measured**: CPU time of the whole experiment on the development machine (2-core Intel Xeon,
  AVX-512; the numbers quoted in the docs pages), in ``MEASURED_CPU_MIN``;
- **est.**: extrapolated from the config by a two-term cost model (per-step overhead plus FLOPs at a
  measured throughput) calibrated on the measured rows; expect a factor of 2 either way. Each run of a
  comparison is priced with its own config, and the work its method adds to plain local SGD (a second
  gradient a step, a teacher's forward, a personal model, a public set, ...) is what the method declares
  in its spec (:class:`~chillfl.capabilities.Cost`, :func:`declared_cost`): no method is named here;
- **this machine** (``--calibrate``): both, times the factor a timed probe run found here (:mod:`chillfl.machine_speed`):
  other CPUs ran the model's minutes in 0.4-1.9 of them, more than its own error.

Which paper each folder reruns and which experiments were measured are data, not code
(``experiments/_catalogue.toml``).

No bundled experiment has been timed on a GPU. The GPU column of the full-size experiments (those
needing a download, meant for a GPU) is an estimate from what was measured on an NVIDIA H200
(docs/gpu.md, "Speed", 2026-12-04): a step's cost from workload 2, a FLOP rate from workload 1, and a
range whose ends are two readings of a step of fewer clients that those benchmarks cannot tell apart
(``estimate_gpu_minutes``). The CPU-scale experiments show "-": a CPU
runs them in minutes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import hashlib
import json
import textwrap

from chillfl.capabilities import Cost
from chillfl.config import RunConfig, load_config, read_config_file, read_toml
from chillfl.experiments import DEMO_GRID, bundled_experiments, catalogue_notes, experiments_root, resolve_config

if TYPE_CHECKING:
    from chillfl.data.datasets import DatasetSize

EMBEDDED = ("digits", "mnist1d", "synthetic")

PAPERS, MEASURED_CPU_MIN = catalogue_notes()
"""Folder -> paper name, and experiment -> measured CPU minutes: data, in ``experiments/_catalogue.toml``."""

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


GPU_CLIENT_STEP_S = 0.032 / 500
"""Seconds of one client's local SGD step on an NVIDIA H200 beside its FLOPs, executor ``auto``, fp32, chillfl at
39e5aaf0 (2026-12-04, torch 2.11, docs/gpu.md "Speed"): workload 2, 0.032 s a round of 100 clients x 5 steps (an
MLP at batch 10, 12 MFLOP of training a client step: the step's cost, not its FLOPs). 0.064 ms a client step,
i.e. 6.4 ms a vmapped step of 100 clients."""
GPU_MEASURED_CLIENTS = 100
"""Clients a vmapped step trained in both measurements. Whether a step of fewer clients costs less or the same
was not measured, so the estimate's range spans both."""
GPU_FLOPS = 43.2e6 * 250_000 / (0.865 - 5000 * GPU_CLIENT_STEP_S)
"""FLOP/s of training beyond the steps' cost, on the same H200: workload 1's 10.8 TFLOP a round (43.2 MFLOP a
sample x 250,000; the McMahan CNN) in the 0.865 s of its round less its 5,000 client steps at
:data:`GPU_CLIENT_STEP_S`: 19.8 TFLOP/s."""


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
    gpu_min: tuple[float, float] | None = None
    """Low and high estimate of the minutes on an H200 (full-size experiments only)."""


@dataclass(frozen=True)
class Work:
    """What one run of a config trains and evaluates: the counts both cost models price."""

    client_steps: float
    """SGD steps summed over the clients and rounds, each weighted by its passes (a sharpness-aware step: 2), with the
    steps of the public-set and server-side training its method declares (at ``client.batch_size``)."""
    clients_per_round: int
    flops: float
    """Training (forward + backward: 3 forwards a sample) and evaluation FLOPs over the run, and those its parts declare on
    the parameters (``Cost.step_parameter_flops``)."""
    throughput: float
    """FLOP/s of its model's local training on one core (:func:`throughput`)."""
    overhead_steps: float = 0.0
    """Steps' overheads with no FLOPs its parts declare (``Cost.pass_overhead`` x the passes): measured on the CPU only,
    so the GPU estimate leaves them out."""
    host_seconds: float = 0.0
    """Seconds of the work its parts declare on the host: the server's (``Cost.client_server_steps``, ``class_server_steps``,
    ``server_parameter_flops``, ``round_server_parameter_flops``, ``pair_server_steps``, ``class_pair_server_steps``) and the
    clients' one-off work (``first_pair_flops``, ``first_public_pair_flops``), the same in both estimates (the server's
    runs on the host whatever the run's device; the fits are priced at the CPU's rate: an upper bound on a GPU)."""

    def cpu_seconds(self) -> float:
        """The CPU cost model: (steps + declared overheads) x overhead + FLOPs at the model's throughput, + the server's host work."""
        return (self.client_steps + self.overhead_steps) * STEP_S + self.flops / self.throughput + self.host_seconds


@dataclass(frozen=True)
class Command:
    """The command that makes an experiment's figure when it is not ``chillfl run`` / ``compare`` (``_catalogue.toml``'s
    ``[commands]``): why: ``chillfl run fedchill/fig1-digits`` trains a FedChill run and draws no heat map."""

    command: str
    """What follows ``chillfl`` and precedes the experiment's name: ``analyze temperature-sweep``."""
    priced_as: dict[str, object]
    """Overrides under which the config's plain run does the command's work (the cost model prices that run)."""


@functools.cache
def commands() -> dict[str, Command]:
    """``experiments/_catalogue.toml``'s ``[commands]``: experiment -> the command that makes it (data, not code)."""
    notes = read_toml(experiments_root() / "_catalogue.toml")
    return {str(k): Command(str(v["command"]), dict(v.get("priced_as", {}))) for k, v in notes.get("commands", {}).items()}


def _target(stem: str) -> str:
    """``table4-digits`` -> ``Table 4``; ``fig7-...`` -> ``Fig. 7``; anything else: a study of ours."""
    head = stem.split("-")[0]
    for prefix, label in (("table", "Table"), ("fig", "Fig.")):
        if head.startswith(prefix) and head[len(prefix):].isdigit():
            return f"{label} {head[len(prefix):]}"
    return "study"


def _runs(config: RunConfig) -> list[RunConfig]:
    """The config of each run ``chillfl compare`` plans for ``config``: its variants, own grids, step-size controls, tuning
    points and seeds (the planner's own list: counted here by hand it left out the controls); the config itself for a single run."""
    from chillfl.sweeps.plan import plan_runs

    grid = list(DEMO_GRID) if config.name == "demo" else []
    if not (grid or config.variants or config.tune or len(config.compare.get("seeds") or []) > 1):
        return [config]
    return [cell.config for cell in plan_runs(config, grid).cells]


def declared_cost(config: RunConfig) -> Cost:
    """The work a run's parts declare beyond plain local SGD: its protocol's, its method's (``[algorithm]``, wrapped
    base included, or the method ``[distillation]`` / ``[prototypes]`` names), its loss terms', its temperature
    policy's, its ``[privacy]`` mechanism's, and sharpness-aware steps (``client.sam_rho``). Asked of their specs, never by name."""
    from chillfl.aggregation.registry import algorithm_options, algorithm_spec, effective_capabilities
    from chillfl.privacy.spec import spec_of as privacy_spec
    from chillfl.protocols.registry import protocol_of
    from chillfl.temperature import policy_capabilities
    from chillfl.training import sam
    from chillfl.training.terms import configured_terms

    protocol = protocol_of(config)
    cost = protocol.cost(config).plus(policy_capabilities(config.temperature).cost)
    if protocol.method_capabilities is not None:
        cost = cost.plus(protocol.method_capabilities(config).cost)
    if protocol.uses_aggregator:
        name = str(config.algorithm.get("name"))
        spec = algorithm_spec(name, "algorithm")
        options = algorithm_options(spec, name, {k: v for k, v in config.algorithm.items() if k != "name"}, "algorithm", "algorithm.name")
        cost = cost.plus(effective_capabilities(spec, options).cost)
    for term in configured_terms(config.objective):
        cost = cost.plus(term.spec.cost)
    if config.privacy.enabled:
        cost = cost.plus(privacy_spec(config.privacy).cost)
    return cost.plus(sam.COST) if config.client.sam_rho else cost


def _public_size(config: RunConfig) -> int:
    """The run's public set's samples, as its protocol says (0: it has none)."""
    from chillfl.protocols.registry import protocol_of

    return protocol_of(config).public_size(config)


def _forward_flops(config: RunConfig) -> float | None:
    """FLOPs of one sample's forward pass through the config's model (None: the model cannot be built here):
    the stored count for a bundled experiment's model, else counted."""
    dataset, items = str(config.dataset.get("name")), _model_items(config)
    stored = stored_flops().get(flops_key(dataset, items))
    if stored is not None:
        return stored
    counts = _config_counts(config)
    return None if counts is None else counts[0]


def _parameters(config: RunConfig) -> float | None:
    """The config's model's trainable parameters (None: the model cannot be built here): stored for a bundled experiment's
    model (``[parameters]``), else counted; asked only of a run whose parts declare work on the parameters."""
    dataset, items = str(config.dataset.get("name")), _model_items(config)
    stored = stored_parameters().get(flops_key(dataset, items))
    if stored is not None:
        return stored
    counts = _config_counts(config)
    return None if counts is None else counts[1]


def _config_counts(config: RunConfig) -> tuple[float, float] | None:
    """The config's model's forward FLOPs a sample and trainable parameters, counted on its dataset's inputs (None: the
    dataset's size is not known here, or the model cannot be built)."""
    size = dataset_size(config)
    return None if size is None else _model_counts(size.input_shape, size.classes, _model_items(config))


def _model_items(config: RunConfig) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in config.model.items()))


def flops_key(dataset: str, model_items: tuple[tuple[str, str], ...]) -> str:
    """The ``[forward_flops]`` key of a dataset and model: ``cifar10:name='resnet18'`` (options sorted, values as ``repr``)."""
    return f"{dataset}:" + ", ".join(f"{k}={v}" for k, v in model_items)


@functools.cache
def stored_flops() -> dict[str, float]:
    """``experiments/_catalogue.toml``'s ``[forward_flops]``: the counts of the bundled experiments' models.

    Stored, not counted, so that listing the experiments or planning ``reproduce --dry-run`` builds no model
    and imports no torch for it (counting builds 18 models, ResNets and a ViT, and pulls in torch's compiler:
    most of the 5-15 s the listing took). ``tests/test_catalogue.py`` recounts every bundled model and fails,
    printing the table to paste (:func:`flops_table`), when a model or a config changes a count."""
    notes = read_toml(experiments_root() / "_catalogue.toml")
    return {str(k): float(v) for k, v in notes.get("forward_flops", {}).items()}


@functools.cache
def stored_parameters() -> dict[str, float]:
    """``experiments/_catalogue.toml``'s ``[parameters]``: the trainable parameters of the bundled experiments' models, stored
    for the reason :func:`stored_flops` gives and checked the same way (:func:`counted_parameters`)."""
    notes = read_toml(experiments_root() / "_catalogue.toml")
    return {str(k): float(v) for k, v in notes.get("parameters", {}).items()}


def _counted(which: int) -> dict[str, float]:
    """Every bundled experiment's model counted afresh: its forward FLOPs (``which`` 0) or trainable parameters (1)."""
    out: dict[str, float] = {}
    for name in bundled_experiments():
        config = load_config(resolve_config(name), {})
        counts = _config_counts(config)
        if counts is not None:
            out[flops_key(str(config.dataset.get("name")), _model_items(config))] = counts[which]
    return out


def counted_flops() -> dict[str, float]:
    """Every bundled experiment's model counted afresh (what ``[forward_flops]`` must hold)."""
    return _counted(0)


def counted_parameters() -> dict[str, float]:
    """Every bundled experiment's model's trainable parameters counted afresh (what ``[parameters]`` must hold)."""
    return _counted(1)


def flops_table(counts: dict[str, float], table: str = "forward_flops") -> str:
    """``counts`` as the ``[forward_flops]`` (or ``table``) table of ``_catalogue.toml`` (whole numbers: the counter counts them)."""
    import tomli_w

    return tomli_w.dumps({table: {k: int(counts[k]) for k in sorted(counts)}})


@functools.cache
def _model_counts(shape: tuple[int, ...], classes: int, model_items: tuple[tuple[str, str], ...]) -> tuple[float, float] | None:
    """The model's forward FLOPs a sample of ``shape`` and its trainable parameters, for ``classes`` (None: it cannot be built here)."""
    import ast
    import torch  # lazy, with the models below: `chillfl list` imports no torch until a FLOP count is asked for
    from torch.utils.flop_counter import FlopCounterMode

    from chillfl.experiment import sample_input
    from chillfl.models import build_model

    options = {k: ast.literal_eval(v) for k, v in model_items}
    for device in ("meta", "cpu"):  # meta: shapes only, no weights initialised (resnet18: 0.2 s instead of 4.6 s)
        try:
            with torch.device(device):
                model = build_model(str(options["name"]), shape, classes, options)
                model.eval()
                with torch.no_grad(), FlopCounterMode(display=False) as counter:
                    model(sample_input(model, shape))  # the model's dtype: registered models are float32 under a float64 default
            return float(counter.get_total_flops()), float(sum(p.numel() for p in model.parameters() if p.requires_grad))
        except Exception:  # noqa: BLE001 - a model that cannot run on meta tensors is counted on the CPU; failing both, "-"
            continue
    return None


def dataset_size(config: RunConfig) -> DatasetSize | None:
    """The config's dataset in numbers, its files unread, as its spec declares them (:func:`chillfl.data.datasets.dataset_size`:
    ``DatasetEntry.size`` of its options, a plugin's own too); None: it declares none (its runs are not priced)."""
    from chillfl.data.datasets import dataset_size as declared

    return declared(config.dataset)


def rows(config: RunConfig) -> tuple[int, int]:
    """The (training, test) rows of the config's dataset (:func:`dataset_size`); a KeyError when its size is not known here."""
    size = dataset_size(config)
    if size is None:
        raise KeyError(str(config.dataset.get("name")))
    return size.train, size.test


def kept_rows(config: RunConfig, train: int) -> int:
    """The training rows the config's partitioner hands the clients, as it declares them (``rows_kept`` of its spec:
    ``frac``, shards that cover part of the data); all ``train`` when it declares none."""
    from chillfl.data.partition import partitioner_options, partitioner_spec

    name, options = RunConfig.component(config.partition)
    kept = partitioner_spec(name).rows_kept
    return train if kept is None else kept(partitioner_options(name, options), train, config.federation.num_clients)


def work(config: RunConfig) -> Work | None:
    """One run's steps and FLOPs (None: its dataset or model is not known here); clients hold equal shares.

    Local training is ``client.epochs`` over a client's rows, times the trainings its method declares, plus the further
    epochs it declares, each step weighted by its declared passes, then the further one-batch passes it declares (``steps``),
    and each pass's declared overhead (``pass_overhead``, priced on the CPU as that many steps without FLOPs) and FLOPs on the
    parameters (``step_parameter_flops``); the epochs a client runs once (``first_epochs``), spread over the rounds; then the
    public-set samples each client and the server train on a round, and the evaluation: the global model's test pass and the
    further passes declared, on each round that evaluates (``eval.every``, and the last); last, the server's host work for each
    sampled client, each round and each pair of clients, and the clients' one-off work over their rows."""
    size = dataset_size(config)
    flops = _forward_flops(config)
    if size is None or flops is None:
        return None
    train, test, shape, classes = size
    fed, batch, cost = config.federation, config.client.batch_size, declared_cost(config)
    clients = fed.sample_size()  # the count a round trains (max(1, floor(C N)) from a fraction)
    per_client = kept_rows(config, train) / fed.num_clients
    batches = math.ceil(per_client / batch)
    epochs = config.client.epochs * cost.trainings + cost.epochs
    local_steps = fed.rounds * clients * (epochs * batches * cost.step_passes + cost.steps)
    overhead = local_steps * cost.pass_overhead  # calls with no FLOPs (a proximal term, a job a batch): steps' overheads alone
    further = config.client.epochs * max(cost.trainings - 1, 0.0) + cost.epochs  # the further trainings' epochs
    overhead += fed.rounds * clients * further * batches * cost.step_passes * cost.extra_pass_overhead
    local_samples = fed.rounds * clients * (epochs * per_client * cost.step_passes + cost.steps * batch)
    participants = fed.expected_participants()
    first = participants * cost.first_epochs  # epochs in all, once a client
    extra_steps = fed.rounds * (clients * math.ceil(cost.public_samples / batch) + math.ceil(cost.server_samples / batch) + cost.server_steps)
    extra_samples = fed.rounds * (clients * cost.public_samples + cost.server_samples)
    evaluated = len(config.eval.evaluated_rounds(fed.rounds)) * test * (1 + cost.test_passes)  # the rounds that evaluate
    on_server = fed.rounds * (clients * cost.server_parameter_flops + cost.round_server_parameter_flops)
    parameters = _parameters(config) if cost.step_parameter_flops or on_server else 0.0
    if parameters is None:
        return None
    on_parameters = local_steps * cost.step_parameter_flops * parameters * fed.num_clients
    host_steps = fed.rounds * clients * (cost.client_server_steps + classes * cost.class_server_steps)
    host_steps += participants**2 * (cost.pair_server_steps + classes**2 * cost.class_pair_server_steps)  # once a pair of clients
    host = host_steps * STEP_S + on_server * parameters / SMALL_FLOPS
    public = _public_size(config) if cost.first_public_pair_flops else 0
    once = cost.first_pair_flops * per_client**2 + cost.first_public_pair_flops * per_client * public  # pairs of rows, once a client
    host += participants * once * math.prod(shape) / CPU_FLOPS  # a client's own work: the CPU's
    return Work(local_steps + first * batches + extra_steps, clients,
                (3 * (local_samples + first * per_client + extra_samples) + evaluated) * flops + on_parameters, throughput(flops), overhead, host)


def _priced(config: RunConfig, runs: Sequence[RunConfig] | None) -> list[Work] | None:
    """Each run's work: ``runs``, the configs of the runs when the caller planned them already (None: planned here,
    :func:`_runs`; planning validates every run's config, the listing's costliest step)."""
    works = [work(c) for c in (_runs(config) if runs is None else runs)]
    return None if any(w is None for w in works) else [w for w in works if w is not None]


def estimate_cpu_minutes(config: RunConfig, runs: Sequence[RunConfig] | None = None) -> float | None:
    """The cost model: steps x overhead + training and evaluation FLOPs at ``throughput``, in minutes, summed over the runs.

    ``runs``: the config of each run (a comparison's variants x tuning points x seeds); None: planned from its
    ``[variants]``, ``[compare] seeds`` and ``[tune]``."""
    works = _priced(config, runs)
    # math.fsum: the correctly rounded sum on every Python (3.12's sum() of floats compensates, 3.11's does not: the
    # stored listing's minutes differed in the last digits under 3.12)
    return None if works is None else math.fsum(w.cpu_seconds() for w in works) / 60


def estimate_gpu_minutes(config: RunConfig, runs: Sequence[RunConfig] | None = None) -> tuple[float, float] | None:
    """Minutes on an H200 (executor ``auto``, fp32), low and high: the client steps at the measured cost of a step
    (:data:`GPU_CLIENT_STEP_S`), a step of fewer than 100 clients costing proportionally less (low) or as much as
    one of 100 (high), plus the run's FLOPs at the rate workload 1 reached beyond its steps (:data:`GPU_FLOPS`),
    plus the host work its parts declare (:attr:`Work.host_seconds`, as on the CPU); summed over the runs.
    ``runs``: as for :func:`estimate_cpu_minutes`."""
    works = _priced(config, runs)
    if works is None:
        return None
    low = high = 0.0
    for w in works:
        steps = w.client_steps * GPU_CLIENT_STEP_S
        rest = w.flops / GPU_FLOPS + w.host_seconds
        low += steps + rest
        high += steps * max(1.0, GPU_MEASURED_CLIENTS / w.clients_per_round) + rest
    return low / 60, high / 60


def datasets_loaded(configs: Sequence[RunConfig]) -> list[str]:
    """Every dataset the runs load, in first-seen order: each run's own and the public set it distils on
    (``distillation.public_dataset``: SCARLET's CIFAR-10 runs load CIFAR-100 too)."""
    names: dict[str, None] = {}
    for config in configs:
        names[str(config.dataset.get("name"))] = None
        setup = config.distillation_setup
        if setup is not None and setup.common.public_dataset is not None:
            names[setup.common.public_dataset] = None
    return list(names)


def _data(configs: Sequence[RunConfig]) -> str:
    """The data column: "offline" when every dataset the runs load is embedded, else the one ``chillfl data download``
    command for those it fetches and, for any other, what docs/datasets.md says to do."""
    from chillfl.data.sources import MANUAL, SEE_DOCS, SOURCES

    needed = [name for name in datasets_loaded(configs) if name not in EMBEDDED]
    fetched = [name for name in needed if name in SOURCES]
    said = ([f"data download {' '.join(fetched)}"] if fetched else []) + [
        f"{name}: {MANUAL[name].listed if name in MANUAL else SEE_DOCS}" for name in needed if name not in SOURCES]
    return "; ".join(said) if said else "offline"


LISTING = "_listing.toml"
"""The listing's rows of the bundled experiments as they were computed, each with its config's fingerprint (derived data)."""


def fingerprint(name: str) -> str:
    """A digest of experiment ``name``'s config with its ``extends`` chain resolved: a stored row is its own only while this holds."""
    raw = read_config_file(resolve_config(name))
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=repr).encode()).hexdigest()[:16]


@functools.cache
def stored_rows() -> dict[str, tuple[str, Entry]]:
    """``experiments/_listing.toml``: experiment -> (its config's fingerprint, its row).

    Stored, not computed, so that ``chillfl list experiments`` answers in well under 2 s: computing a row
    validates every variant of the experiment (568 in all), which loads each method's settings and so
    torch. A row whose config no longer has its fingerprint is computed afresh. ``tests/test_catalogue.py``
    recomputes every row and fails, printing the file to paste (:func:`listing_file`), when one changes
    (a config, the cost model's constants or ``_catalogue.toml``'s notes)."""
    path = experiments_root() / LISTING
    if not path.is_file():
        return {}
    out: dict[str, tuple[str, Entry]] = {}
    for name, row in read_toml(path).items():
        gpu = row.get("gpu_min")
        out[str(name)] = (str(row["config"]), Entry(str(name), str(row["paper"]), str(row["target"]), str(row["kind"]), str(row["data"]),
                                                  float(row["cpu_min"]) if "cpu_min" in row else None, bool(row["measured"]),
                                                  (float(gpu[0]), float(gpu[1])) if gpu else None))
    return out


def listing_file(entries: list[Entry]) -> str:
    """``entries`` as ``experiments/_listing.toml``."""
    import tomli_w

    table: dict[str, dict[str, object]] = {}
    for e in entries:
        row: dict[str, object] = {"config": fingerprint(e.name), "paper": e.paper, "target": e.target, "kind": e.kind, "data": e.data, "measured": e.measured}
        if e.cpu_min is not None:
            row["cpu_min"] = e.cpu_min
        if e.gpu_min is not None:
            row["gpu_min"] = list(e.gpu_min)
        table[e.name] = row
    head = "# Derived data: the rows of `chillfl list experiments` (chillfl/catalogue.py, stored_rows); tests/test_catalogue.py\n"
    return head + "# recomputes them and prints this file when one changes. Do not edit by hand.\n" + tomli_w.dumps(table)


def entry(name: str) -> Entry:
    """Experiment ``name``'s row: stored while its config is unchanged, else computed (:func:`computed_entry`)."""
    stored = stored_rows().get(name)
    if stored is not None and stored[0] == fingerprint(name):
        return stored[1]
    return computed_entry(name)


def computed_entry(name: str) -> Entry:
    """Experiment ``name``'s row, from its validated config and the cost models; one another command makes (:func:`commands`)
    is named by that command and priced as the run its ``priced_as`` overrides make."""
    command = commands().get(name)
    config = load_config(resolve_config(name), command.priced_as if command is not None else {})
    paper = PAPERS.get(Path(name).parts[0], "-") if "/" in name else "-"
    target = _target(Path(name).name) if "/" in name else "demo"
    runs = _runs(config)  # planned once for the row's three columns (it validates every run's config: most of a row's cost)
    if command is not None:
        kind = command.command
    elif config.variants or config.tune or len(config.compare.get("seeds") or []) > 1:
        kind = f"compare ({len(runs)} runs)"
    else:
        kind = "run"
    measured = name in MEASURED_CPU_MIN
    minutes = MEASURED_CPU_MIN[name] if measured else estimate_cpu_minutes(config, runs)
    full_size = str(config.dataset.get("name")) not in EMBEDDED
    gpu = estimate_gpu_minutes(config, runs) if full_size else None
    return Entry(name, paper, target, kind, _data(runs), minutes, measured, gpu)


def _significant(value: float) -> str:
    """Two significant figures (the estimates are good to a factor of 2 or 3, not to a minute)."""
    if value <= 0:
        return "0"
    rounded = round(value, 1 - math.floor(math.log10(value)))
    return f"{rounded:,.0f}" if rounded >= 10 else f"{rounded:g}"


def _gpu_minutes(value: tuple[float, float] | None) -> str:
    if value is None:
        return "-"
    low, high = (_significant(v) for v in value)
    return f"{low} est." if low == high else f"{low}-{high} est."


def _minutes(value: float | None, measured: bool) -> str:
    if value is None:
        return "-"
    if value >= 1440:  # a CPU is the wrong machine for it: say so in units a reader takes in
        days = round(value / 1440)
        shown = f"{days:,} day{'s' if days != 1 else ''}"
    else:
        shown = f"{value:.1f}" if value < 10 else f"{value:,.0f}"
    return shown if measured else f"{shown} est."


def catalogue(computed: bool = False) -> list[Entry]:
    """Every bundled experiment's row (``computed``: none from the stored listing)."""
    return [(computed_entry if computed else entry)(name) for name in bundled_experiments()]


def format_catalogue(entries: list[Entry], scale: float | None = None, scaled: str = "") -> str:
    """A markdown table, one experiment a row, then what the time columns mean.

    ``scale``: this machine's factor on the CPU minutes (:mod:`chillfl.machine_speed`), applied to every row, the
    measured ones too (they were measured on another machine, so they become estimates); ``scaled``: the line that
    says how it was found."""
    head = "CPU minutes (dev. machine)" if scale is None else "CPU minutes (this machine)"
    lines = [
        f"| experiment | paper | reruns | run or compare | data | {head} | GPU minutes (H200) |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        cpu = _minutes(e.cpu_min, e.measured) if scale is None else _minutes(None if e.cpu_min is None else e.cpu_min * scale, False)
        lines.append(f"| {e.name} | {e.paper} | {e.target} | {e.kind} | {e.data} | {cpu} | {_gpu_minutes(e.gpu_min)} |")
    lines += [
        "",
        "CPU minutes: measured on the 2-core Xeon development machine (executor \"sequential\", one thread), or",
        "'est.' = extrapolated from the config (steps x per-step overhead + FLOPs at the measured throughput of",
        "one core, with the extra passes each run's method declares; fitted on that machine: expect a factor of 2",
        "either way elsewhere; what it counts: docs/performance.md, \"Time estimates\").",
    ]
    if scale is None:
        lines += ["`chillfl list experiments --calibrate` times a short run here (a few seconds) and scales that column to",
                  "this machine."]
    else:
        said = f"{scaled[:1].upper()}{scaled[1:]}." if scaled else f"Scaled to this machine: the model's minutes x {scale:.2f}."
        lines += [*textwrap.wrap(said, 105),
                  "One small model's run sets that factor: a run bound by FLOPs (the full-size experiments) may scale otherwise."]
    lines += [
        "GPU minutes (full-size experiments, `--device cuda`): none was timed on a GPU; 'est.' = the run's client",
        "steps x 0.064 ms plus its FLOPs at 19.8 TFLOP/s, both measured on an H200 (executor auto, fp32, 2026-12-04;",
        "docs/gpu.md), low end if a step of fewer clients than the measured 100 costs proportionally less, high",
        "end if it costs as much. '-': a CPU-scale experiment.",
        "Run one: `chillfl run NAME` (a comparison runs all its variants), or `chillfl COMMAND NAME` where its row names",
        "another command (`analyze temperature-sweep`). Data: what its row's data column says (docs/datasets.md).",
    ]
    return "\n".join(lines)
