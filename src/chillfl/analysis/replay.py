"""Read a finished run folder back, and replay one round of it to get the client models.

Parameter-sharing runs save only the global model (``model.safetensors``);
keeping every client model of every round would cost ``clients x rounds``
model copies. The analyses that need client models (CKA between clients,
entropy before aggregation, accuracy across aggregation) instead *replay one
round*: they rebuild the run from its saved ``config.toml`` and run one more
round through the real protocol and executor (the same code path as the
run), starting from

* ``start = "final"``: the saved global model; the replayed round is round
  ``rounds + 1`` (its client sample and seeds are those of that round);
* ``start = "initial"``: the seeded initial model; the replayed round is
  exactly round 1 of the run (a test checks its global accuracy against
  ``metrics.jsonl``).

Limits (documented in docs/analysis.md): the aggregator and the temperature
policy start from their initial state, because ``model.safetensors`` holds
only the model. For FedAvg with a fixed temperature that is exact; for
stateful aggregators (SCAFFOLD's control variates, PA3Fed's score history,
server optimisers' moments) and FedChill's per-client temperatures, the
replayed round from the final model is "one round as if these restarted".
Soft-label (distillation) runs are not replayed, nor runs of a method whose
clients each keep a model of their own (its capability ``personal_model``,
:func:`refuse_personal_models`): what such a client uses is its own model,
not the global model or its aggregate, and the replay does not rebuild it;
unless its clients also train and upload the global model as FedAvg's do
(``trains_global_model``: Ditto's and APFL's w), which is what is replayed.

Checked (2026-12) against: FLex&Chill Sec. 4.4 (Fig. 9's pre-update model of
a participating client is its freshly trained local model) and Fig. 13
(INIT is the model dispatched at the start of the round, AGG the aggregate);
the replayed round from ``start = "initial"`` reproduces round 1's
``metrics.jsonl`` (tests/test_analyses.py).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call

from chillfl.capabilities import Capabilities
from chillfl.config import RunConfig, check_depth, config_from_dict, load_config, name_from_path, read_config_file
from chillfl.engine.loop import availability, draw_clients, releases_empty
from chillfl.storage.checkpoint import write_atomic
from chillfl.storage.model_file import read_client_models, read_model
from chillfl.storage.run_folder import CLIENT_MODELS
from chillfl.attacks.build import poisoned_data
from chillfl.data import ArrayDataset
from chillfl.engine.view import model_with_state
from chillfl.experiment import check_data_record
from chillfl.models.registry import float32_default
from chillfl.training.local import parameter_dtypes
from chillfl.plugins import is_custom
from chillfl.storage.results import FAILED, FAILURE, PARTIAL, strict
from chillfl.storage.run_folder import folder_named, refuse_temperature_sweep
from chillfl.storage.run_state import is_sweep
from chillfl.engine.protocol import protocol_layers
from chillfl.errors import ConfigError, json_loads, one_line
from chillfl.analysis.labels import unique_label
from chillfl.paths import check_name_lengths, shell_path
from chillfl.data import FederatedData
from chillfl.experiment import Experiment, build_data, build_experiment, build_initial_model, build_protocol, make_executor, resolve_device
from chillfl.protocols.parameters import ParameterSharing
from chillfl.protocols.registry import protocol_of
from chillfl.training.local import persistent_buffers, split_state

Params = dict[str, torch.Tensor]
MODEL = "model.safetensors"  # the runner's name for the saved global model
STARTS = ("final", "initial")


def check_exists(path: str | Path, field: str) -> None:
    """Refuse a folder that is not there in one line saying so. Why: a mistyped path was reported as "has no
    model.safetensors (the run is not finished ...)", which sent the user looking for a run that never was."""
    if not Path(path).exists():
        raise ConfigError(field, f"{path} does not exist")


def check_not_comparison(path: Path, field: str) -> None:
    """Refuse a comparison's folder in one line naming its runs (and a temperature sweep's). Why: it holds a ``config.toml``
    too (the comparison's), so it passed for a run folder, was rebuilt as one (its data set and all), and then failed as "not finished"."""
    check_exists(path, field)
    refuse_temperature_sweep(path, field)
    if is_sweep(path):
        runs = sorted(p.name for p in path.iterdir() if (p / "config.toml").is_file() and (p / MODEL).is_file())
        example = f" (e.g. {path / runs[0]})" if runs else ""
        raise ConfigError(field, f"{path} is a comparison's folder, not a run's: name its run folders{example}; `chillfl report {path}` shows them all")


