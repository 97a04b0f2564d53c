"""What every protocol's server side does the same way: local-accuracy bookkeeping, global evaluation, byte counts.

Kept here so that the parameter-sharing and soft-label protocols report the
same metrics with the same definitions (see docs/usage.md, *Metrics*).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from chillfl.aggregation.base import Downlink
from chillfl.aggregation.uploads import UPLOAD_CAUSE, finite_sums
from chillfl.config import RunConfig
from chillfl.data import FederatedData
from chillfl.engine.ledger import CommunicationLedger, tensor_bytes
from chillfl.engine.predict import PredictJob
from chillfl.engine.record import Json
from chillfl.engine.protocol import ClientData, ClientReply, Message
from chillfl.errors import LOSS_HINT, ConfigError, Diverged
from chillfl.metrics.calibration import CalibrationAccumulator
from chillfl.training.local import evaluate, model_draws, row_outcomes

def mean_or_none(values: Sequence[float]) -> float | None:
    """The mean of the finite values (a client without an eval split reports NaN), None if none."""
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else None


def measured_mean(values: Sequence[float]) -> float | None:
    """The plain mean of clients' measures, None if there are none; a NaN among them makes it NaN.

    Why not :func:`mean_or_none`: a NaN here is a model whose logits are not finite (:func:`~chillfl.training.local.evaluate`),
    not a split that measured nothing (those clients are left out before), and dropping it would hide a diverged
    personal model from ``local_acc``."""
    return float(np.mean(values)) if len(values) else None


WORST_SHARE_DENOMINATOR = 10
"""``local_acc_worst10`` averages the worst ceil(n / 10) of the n measured clients (Ditto's and q-FFL's worst 10 %)."""


def worst_count(n: int) -> int:
    """How many of ``n`` measured clients ``local_acc_worst10`` averages: ceil(n / 10), at least one. Integer arithmetic:
    ``math.ceil(0.1 * 30)`` is 4, as 0.1 * 30 is 3.0000000000000004 in floating point."""
    return max(1, -(-n // WORST_SHARE_DENOMINATOR))


def fairness(accs: Mapping[int, float]) -> tuple[float, float] | None:
    """(``local_acc_std``, ``local_acc_worst10``) of the clients' accuracies (client id -> accuracy): the population
    standard deviation (each client counts once, ddof 0) and the mean of the worst :func:`worst_count`; None for no client.

    Why: ``local_acc`` is a mean, which a method can raise while it lowers its worst clients (PFLlib's "Std Test
    Accuracy", Ditto's and q-FFL's worst 10 %). Taken in client-id order in float64, so that the same per-client numbers
    give the same bits whatever order the replies came in; a NaN (a non-finite model: :func:`measured_mean`) makes both NaN.
    """
    if not accs:
        return None
    values = np.array([accs[c] for c in sorted(accs)], dtype=np.float64)
    if np.isnan(values).any():
        return math.nan, math.nan
    worst = np.sort(values, kind="stable")[:worst_count(len(values))]
    return float(np.std(values)), float(np.mean(worst))


def empty_splits(sizes: np.ndarray | None) -> frozenset[int]:
    """The clients whose split of ``sizes`` (rows per client) is empty; none for None (no such splits)."""
    return frozenset() if sizes is None else frozenset(int(c) for c in np.flatnonzero(np.asarray(sizes) == 0))


def empty_splits_note(config: RunConfig, data: FederatedData) -> str | None:
    """The note (said once a process) when some clients' own evaluation or validation splits are empty.

    Why: such a client measures nothing, so ``local_acc`` (``local_val_acc``) averages the others and ``local_clients``
    counts only those; without a word a reader takes ``local_acc`` for every client's. Large ``eval.validation`` and
    ``eval.client_split = "partition"`` (a client's test rows follow its skewed training mix) leave splits empty.
    A client the partition gave no training rows has an empty split by design (no class mix to follow) and never
    trains: it is counted on its own, not blamed on too few test rows.
    """
    if config.eval.clients == "none":
        return None
    n = data.num_clients
    idle = data.without_training_rows()
    empty = len(empty_splits(data.eval_sizes()) - idle)
    empty_val = len(empty_splits(data.validation_sizes()) - idle)
    said = [f"{empty} of the {n} clients have an empty local evaluation split (local_acc and local_clients cover only the others)"
            if empty else "",
            f"{empty_val} of the {n} clients an empty local validation split (local_val_acc leaves them out)" if empty_val else ""]
    why = f'eval.client_split = "{config.eval.client_split}", eval.validation = {config.eval.validation:g}'
    notes = [f"{'; '.join(part for part in said if part)}: the test rows left to them are too few ({why}; docs/personalised.md)"
             ] if empty or empty_val else []
    if idle:
        notes.append(f"{len(idle)} of the {n} clients hold no training rows (the partition gave them none): they never train "
                     "and report no local_acc")
    return f"note: {'; '.join(notes)}" if notes else None


def state_bytes(payload: Any) -> int:
    """Bytes a message part puts on the wire: every value in it, not only its tensors (dicts/lists/tuples of them).

    A method's report or context may carry plain numbers (PA3Fed's score, alpha and gradient norm); they
    travel too, so pricing them 0 would under-report the method's traffic. A tensor or numpy array costs its
    dtype's size per element; a Python ``float`` or ``int`` 8 bytes (a float64 / int64, as Flower carries scalar
    values); a ``bool`` 1; a numpy scalar its itemsize; a string its UTF-8 length; ``None`` nothing (no value
    sent). Anything else is refused: a value this function cannot price would silently cost 0.
    """
    if isinstance(payload, torch.Tensor):
        return tensor_bytes(payload)
    if isinstance(payload, Mapping):
        return sum(state_bytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(state_bytes(v) for v in payload)
    if isinstance(payload, (bool, np.bool_)):  # before int: a bool is an int in Python
        return 1
    if isinstance(payload, (int, float)):
        return 8
    if isinstance(payload, (np.generic, np.ndarray)):
        return int(payload.nbytes)
    if isinstance(payload, str):
        return len(payload.encode("utf-8"))
    if payload is None:
        return 0
    raise TypeError(f"cannot price a {type(payload).__name__} in a message; send tensors, numbers or strings")


def record_message(ledger: CommunicationLedger, round: int, direction: str, message: Message, client_id: int) -> None:
    """Put a message's own byte counts into the ledger: the only way bytes are counted."""
    for kind, nbytes in message.nbytes().items():
        ledger.record(round, direction, kind, nbytes, client_id)  # type: ignore[arg-type]