def check_finished(run_dir: str | Path, field: str = "run_dir") -> None:
    """Refuse a folder that is not there, a diverged run (``NAME.failed``, :func:`diverged_at`) and an unfinished run (a
    ``.partial`` folder without ``summary.json``), each in one line saying what it is (the unfinished one: how to finish it).
    Why: one killed while it wrote its results may hold ``model.safetensors`` already, and the analysis then wrote into the
    ``.partial``; the other two were called "not finished"."""
    check_exists(run_dir, field)
    path = folder_named(run_dir)
    if not (path / "summary.json").is_file() and (path.name.endswith(FAILED) or (path / FAILURE).is_file()):
        raise ConfigError(field, f"{run_dir} diverged{diverged_at(path)}: it has no final model")
    if path.name.endswith(PARTIAL) and not (path / "summary.json").is_file() and not is_sweep(path):  # a comparison: its own line
        resume = path.parent if is_sweep(path.parent) else path  # one run of a comparison: the comparison resumes as a whole
        raise ConfigError(field, f"{run_dir} is a run that did not finish (a {PARTIAL} folder without summary.json); `chillfl resume {shell_path(resume)}` finishes it")


def diverged_at(path: Path) -> str:
    """`` (at round N; see its failure.json)`` from a diverged run's ``failure.json`` (without the round when it is unreadable).
    Why: a diverged run (``NAME.failed``) was called "not finished", as if waiting for it would help."""
    try:
        record = json_loads((path / FAILURE).read_text(encoding="utf-8"))
        where = f"at round {int(record['round'])}; "
    except (OSError, ValueError, TypeError, KeyError):
        where = ""
    return f" ({where}see its {FAILURE})"


def load_run(run_dir: str | Path, field: str = "run_dir") -> RunConfig:
    """The saved config of a finished run folder (ConfigError naming ``field`` when it is not one), its relative
    ``data_dir`` and ``partition.from`` read from the folder the run was started in, as ``chillfl resume`` reads them
    (:func:`~chillfl.partition_refusal.started_in`, :meth:`~chillfl.config.RunConfig.paths_from`): typed in another
    folder, an analysis of a run on the default ``data_dir = "data"`` was sent to download the data it had."""
    from chillfl.partition_refusal import started_in

    path = Path(run_dir)
    check_not_comparison(path, field)
    if not (path / "config.toml").is_file():
        raise ConfigError(field, f"{path} is not a chillfl run folder (no config.toml)")
    return load_config(path / "config.toml").paths_from(started_in(path))


def saved_config_data(run_dir: str | Path, field: str = "run_dir") -> dict[str, Any]:
    """A run folder's ``config.toml`` as read, not parsed (the checks of :func:`load_run`); :func:`saved_config` parses it.

    Why apart: :func:`chillfl.load_run` parses a folder's config first as data (no plugin imported) and, when it names a
    plugin part, again with the plugin imported: the file is read once for both."""
    path = Path(run_dir)
    check_not_comparison(path, field)
    if not (path / "config.toml").is_file():
        raise ConfigError(field, f"{path} is not a chillfl run folder (no config.toml)")
    data = read_config_file(path / "config.toml")
    if "name" not in data:  # as load_config names it
        data["name"] = name_from_path(path / "config.toml")
    check_depth(data)  # before deepcopy, which recurses
    return data


def saved_config(data: Mapping[str, Any]) -> RunConfig:
    """:func:`saved_config_data`'s dict parsed, as :func:`load_run` parses the file; ``data`` is left as it was (parsed again later)."""
    return config_from_dict(copy.deepcopy(dict(data)))