@dataclass
class LocalLog:
    """Every client's latest local accuracy and loss (``eval.clients = "all"`` averages them)."""

    empty: frozenset[int] = frozenset()
    """Clients whose own evaluation split is empty: their NaN measures nothing, so the means leave them out (a NaN of
    any other client is a non-finite model, and makes the mean NaN)."""
    empty_val: frozenset[int] = frozenset()
    """Likewise for the own validation splits (``local_val_acc``)."""
    acc: dict[int, float] = field(default_factory=dict)
    loss: dict[int, float] = field(default_factory=dict)
    val: dict[int, float] = field(default_factory=dict)
    """Local validation accuracy (``local_val_acc``), when the clients measure it."""

    def observe(self, reply: ClientReply[Any, Any]) -> None:
        self.record(reply.client_id, reply.local_acc, reply.local_loss, reply.local_val_acc)

    def record(self, client_id: int, acc: float | None, loss: float | None, val: float | None) -> None:
        """Client ``client_id``'s latest measure (a reply's, or the server's after the average); None: not measured."""
        if acc is not None and loss is not None:
            self.acc[client_id] = acc
            self.loss[client_id] = loss
        if val is not None:
            self.val[client_id] = val

    def metrics(self, sampled: Sequence[int], which: str, per_client: bool = False) -> dict[str, Json]:
        """The means over the round's clients (``which = "sampled"``) or every client measured so far, and the spread of
        their accuracies (:func:`fairness`, whatever ``per_client`` says); ``per_client`` (``log.per_client``): each of
        those clients' own values too, by client id."""
        ids = [c for c in (sampled if which == "sampled" else sorted(self.acc)) if c in self.acc and c not in self.empty]
        out: dict[str, Json] = {
            "local_acc": measured_mean([self.acc[c] for c in ids]),
            "local_loss": measured_mean([self.loss[c] for c in ids]),
            "local_clients": len(ids),  # the clients averaged: one with an empty split measured nothing
        }
        spread = fairness({c: self.acc[c] for c in ids})
        out["local_acc_std"], out["local_acc_worst10"] = spread if spread is not None else (None, None)
        val = [c for c in ids if c in self.val and c not in self.empty_val]
        if self.val:  # the same clients' own models on their own validation splits
            out["local_val_acc"] = measured_mean([self.val[c] for c in val])
        if per_client:
            out["local_accs"] = {str(c): self.acc[c] for c in ids}
            out["local_losses"] = {str(c): self.loss[c] for c in ids}
            if self.val:
                out["local_val_accs"] = {str(c): self.val[c] for c in val}
        return out

    def state_dict(self) -> dict[str, Any]:
        out = {"acc": {str(k): v for k, v in self.acc.items()}, "loss": {str(k): v for k, v in self.loss.items()}}
        if self.val:
            out["val"] = {str(k): v for k, v in self.val.items()}
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.acc = {int(k): float(v) for k, v in state["acc"].items()}
        self.loss = {int(k): float(v) for k, v in state["loss"].items()}
        self.val = {int(k): float(v) for k, v in state.get("val", {}).items()}