def load_model_state(run_dir: str | Path, device: torch.device | str = "cpu", field: str = "run_dir") -> Params:
    """The run's saved global model (``model.safetensors``)."""
    run = Path(run_dir)
    check_not_comparison(run, field)
    check_finished(run, field)
    path = run / MODEL
    if not path.is_file():
        if (run / "summary.json").is_file():  # finished: a protocol without a global model (it said "soft-label runs", which have one)
            config = load_run(run, field)
            kind = protocol_of(config)
            if kind.global_model(config):  # FedAvg was told it "has no global model": the file is gone, not never made
                raise ConfigError(field, f"{path} is missing or not a regular file (a {kind.title} ({kind.method(config)}) run writes its global model there when it ends)")
            why = f"a {kind.title} ({kind.method(config)}) run has no global model: each client keeps its own"
        else:
            why = "the run is not finished: its model is written when it ends"
        raise ConfigError(field, f"{run} has no {MODEL} ({why})")
    return read_model(path, device)


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "summary.json"
    return json_loads(path.read_text(encoding="utf-8")) if path.is_file() else {}  # ValueError, never RecursionError


def build_run(run_dir: str | Path, field: str = "run_dir") -> Experiment:
    """The run's experiment (model template, data, policy...) rebuilt from its saved config."""
    check_finished(run_dir, field)
    return build_experiment(load_run(run_dir, field))


@dataclass(frozen=True)
class Evaluation:
    """What evaluating a run's saved global model needs, and no more: its config, data, model template and device."""

    config: RunConfig
    data: FederatedData
    model: nn.Module
    device: torch.device


def build_evaluation(run_dir: str | Path, field: str = "run_dir") -> Evaluation:
    """The run's data and model template rebuilt from its saved config, as :func:`build_run` builds them, without its method,
    policy, terms or protocol: evaluating the saved model needs none of them, so a run on a plugin's aggregator is evaluated
    without importing it (the folder is data: :func:`chillfl.plugins.reading_data`)."""
    check_finished(run_dir, field)
    config = load_run(run_dir, field)
    device = resolve_device(config.device)
    data = build_data(config)
    model, _ = build_initial_model(config, data.dataset.input_shape, data.num_classes)
    return Evaluation(config, data, model.to(device), device)


@dataclass(frozen=True)
class FinishedParts:
    """What :func:`finished_run` reads back: the config, the final global model (None without one), the data, client models."""

    config: RunConfig
    model: nn.Module | None
    data: FederatedData
    client_states: dict[int, Params]


def _dtype_fix(held: str) -> str:
    """How to pass a module in the recorded dtype(s) ``held``: ``.to`` for one dtype; for several (``"float32, float64"``,
    a float64 head) ``.to`` made the module all one dtype, which was refused again, so the module is built as the run did."""
    if "," in held:
        return f"build it as the run did (parameters of {held})"
    return f"pass the module in {held} (.to(torch.{held}))"