SharedRows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""(clients, union, positions, starts, sizes): the clients scored in one pass, ascending; the sorted test rows of their splits;
for each client in turn, each of its rows' place in ``union`` (flat, in the order of its split); where each client's run
of ``positions`` starts; each client's number of rows."""


def shared_rows(data: FederatedData, empty: frozenset[int]) -> SharedRows | None:
    """The clients whose own split is clean rows of the test set (not empty, no feature noise of their own), and the
    union of those rows (:meth:`Evaluation.client_accuracies`); None: no such client."""
    noise = data.noise
    clients = [c for c in range(data.num_clients) if c not in empty and (noise is None or noise[c] == 0)]
    if not clients:
        return None
    splits = [np.asarray(data.eval_indices[c], dtype=np.int64) for c in clients]
    sizes = np.fromiter((len(s) for s in splits), dtype=np.int64, count=len(splits))
    flat = np.concatenate(splits)
    union = np.sort(flat)
    union = union[np.concatenate(([True], union[1:] != union[:-1]))]  # a sort, not np.unique's hash (numpy 2.4: 15x slower)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    return np.asarray(clients, dtype=np.int64), union, np.searchsorted(union, flat), starts, sizes


class Evaluation:
    """Global-model evaluation on the global test set (and on every client's split for ``eval.clients = "all"``)."""

    def __init__(self, config: RunConfig, data: FederatedData, model: nn.Module, device: torch.device) -> None:
        self.config = config
        self.data = data
        self.model = model
        self.device = device
        x, y = data.test()
        self.x_test, self.y_test = x.to(device), y.to(device)
        held_out = data.validation()
        self.validation = None if held_out is None else (held_out[0].to(device), held_out[1].to(device))
        self.empty_eval = empty_splits(data.eval_sizes())
        """Clients whose own evaluation split is empty (left out of ``local_acc`` and ``global_client_acc``)."""
        self.empty_val = empty_splits(data.validation_sizes())
        """Clients whose own validation split is empty (left out of ``local_val_acc``)."""
        self._shared: SharedRows | None = None
        self._shared_built = False  # built on first use: only eval.clients = "all" reads it

    def due(self, t: int) -> bool:
        """Whether round ``t`` (1-based) evaluates the global model."""
        return self.config.eval.due(t, self.config.federation.rounds)

    def last(self, t: int) -> bool:
        """Whether round ``t`` (1-based) is the run's last: its global evaluation is the run's final one, even when the round is skipped."""
        return t == self.config.federation.rounds

    def client_data(self, cid: int) -> ClientData:
        """Client ``cid``'s training data and, when local accuracy is measured, its own split, on the device."""
        x, y = self.data.client_train(cid)
        stamp = self.data.client_stamp(cid)  # a data-poisoning attack's marked rows, restamped after augmentation
        data = ClientData(x.to(self.device), y.to(self.device), stamp=None if stamp is None else stamp.to(self.device))
        if self.config.eval.clients != "none":
            xe, ye = self.data.client_eval(cid)
            data.x_eval, data.y_eval = xe.to(self.device), ye.to(self.device)
            own = self.data.client_validation(cid)
            if own is not None:
                data.x_val, data.y_val = own[0].to(self.device), own[1].to(self.device)
        return data

    def metrics(self, state: Mapping[str, torch.Tensor], observe: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> dict[str, Json]:
        """``global_acc``/``global_loss``, calibration ``global_ece``/``global_nll``/``global_brier`` (and ``global_client_acc``) of ``state``.

        ``observe(logits, labels)`` also sees every test batch: a protocol's own test-set measure rides on this pass."""
        bs = self.config.eval.batch_size
        calibration = CalibrationAccumulator(self.config.eval.ece_bins)

        def both(logits: torch.Tensor, labels: torch.Tensor) -> None:
            calibration(logits, labels)
            if observe is not None:
                observe(logits, labels)

        acc, loss = evaluate(self.model, state, self.x_test, self.y_test, bs, observe=both)
        out: dict[str, Json] = {"global_acc": acc, "global_loss": loss}
        out.update({f"global_{k}": v for k, v in calibration.result().items()})
        if self.validation is not None:  # the server's held-out split (eval.validation): what tuning reads
            out["val_acc"], out["val_loss"] = evaluate(self.model, state, *self.validation, bs)
        if self.config.eval.clients == "all":
            out["global_client_acc"] = measured_mean(self.client_accuracies(state))
        return out

    def client_accuracies(self, state: Mapping[str, torch.Tensor]) -> list[float]:
        """The global model's accuracy on each client's own split, in client order (empty splits left out: they measure
        nothing; a NaN of the others is the model's, and shows).

        Why not :func:`evaluate` per client: with one model for all, that is a forward pass and a host sync per registered
        client (20,000 clients: ~30 s a round). Clients whose split is clean test rows are scored in one pass over the
        union of their rows (:func:`row_outcomes`, ``eval.batch_size`` rows a forward) and counted per client, as
        :func:`evaluate` counts: the same accuracies, except where a row's two top logits are within the last bits that
        another batch composition can move (a CPU GEMM's blocking depends on the batch): a near tie can then flip, as it
        could between two batch sizes before. Deterministic either way (the batches depend only on the splits). A client whose split carries its own feature
        noise, and every client of a model that draws in its eval forward, is scored by :func:`evaluate`, as before.
        """
        shared = self._shared_rows()
        if shared is None:
            scored: dict[int, float] = {}
        else:
            clients, union, positions, starts, sizes = shared
            correct, finite = row_outcomes(self.model, state, self.data.dataset.x_test, self.data.dataset.y_test,
                                           torch.from_numpy(union), self.device, self.config.eval.batch_size)
            right = np.add.reduceat(correct.cpu().numpy()[positions].astype(np.int64), starts)
            broken = np.add.reduceat((~finite).cpu().numpy()[positions].astype(np.int64), starts)
            # int / int, as evaluate divides: the same float
            scored = {c: (float("nan") if bad else int(r) / int(n)) for c, r, bad, n in zip(clients.tolist(), right, broken, sizes.tolist())}
        out = []
        bs = self.config.eval.batch_size
        for c in range(self.data.num_clients):
            if c in self.empty_eval:
                continue
            if c in scored:
                out.append(scored[c])
                continue
            xe, ye = self.data.client_eval(c)
            out.append(evaluate(self.model, state, xe.to(self.device), ye.to(self.device), bs)[0])
        return out

    def _shared_rows(self) -> SharedRows | None:
        """The clients scored in one pass and their rows (built once: the splits do not change); None: none is."""
        if not self._shared_built:
            self._shared = None if model_draws(self.model, training=False) else shared_rows(self.data, self.empty_eval)
            self._shared_built = True
        return self._shared


def local_evaluation(model: nn.Module, state: Mapping[str, torch.Tensor], data: ClientData, batch_size: int) -> tuple[float | None, float | None]:
    """(accuracy, loss) of a client's own model on its own split; (None, None) when not measured."""
    if data.x_eval is None or data.y_eval is None:
        return None, None
    return evaluate(model, state, data.x_eval, data.y_eval, batch_size)


def local_validation(model: nn.Module, state: Mapping[str, torch.Tensor], data: ClientData, batch_size: int) -> float | None:
    """Accuracy of a client's own model on its own validation split (``local_val_acc``); None when not measured.

    An empty split (a client none of whose own rows fell into the validation split) scores NaN, which
    :func:`mean_or_none` leaves out of the mean."""
    if data.x_val is None or data.y_val is None:
        return None
    if len(data.y_val) == 0:
        return math.nan
    return evaluate(model, state, data.x_val, data.y_val, batch_size)[0]


def policy_accuracy(acc: float | None, val_acc: float | None) -> float | None:
    """The accuracy a temperature policy's client half reads after training (FedChill's stagnation test).

    The client's own validation split when the run has them (``eval.validation`` > 0), else its evaluation split.
    Why: the evaluation split is drawn from the test rows the run's accuracy is reported on, so a decay read from it
    would steer training by test data. An empty validation split (NaN) measures nothing: None, and the state is kept.
    """
    if val_acc is None:
        return acc
    return None if math.isnan(val_acc) else val_acc


def local_validation_job(client_id: int, model: nn.Module, state: Mapping[str, torch.Tensor], data: ClientData, batch_size: int) -> PredictJob | float | None:
    """:func:`local_validation` as a job a client update yields (executors batch it).

    None: not measured; NaN: an empty split (left out of the mean, as :func:`local_validation` scores it)."""
    if data.x_val is None or data.y_val is None:
        return None
    if len(data.y_val) == 0:
        return math.nan
    return PredictJob(client_id, model, state, data.x_val, "evaluate", data.y_val, batch_size)


def local_evaluation_job(client_id: int, model: nn.Module, state: Mapping[str, torch.Tensor], data: ClientData, batch_size: int) -> PredictJob | None:
    """:func:`local_evaluation` as a job a client update yields (executors batch it); None when not measured."""
    if data.x_eval is None or data.y_eval is None:
        return None
    return PredictJob(client_id, model, state, data.x_eval, "evaluate", data.y_eval, batch_size)


def server_step_hint(after_round: int, options: str) -> str:
    """The hint of a non-finite client loss once the server's step is known to have blown the global model up.

    Why: a server step (an adaptive server optimiser's ``server_lr = 1e30``) can leave the weights huge but finite, which
    no state check stops; the next round's clients then see a NaN loss, and "lower client.lr" alone sent the user to the
    wrong option. Given only where it can be the cause (:class:`~chillfl.protocols.book.ServerBook` sees the clients'
    own models finite and the global one not), so a client lr too high (every client's model blown up too) is not blamed
    on a server step plain averaging does not take. ``options``: what to lower, as the run's method has it."""
    return (f"lower client.lr? Or: after round {after_round} every client's own model had a finite loss but the global model's "
            f"test loss was not finite, so the server's step blew the model up: lower {options}")


def check_finite_loss(round: int, client_id: int, name: str, value: float | None, server_step: str | None = None) -> None:
    """Stop the run at the first non-finite training loss (``client.lr`` too high, usually).

    ``server_step``: the whole hint when an earlier round's server step blew the model up (:func:`server_step_hint`);
    None: the server's step cannot be the cause, so the hint is :data:`~chillfl.errors.LOSS_HINT` (the lr, or the options
    that scale the loss)."""
    if value is not None and not math.isfinite(value):
        raise Diverged(round + 1, f"{name} is {value} ({server_step or LOSS_HINT})", client_id)


def check_aggregated(before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor], aggregator: object) -> None:
    """The aggregator's new global model has the old one's entries, shapes and dtypes; else one ConfigError on ``algorithm.name``.

    Why: a rule that drops, adds or reshapes an entry (a plugin's slip) would otherwise train on, and save as
    ``model.safetensors``, a model that no longer loads into the architecture, with no error at all.
    """
    rule = f"{type(aggregator).__name__}.aggregate()"
    if not isinstance(after, Mapping):
        raise ConfigError("algorithm.name", f"{rule} returned {type(after).__name__}, not the global model: return a dict of every entry of global_params")
    wrong = next((k for k, v in after.items() if not isinstance(v, torch.Tensor)), None)
    if wrong is not None:
        raise ConfigError("algorithm.name", f"{rule} returned {wrong!r} as {type(after[wrong]).__name__}, not a tensor")
    if after.keys() == before.keys() and all(after[k].shape == v.shape and after[k].dtype == v.dtype for k, v in before.items()):
        return
    missing, extra = [k for k in before if k not in after], [k for k in after if k not in before]
    if missing or extra:
        said = "; ".join(part for part in (f"lacks {', '.join(map(repr, missing[:3]))}" if missing else "", f"adds {', '.join(map(repr, extra[:3]))}" if extra else "") if part)
        raise ConfigError("algorithm.name", f"{rule} returned a global model whose entries differ from the model's: it {said}; return every entry of global_params")
    key = next(k for k, v in before.items() if after[k].shape != v.shape or after[k].dtype != v.dtype)
    got, want = after[key], before[key]
    raise ConfigError("algorithm.name", f"{rule} returned {key!r} as {tuple(got.shape)} {got.dtype}, the model's is {tuple(want.shape)} {want.dtype}")


def check_client_state(state: Mapping[Any, object], what: str, field: str) -> None:
    """A client state maps names to tensors; else one ConfigError on ``field`` naming ``what`` returned it.

    Why: the server's store, checkpoints and a Flower node keep only named tensors, so a plugin's number or list in its
    client state was an AttributeError traceback (``'int' object has no attribute 'detach'``) naming nothing of the plugin.
    """
    for key, value in state.items():
        if not isinstance(key, str):
            raise ConfigError(field, f"{what} returned a client state with the key {key!r}: a ClientState maps str names to tensors")
        if not isinstance(value, torch.Tensor):
            raise ConfigError(field, f"{what} returned a client state whose {key!r} is {type(value).__name__}, not a tensor: "
                                     "a ClientState maps names to tensors (torch.tensor(x) for a number)")


def check_pair(value: Any, what: str, names: str, field: str) -> tuple[Any, Any]:
    """A client half's ``prepare``/``finish`` result: a pair of mappings; else one ConfigError on ``field`` naming ``what``.

    Why: a plugin's ``finish`` that returned only its state (or None) was a ``ValueError: not enough values to unpack``
    traceback from the protocol, naming nothing of the plugin.
    """
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, Mapping) for v in value):
        return value[0], value[1]
    got = f"a {len(value)}-tuple of {', '.join(type(v).__name__ for v in value)}" if isinstance(value, tuple) else type(value).__name__
    raise ConfigError(field, f"{what} returned {got}, not the pair {names} (two dicts)")