def finished_run(run_dir: str | Path, model: nn.Module | None = None, dataset: ArrayDataset | None = None,
                 field: str = "run_dir", config: RunConfig | None = None) -> FinishedParts:
    """A finished run's parts on the CPU for :func:`chillfl.load_run`: its data (the server validation split held out as the
    run held it out), its global model loaded into the config's model (or into a copy of ``model``, for a run on the user's
    own module) and its saved client models. Why: the recorded metrics are reproducible only on these rows and this model.
    ``config``: the folder's, already read and checked (:func:`saved_config`); None reads it here.

    The folder's model files are read after every part is built: a part that cannot be built yet (a plugin refused while
    the folder is read as data) stops the call before any of them is read, and the caller's second call reads them once."""
    path = Path(run_dir)
    if config is None:
        check_finished(path, field)
        config = load_run(path, field)
    entry = f"chillfl.load_run({shell_path(path)!r}, model=..., data=...)"
    if model is None and is_custom(config.model.get("name")):
        held = config.model.get("class", "your module")
        raise ConfigError("model", f"{path} is a run on your own nn.Module ({held}), which a config file cannot rebuild: pass one "
                                   f"of the same class again, {entry}")
    if model is not None and not is_custom(config.model.get("name")):
        raise ConfigError("model", f"{path} is a run on the registered model {config.model.get('name')!r}, which it rebuilds itself: leave model out")
    held_class = config.model.get("class")
    given_class = f"{type(model).__module__}.{type(model).__qualname__}"
    if model is not None and held_class is not None and held_class != given_class:  # as resume checks the class it is given
        raise ConfigError("model", f"is a {given_class}; the run in {path} trained a {held_class}: pass one of that class")
    held_dtype, given_dtype = config.model.get("dtype"), None if model is None else parameter_dtypes(model)
    if model is not None and held_dtype is not None and held_dtype != given_dtype:  # recorded since 2026-12-06; as resume checks it
        raise ConfigError("model", f"has parameters of {given_dtype}; the run in {path} trained in {held_dtype}, and its recorded scores "
                                   f"hold only there: {_dtype_fix(held_dtype)}")
    if dataset is None and is_custom(config.dataset.get("name")):
        raise ConfigError("data", f"{path} is a run on your own data ({config.dataset.get('source', 'tensors')}), which a config file cannot "
                                  f"rebuild: pass the same data again, {entry}")
    if dataset is not None:
        if not is_custom(config.dataset.get("name")):
            raise ConfigError("data", f"{path} is a run on the registered dataset {config.dataset.get('name')!r}, which it rebuilds itself: leave data out")
        check_data_record(config, dataset)
    data = poisoned_data(config, build_data(config, dataset))  # [attack]: the attackers' training rows, as the run trained on them
    has_model = (path / MODEL).is_file()  # else a protocol without a global model (each client keeps its own)
    if has_model and model is None:
        with float32_default():
            model, _ = build_initial_model(config, data.dataset.input_shape, data.num_classes)
    # the run's client count: a crafted file naming a client past it is refused as it is read (load_run checked only after)
    client_states = read_client_models(path / CLIENT_MODELS, num_clients=config.federation.num_clients) if (path / CLIENT_MODELS).is_file() else {}
    if not has_model or model is None:
        return FinishedParts(config, None, data, client_states)
    state = load_model_state(path, "cpu", field)
    # the names are those model.safetensors was written with (training.local.model_state: parameters and persistent buffers, a tied
    # tensor once), not state_dict()'s, which repeats a tied submodule under its every name
    names = {n for n, _ in (*model.named_parameters(), *persistent_buffers(model))}
    if names != set(state):
        extra = sorted(set(state) ^ names)[:5]
        raise ConfigError("model", f"{type(model).__qualname__} does not hold {path / MODEL}: the names {extra} differ")
    try:  # model_with_state copies first: the caller's module is neither loaded into nor moved off its device
        model = model_with_state(model, state).cpu()
    except (RuntimeError, KeyError) as exc:
        raise ConfigError("model", f"{type(model).__qualname__} does not hold {path / MODEL}: {one_line(str(exc))}") from None
    model.eval()
    return FinishedParts(config, model, data, client_states)


@dataclass
class Replay:
    """One replayed round: the start model, each participating client's trained model, the aggregate."""

    exp: Experiment
    round: int  # 1-based, as in metrics.jsonl
    start: Params
    clients: dict[int, Params]
    aggregated: Params
    record: dict[str, Any]


def replay_round(run_dir: str | Path, start: Literal["final", "initial"] = "final", exp: Experiment | None = None) -> Replay:
    """Replay one round of the run in ``run_dir`` (see module docstring)."""
    if start not in STARTS:
        raise ConfigError("--start", f"must be one of {', '.join(STARTS)}, got {start!r}")
    exp = exp or build_run(run_dir)
    config = exp.config
    kind = protocol_of(config)
    if kind.name != "parameters":
        raise ConfigError("run_dir", f"{run_dir} is a {kind.title} ({kind.method(config)}) run; this analysis replays parameter-sharing runs only")
    refuse_personal_models(config, run_dir)
    protocol = build_protocol(exp)
    *_, sharing = protocol_layers(protocol)  # [privacy] / [attack] wrap it: the round runs through them, as in the run
    assert isinstance(sharing, ParameterSharing)
    rnd = 0
    if start == "final":
        sharing.state = load_model_state(run_dir, exp.device)
        rnd = config.federation.rounds
    first = {k: v.clone() for k, v in sharing.state.items()}
    executor = make_executor(exp, protocol)
    try:
        sampled = draw_clients(config.seed, rnd, exp.data.num_clients, config.federation.sample_size(), config.federation.sampling)
        avail = availability(config.seed, rnd, sampled, config.federation, exp.data.without_training_rows(), releases_empty(protocol))  # drawn as the run drew
        if avail.skipped:
            field = "federation.min_clients" if sampled else "federation.sampling"  # Poisson sampling can draw nobody
            which = f"round {rnd + 1}, the one after the run's last," if start == "final" else "round 1 of this run"
            other = "initial" if start == "final" else "final"
            why = "draws nobody (Poisson sampling)" if not sampled else "has too few reporting clients"
            raise ConfigError(field, f"the replayed {which} {why}: nothing to replay (--start {other} replays another round)")
        tasks = protocol.configure(rnd, avail.reporting)
        for task in tasks:
            task.work = avail.work.get(task.client_id, 1.0)
        replies = executor.map(tasks)
        clients = {r.client_id: {k: v.detach().clone() for k, v in r.uplink.params.items()} for r in replies}
        record = protocol.server_update(rnd, tasks, replies).to_json()
    finally:
        executor.close()
        protocol.close()
    return Replay(exp, rnd + 1, first, clients, dict(sharing.state), record)