def check_report(report: Mapping[Any, object], what: str, field: str, noun: str = "report") -> None:
    """A client's report (or a downlink's context) maps str names to wire values (a number, a tensor, a dict of
    tensors); else one ConfigError on ``field``.

    Why: a value the wire cannot carry (a str, a numpy array) passed silently under chillfl's runtime and failed only
    where it is sent (a Flower node), or reached the plugin's own ``aggregate`` or term as something it did not send.
    """
    for key, value in report.items():
        if not isinstance(key, str):
            raise ConfigError(field, f"{what} returned a {noun} with the key {key!r}: it maps str names to values")
        ok = (isinstance(value, (int, float, torch.Tensor)) and not isinstance(value, bool)) or (
            isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()))
        if not ok:
            raise ConfigError(field, f"{what} returned a {noun} whose {key!r} is {type(value).__name__}: a {noun} value is a number, "
                                     "a tensor or a dict of str to tensors")


def check_round_metrics(metrics: object, owner: object, field: str) -> Mapping[str, Json]:
    """A method's ``round_metrics()``: str names to JSON values (numbers, str, bools, None, lists and dicts of them); else one
    ConfigError on ``field``. Why: a tensor was a ``not JSON serializable`` traceback after the round, leaving a run folder
    that could not resume; a float a ``'float' object has no attribute 'items'``."""
    what = f"{type(owner).__name__}.round_metrics()"
    if not isinstance(metrics, Mapping):
        raise ConfigError(field, f"{what} returned {type(metrics).__name__}: it returns a dict of str names to numbers (or str, bools, lists of them)")
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise ConfigError(field, f"{what} returned the key {key!r}: its keys are str names")
        if not _is_json(value):
            hint = " (float(t) or t.tolist() makes it one)" if isinstance(value, torch.Tensor) else ""
            raise ConfigError(field, f"{what} returned {key!r} as {type(value).__name__}: a metric is a number, str, bool, None, or a list or dict of them{hint}")
    return metrics


def _is_json(value: object) -> bool:
    """Whether ``metrics.jsonl`` can hold ``value`` as it is."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    return isinstance(value, Mapping) and all((k is None or isinstance(k, (str, int, float))) and _is_json(v) for k, v in value.items())  # JSON's own key rule


def check_downlink(down: object, aggregator: object) -> Downlink:
    """The aggregator's :class:`Downlink` for one client, its context of wire values; else one ConfigError on ``algorithm.name``.

    Why: a plain dict was an AttributeError traceback (``'dict' object has no attribute 'params'``) naming nothing of the plugin.
    """
    what = f"{type(aggregator).__name__}.downlink()"
    if not isinstance(down, Downlink):
        raise ConfigError("algorithm.name", f"{what} returned a {type(down).__name__}, not a chillfl.extend.Downlink (Downlink(context={{...}}))")
    check_report(down.context, what, "algorithm.name", "context")
    return down


def check_finite_state(round: int, state: Mapping[str, torch.Tensor], what: str = "global model") -> None:
    """Stop the run when a model turns non-finite; names the first parameter that did."""
    flags = torch.stack([torch.isfinite(v).all() for v in state.values() if v.is_floating_point()])
    if not bool(flags.all()):  # one host sync per round
        bad = next(k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all()))
        raise Diverged(round + 1, f"{what} parameter {bad!r} is not finite")


def rows_all_finite(blocks: Iterable[torch.Tensor]) -> bool:
    """Whether every floating block of rows the round's clients uploaded is finite, or may not be: one reduction over all
    of them and one host sync (:func:`~chillfl.aggregation.uploads.finite_sums`, as the model uploads are checked).

    Why: :func:`check_finite_rows` synced once a client (more for prototypes: the held classes' rows), which a GPU round
    of many clients waits on. False: look client by client with :func:`check_finite_rows`, which names the first bad one
    as before (a finite block whose sum overflows, a false alarm, passes there)."""
    return finite_sums(b for b in blocks if b.is_floating_point() and b.numel())


def check_finite_rows(round: int, client_id: int, rows: torch.Tensor, what: str = "soft-labels", classes: Sequence[int] | None = None) -> None:
    """Stop the run when a client's uploaded rows (``what``: soft-labels, class prototypes) are not finite, naming the
    round, the client and the row (``classes``: the class each row is of, named instead of its place). One host sync a
    call: a server asks :func:`rows_all_finite` of the round's rows first, and this only where that says "may not be".

    Why: the server averaged them into the consensus every client distils from, so a clustering method's k-means crashed
    ("Probabilities contain NaN") and a consensus method blamed an honest client's distillation loss a round later."""
    if not rows.is_floating_point() or bool(torch.isfinite(rows).all()):
        return
    row = int(torch.nonzero(~torch.isfinite(rows).reshape(rows.shape[0], -1).all(dim=1)).flatten()[0]) if rows.dim() else 0
    where = f"class {classes[row]}" if classes is not None else f"row {row} of {rows.shape[0]}"
    raise Diverged(round + 1, f"its uploaded {what} are not finite ({where}; {UPLOAD_CAUSE})", client_id)