def refuse_personal_runs(run_dirs: Sequence[str | Path]) -> None:
    """:func:`refuse_personal_models` on every run, before the first is computed, for the analyses of the saved global
    model alone (calibration, grad-norms). Why: they measured ``local_only``'s never-trained global model without a word,
    while cka and aggregation-* refused it. A run whose method's capabilities cannot be asked (a plugin's, not imported
    while the folder is read as data: :func:`chillfl.plugins.reading_data`; the saved config parsed, so nothing else is
    unknown) goes on as before: its model and data alone are evaluated (``--import-plugins`` has it asked). A run that
    saved no global model (prototype sharing) is left to :func:`load_model_state`, whose line says why it has none."""
    for run_dir in run_dirs:
        config = load_run(run_dir)
        if not (Path(run_dir) / MODEL).is_file():
            continue
        try:
            method_capabilities(config)
        except ConfigError:
            continue
        refuse_personal_models(config, run_dir)


def method_capabilities(config: RunConfig) -> Capabilities:
    """What the run's method declares (``[algorithm]``'s, wrapped base included, or the method ``[distillation]`` /
    ``[prototypes]`` names), asked of its spec through the registries, never by its name."""
    from chillfl.aggregation.registry import configured_capabilities

    kind = protocol_of(config)
    return kind.method_capabilities(config) if kind.method_capabilities is not None else configured_capabilities(config.algorithm)


def refuse_personal_models(config: RunConfig, run_dir: str | Path, field: str = "run_dir") -> None:
    """Refuse a run whose clients each keep a model of their own (``personal_model``) in one line naming its method,
    unless they also train and upload the global model as FedAvg's clients do (``trains_global_model``: Ditto, APFL).
    Why: the analyses that read the global model and its aggregate measured something no client uses (``local_only``:
    a never-trained global model, "-41.6 points across aggregation" and CKA 1.0 at every layer)."""
    capabilities = method_capabilities(config)
    if capabilities.own_models_only:
        method = protocol_of(config).method(config)
        raise ConfigError(field, f"{run_dir} is a run of {method}, whose clients each keep a model of their own (personal_model): "
                                 "this analysis reads the global model and its aggregate, which are not the models its clients use")


@torch.no_grad()
def predict(model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Logits of ``state`` on ``x``, in eval mode; ConfigError on ``model`` unless ``state`` fits ``model`` (:func:`check_fits`)."""
    check_fits(model, state)
    model.eval()
    params, buffers = split_state(model, state)
    outs = [functional_call(model, (params, buffers), (x[i : i + batch_size],)) for i in range(0, len(x), batch_size)]
    return torch.cat(outs) if outs else torch.zeros(0)


def check_fits(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """ConfigError on ``model`` naming the first tensor of ``state`` that ``model`` does not hold as it is.

    Why: ``functional_call`` broadcasts a tensor of another shape (a scalar bias where the model has a [10] one) and
    uses the module's own tensor for a missing name, so a crafted or mismatched saved state gave wrong predictions
    without a word. The names are those a saved model holds (parameters and persistent buffers, a tied tensor once).
    """
    held = {n: t for n, t in (*model.named_parameters(), *persistent_buffers(model))}
    what = type(model).__qualname__
    differ = sorted(set(held) ^ set(state))
    if differ:
        where = "the saved state has no tensor" if differ[0] in held else f"{what} has no tensor"
        raise ConfigError("model", f"the saved state does not fit {what}: {where} {differ[0][:80]!r}")
    for key, tensor in state.items():
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != tuple(held[key].shape):
            got = list(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ConfigError("model", f"the saved state does not fit {what}: tensor {key[:80]!r} is {got}, the model's is {list(held[key].shape)}")


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-sample Shannon entropy (nats) of softmax(logits)."""
    logp = torch.log_softmax(logits.double(), dim=1)
    return -(logp.exp() * logp).sum(dim=1)


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(1) == y).double().mean()) if len(y) else float("nan")


def check_out(run_dirs: Sequence[str | Path], out: str | None) -> Path | None:
    """The folder :func:`out_folder` will write (``--out``, or ``<first RUN_DIR>/analysis``), checked and not created;
    None where the default's first RUN_DIR is no folder (the run's own check then says so, naming RUN_DIR, not ``--out``).

    Why before any run is computed: an unwritable ``-o`` (or a run folder one may not write into) was refused only
    after every run had been computed, minutes over many runs, and the first ``-o`` a user tried was then refused again."""
    from chillfl.analysis.output import check_folder

    if out == "":  # was taken as no --out: the files went to <RUN_DIR>/analysis, nothing said
        raise ConfigError("--out", "must be a non-empty path, got ''")
    if out is None and not Path(run_dirs[0]).is_dir():
        return None
    folder = Path(out) if out is not None else Path(run_dirs[0]) / "analysis"
    default = "" if out is not None else " (the default, under the first RUN_DIR; -o DIR writes elsewhere)"
    check_name_lengths(folder, "--out")  # is_symlink/exists raise for a component over 255 bytes (a traceback)
    if out is None and folder.is_symlink():  # a received run folder's link would send the files wherever it points
        raise ConfigError("--out", f"{folder} is a symbolic link; the default output folder is not followed out of a run folder{default}")
    try:
        if folder.exists() and not folder.is_dir():
            raise ConfigError("--out", f"{folder} exists and is not a folder")
        return check_folder(str(folder))
    except ConfigError as exc:
        raise ConfigError(exc.field, exc.message + default) from None


def check_runs(run_dirs: Sequence[str | Path], field: str = "run_dir") -> None:
    """Refuse, before the first run is computed, a RUN_DIR that is not a finished run's folder (the line the run's turn would
    have said: :func:`check_finished`, :func:`load_run`). Why: a mistyped last RUN_DIR was refused after the others were computed."""
    for run_dir in run_dirs:
        check_finished(run_dir, field)
        load_run(run_dir, field)


def out_folder(run_dirs: Sequence[str | Path], out: str | None) -> Path:
    """Where an analysis writes: ``--out``, or ``<first RUN_DIR>/analysis`` (checked as :func:`check_out` checks it).

    Not created here: its first file's write makes it (:func:`~chillfl.plots.figure.save_figure`, :func:`write_json`).
    Made here, an analysis interrupted while it drew its figure left it empty (by default inside a finished run folder)."""
    folder = check_out(run_dirs, out)
    if folder is None:  # the first RUN_DIR was read, and is gone since
        raise ConfigError("run_dir", f"{run_dirs[0]} is not a folder")
    return folder


def write_json(path: Path, data: Any) -> None:
    """An analysis's result, written atomically and after its figure: an analysis interrupted (Ctrl-C) while it draws
    left a complete-looking JSON without its PNG, and the command had said only "interrupted". Its folder is made here
    if no file made it yet (:func:`out_folder`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(strict(data), indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8"))


def run_label(run_dir: str | Path, among: Sequence[str | Path] = ()) -> str:
    """A short label for a run in plots and tables: its folder name, with as many parent folders as it takes to tell it
    from every other folder of ``among`` (the command's RUN_DIRs): results keyed by label must not drop a run. Why more
    than one parent: ``A/results/demo`` and ``B/results/demo`` were both ``results/demo``, and the second overwrote the first."""
    path = Path(run_dir).resolve()
    others = {Path(o).resolve() for o in among} - {path}
    return unique_label(path, others)
