"""A chillfl config as a Flower ``ServerApp`` and ``ClientApp`` (Message API, flwr 1.42).

The server side is chillfl's own: the ``ServerApp`` builds the experiment and
its protocol and runs chillfl's one round loop (:func:`~chillfl.engine.loop.run_rounds`)
with :class:`FlowerExecutor` as the executor, so sampling, temperature
policies (FLex&Chill, FedChill), PA3Fed's selection, SCAFFOLD's control
variates, FedProx's term and every metric are computed exactly as under
chillfl's runtime. Each round's client tasks travel to the SuperNodes as
Flower messages (:mod:`chillfl.flower.wire`), without the client's data: a
``ClientApp`` builds its clients' data itself from the same config and seed
(the same partition), runs the client update (the protocol's client side,
the same code every executor runs) and sends back the typed reply.

Which client runs where: a SuperNode's ``node_config`` says
``partition-id`` and ``num-partitions`` (Flower's simulation engine sets
them; a deployed SuperNode is started with ``--node-config``); chillfl
client ``c`` runs on the node whose ``partition-id == c % num-partitions``,
every round. Each round sends ONE message per node with the tasks of all
its sampled clients, so a node never runs two messages at once and its
``Context.state`` (where a client's state lives, :mod:`chillfl.flower.state`)
is updated by one ClientApp call at a time.

Per-client state lives on the node that serves the client, in its
``Context.state``, and the server keeps none of it. A protocol's client update
returns the client's next state in its reply, whatever the method (the
soft-label protocol's model, SCARLET cache and selector mask; SCAFFOLD's c_i,
FedBN's BN entries, MOON's previous model, PA3Fed's score, which the methods'
client halves keep); the node stores it (:mod:`chillfl.flower.state`) and the
server keeps only which node holds it (:class:`NodeStore`). The same method
code runs here as under chillfl's runtime: nothing in this package knows a
method. With ``checkpoint.client_models`` the nodes send the states to the
server once, after the last round (``query.states``), and the server writes
each client's model as chillfl's runtime does (:func:`fetch_client_states`).

FedChill's temperature state (T, accuracy history, stagnation counter) is
part of that client state: the temperature policy's client half keeps it
there under every runtime, and computes the client's start temperature from
its own labels. What would need every client's label counts on the server
(FedChill's ``minmax`` normalisation or ``size`` measure) and an algorithm
that declares ``on_flower`` (VRL-SGD: its Delta_i update needs the round's new
average, which exists only on the server), or wraps one that does, are refused
by :func:`check_supported`.

Where the config comes from: the factories take a :class:`RunConfig`; the
module-level ``server`` / ``client`` apps (for ``flwr run``) read the run
config keys ``config`` (a TOML path or a bundled experiment name) and
``overrides`` (space-separated ``key=value``), as ``chillfl run`` does.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import logging
import numbers
import os
import re
import shlex
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch

from chillfl.aggregation.base import half_parts, measured_after_average
from chillfl.aggregation.registry import AFTER_AVERAGE, declared_parts, half_field
from chillfl.config import RunConfig, load_config, parse_overrides
from chillfl.settings.distillation import DistillationOptions
from chillfl.executors.sequential import SequentialExecutor
from chillfl.engine.health import LossWatch
from chillfl.engine.loop import run_rounds
from chillfl.executors.processes import ClientCodeError, WorkerError, out_of_memory
from chillfl.engine.protocol import ClientReply, ClientTask, KeepsClientStates, capability
from chillfl.storage.results import ResultWriter, remove_tree
from chillfl.errors import ConfigError, failure_line, framed, loss_hint
from chillfl.experiment import build_experiment, build_protocol, run_notes, say_notes
from chillfl.flower.state import client_states_record, load_client_state, save_client_state
from chillfl.flower.wire import ClientFailure, Refusal, StatesRequest, decode, encode
from chillfl.models.registry import caller_dtype, float32_default
from chillfl.once import once_per_call, said_once
from chillfl.plugins import is_custom
from chillfl.protocols.book import run_suspects
from chillfl.protocols.registry import protocol_of
from chillfl.resolve import resolved
from chillfl.runner import RunInterrupted, check_sinks, close_run_sinks, device_settings, run_sinks, finish_run, write_folder_start
from chillfl.errors import Diverged, StorageError
from chillfl.paths import shell_path
from chillfl.stderr import say
from chillfl.sweeps.plan import repeats
from chillfl.stop_signals import Repeats, made_held, stop_signals
from chillfl.temperature import policy_capabilities

EXTRA = "pip install 'chillfl[flower]'"
RUNTIME = "run it with chillfl's own runtime (chillfl run; executor = \"ray\" for a cluster)"
NODE_TIMEOUT_S = 300.0
"""How long the ServerApp waits for its SuperNodes to connect, and for a round's replies."""
PULL_INTERVAL_S = 0.1
"""How often the ServerApp asks the grid for replies while it also watches for a stop (:meth:`FlowerExecutor._send_and_receive`)."""
NOT_CHECKPOINTED = "a Flower run is not checkpointed: nothing to resume, its partial result folder was removed"


class SimulationStop:
    """What :func:`run_simulation`'s stop signals asked of the ServerApp's thread, and whether the simulation has ended.

    ``received``: the first SIGINT/SIGTERM/SIGHUP (the round loop stops after its round); ``at_once``: a second one (the
    round in flight is abandoned); ``ended``: Flower's simulation returned, so no reply can come any more. The handlers
    run in the main thread; the ServerApp runs in a thread of Flower's and polls these between its waits. The same signal
    again within :data:`~chillfl.stop_signals.REPEAT_WINDOW_S` is the one signal delivered twice (GNU ``timeout`` signals
    the process, then its group: :class:`~chillfl.stop_signals.Repeats`), not a second one.
    """

    def __init__(self, repeats: Repeats | None = None, rounds: int | None = None) -> None:
        self.repeats = repeats or Repeats()
        self.received: int | None = None
        self.at_once = threading.Event()
        self.ended = threading.Event()
        self.done = 0
        """The last round the ServerApp completed."""
        self.rounds = rounds
        """The run's rounds (None: not known): whether the first signal's line says the run is cut short or finishes."""
        self._lock = threading.RLock()  # the first signal's line and the loop's stop read ``received`` and ``done`` alike
        # (the ServerApp's thread holds it briefly); re-entrant so that the handler, which runs in the main thread, can never
        # wait on a hold of that thread's own. No nested handler takes it: only the first signal's does (``_first``).
        self._first = threading.Lock()  # taken, never given back, by the first signal's handler
        self._second = threading.Lock()  # by the second's, which alone sets ``at_once``

    def handle(self, signum: int, frame: Any) -> None:
        """A stop signal: the first asks the round loop to stop after its round, the second (any signal, also one whose
        handler runs nested in the first's) to stop at once, and the others do nothing more.

        Why tokens taken without blocking: a handler runs in the main thread between any two bytecodes, also inside
        itself. Reading ``received is None`` and then assigning it let a second signal whose handler ran nested in
        between read None too and count as the first: two "stopping after this round" lines, no ``at_once``, and a third
        signal needed. One acquire is one step, so whichever handler takes ``_first`` is the first and every other a
        later one. Only the one that takes ``_second`` calls ``at_once.set()``, which takes a plain lock of the Event's
        that a third signal's handler, nested in it, would wait on forever."""
        if not self.repeats.counts(signum):
            return
        if self._first.acquire(blocking=False):
            with self._lock:
                self.received = signum
                done = self.done
            say(f"chillfl: {signal.Signals(signum).name}: {self.outcome(done)}")
        elif self._second.acquire(blocking=False):
            self.at_once.set()

    def outcome(self, done: int) -> str:
        """What the first signal does to a run that had completed ``done`` rounds: the loop stops after the round under way
        unless it is the last (:meth:`round_done`). Why: a signal after the last round said the partial result folder was
        removed, while the run finished and kept its folder, whole; the user would rerun a finished run."""
        if self.rounds is None or done + 1 < self.rounds:
            return f"stopping the Flower run after this round (a second one stops at once); {NOT_CHECKPOINTED}"
        if done < self.rounds:
            return ("the Flower run is in its last round: it finishes and keeps its result folder, then the signal is passed on "
                    "(a second one stops it at once, and a Flower run is not checkpointed: its partial result folder is then removed)")
        return "the Flower run's rounds were all done: it finishes and keeps its result folder, then the signal is passed on"

    def round_done(self, done: int, rounds: int) -> int | None:
        """``done`` rounds completed: the signal to stop the run with here (one came and rounds remain), else None; under
        the lock :meth:`handle` reads ``done`` under, so that its line says what the loop does."""
        with self._lock:
            self.done = done
            return self.received if done < rounds else None

    def check(self) -> None:
        """Raise where the ServerApp must stop waiting now: a second signal, or a simulation that has ended."""
        if self.at_once.is_set() and self.received is not None:
            raise FlowerRunInterrupted(self.received, self.done, at_once=True)
        if self.ended.is_set():
            raise WorkerError("Flower's simulation ended while the ServerApp waited for its SuperNodes")

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """The stop signals routed to :meth:`handle` (main thread only), given back after."""
        previous = {sig: signal.signal(sig, self.handle) for sig in stop_signals()}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class FlowerRunInterrupted(RunInterrupted):
    """A stop signal ended a Flower simulation: :class:`~chillfl.runner.RunInterrupted` with no folder (nothing to resume)."""

    def __init__(self, signum: int, round: int, at_once: bool = False) -> None:
        super().__init__(signum, None, round, at_once)
        self.checkpoint = None
        self.args = (f"{self.args[0]}; {NOT_CHECKPOINTED}",)


def import_flwr() -> Any:
    """The ``flwr`` package, or a ConfigError naming the extra."""
    try:
        import flwr
    except ImportError:
        raise ConfigError("flower", f"chillfl.flower needs Flower, which is not installed here: {EXTRA}") from None
    return flwr


_FLOWER_REASON = re.compile(r"<class '(?P<kind>[^']*)'>:<'(?P<text>.*)'>", re.DOTALL)
"""How Flower writes a node's exception as an error reply's reason: ``str(type(ex)) + ":<'" + str(ex) + "'>"``."""


def error_line(reason: str) -> str:
    """A node's error reply's ``reason`` as the run's error says it: the exception's ``Type: message`` line, by the rule
    the Ray executor says an actor's by (:func:`~chillfl.errors.failure_line`).

    Why: under Flower's simulation the reason is a Ray task error, whose text is the node's whole traceback (tens of
    lines in the one line chillfl's CLI gives a failed worker); Flower logs that traceback where the node runs. A
    one-line reason (a deployed SuperNode's ``<class 'RuntimeError'>:<'boom'>``) reads ``RuntimeError: boom``."""
    found = _FLOWER_REASON.fullmatch(str(reason).strip())
    if found is None:
        return failure_line(reason)
    text = found["text"].strip()
    own = _unwrapped(text)
    if own is not None:  # a traceback: its exception's line names the exception itself
        return failure_line(own)
    return failure_line(text, kind=found["kind"].rsplit(".", 1)[-1])


_WRAPPER = "ClientAppException"
"""The exception Flower's simulation raises for any ClientApp exception, ``ClientAppException(str(ex)) from ex``: its
line (``Exception ClientAppException occurred. Message: boom``) drops the node's exception type."""


def _unwrapped(text: str) -> str | None:
    """The node's own traceback in ``text`` (a reason's), None where ``text`` holds no traceback (a message of several
    lines: a deployed SuperNode's). Where Flower's wrapper follows the node's exception, the text up to the chaining
    line that leads to the wrapper's ``flwr...ClientAppException`` line: the LAST such line, since a node's exception
    raised ``from`` another has one of its own, ahead of it."""
    lines = text.splitlines()
    has_frames = framed(lines)  # an exception group's frames are boxed (``  |   File``): it is a traceback too
    wrapper = max((i for i, line in enumerate(lines) if line.split(":", 1)[0].endswith(f".{_WRAPPER}")), default=None)
    if wrapper is None:
        return text if has_frames else None
    chained = [i for i in range(wrapper) if lines[i].startswith("The above exception was the direct cause")]
    own = lines[: chained[-1] if chained else wrapper]
    if framed(own):
        return "\n".join(own)
    said = [line for line in own if line.strip()]  # no frame of its own (Ray left out its internal ones): its last line
    return said[-1] if said else text


def config_from_run_config(run_config: Any) -> RunConfig:
    """``config`` (path or bundled name) and ``overrides`` from a Flower run config -> a RunConfig."""
    from chillfl.experiments import resolve_config

    name = str(run_config.get("config", "")) if run_config else ""
    if not name:
        raise ConfigError("flower.config", "the Flower run config must name a chillfl config: config = \"flexchill/table4-digits\" (or a TOML path)")
    overrides = parse_overrides(shlex.split(str(run_config.get("overrides", ""))))
    return load_config(resolve_config(name), overrides)


def check_supported(config: RunConfig) -> None:
    """What chillfl.flower carries: parameter sharing (any aggregator and temperature policy) and soft-label sharing."""
    if config.variants:
        raise ConfigError("variants", "a Flower run runs one experiment: pick one variant's config")
    if repeats(config):  # chillfl run runs it as a comparison; a Flower run ran the config once at its seed, with no word
        raise ConfigError(comparison_field(config), "a Flower run runs one experiment, and [compare] / [tune] make this config a comparison's "
                                                    f"(chillfl run runs it as one): remove them to run it once at seed = {config.seed}")
    kind = protocol_of(config)
    if kind.on_flower is not None:
        raise ConfigError(kind.method_table or "algorithm", f"{kind.on_flower}; {RUNTIME}")
    if kind.method_capabilities is not None:  # the soft-label or prototype method, by what it declares
        why = kind.method_capabilities(config).on_flower
        if why is not None:
            raise ConfigError(f"{kind.method_table}.method", f"{why}; {RUNTIME}")
    if kind.uses_aggregator:  # the algorithm and every one it wraps, by what each declares under its options (``on_flower``)
        for part in declared_parts(config.algorithm):
            if part.declared.on_flower is not None:  # named by the option that set it (limited_by), else the part's name
                raise ConfigError(part.limit_field(), f"{part.declared.on_flower}; {RUNTIME}")
    check_node_computable(config)


def comparison_field(config: RunConfig) -> str:
    """The field that makes a config without variants a comparison's (:func:`~chillfl.sweeps.plan.repeats`): ``compare.seeds``
    before another ``[compare]`` option, else ``tune``."""
    if config.compare:
        return "compare." + ("seeds" if "seeds" in config.compare else next(iter(config.compare)))
    return "tune"


def check_node_computable(config: RunConfig) -> None:
    """A one-line ConfigError when the temperature policy declares, for its options, that it cannot run on Flower
    (a server that reads every client's label counts, which stay on the nodes)."""
    caps = policy_capabilities(config.temperature)
    if caps.on_flower is not None:
        field_name = "temperature." + (caps.limited_by or "policy")
        raise ConfigError(field_name, f"{caps.on_flower}; {RUNTIME}")


class FlowerExecutor:
    """An executor whose workers are SuperNodes: ``map(tasks)`` sends each node its clients' tasks (no data) and waits for every reply."""

    def __init__(self, grid: Any, min_nodes: int = 1, timeout: float = NODE_TIMEOUT_S, stop: SimulationStop | None = None) -> None:
        self.grid = grid
        self.timeout = timeout
        self.stop = stop
        self.partitions = self._discover(min_nodes)

    def _send_and_receive(self, messages: list[Any]) -> list[Any]:
        """``grid.send_and_receive(messages, timeout)``, which also ends when :attr:`stop` says so (a second signal, or
        the simulation ended): without it the ServerApp's thread waited out the whole timeout after Flower had stopped."""
        if self.stop is None:
            return list(self.grid.send_and_receive(messages, timeout=self.timeout))
        waiting = set(self.grid.push_messages(messages))
        deadline = time.monotonic() + self.timeout
        replies: list[Any] = []
        while waiting and time.monotonic() < deadline:
            self.stop.check()
            got = list(self.grid.pull_messages(waiting))
            replies.extend(got)
            waiting.difference_update(m.metadata.reply_to_message_id for m in got)
            if waiting:
                time.sleep(PULL_INTERVAL_S)
        return replies

    def _discover(self, min_nodes: int) -> dict[int, int]:
        """partition-id -> node id, asked of every connected node (waits for ``min_nodes``)."""
        from flwr.app import ConfigRecord, Message, RecordDict

        deadline = time.monotonic() + self.timeout
        nodes = list(self.grid.get_node_ids())
        while len(nodes) < min_nodes:
            if self.stop is not None:
                self.stop.check()
            if time.monotonic() > deadline:
                raise WorkerError(f"only {len(nodes)} of {min_nodes} Flower SuperNode(s) connected within {self.timeout:g} s")
            time.sleep(0.5)
            nodes = list(self.grid.get_node_ids())
        asks = [Message(content=RecordDict({"q": ConfigRecord({})}), dst_node_id=n, message_type="query.chillfl") for n in nodes]
        parts: dict[int, int] = {}
        sizes = set()
        for reply in self._send_and_receive(asks):
            if reply.has_error():
                raise WorkerError(f"SuperNode {reply.metadata.src_node_id} did not answer chillfl's query: {error_line(reply.error.reason)}")
            info = reply.content.config_records["node"]
            parts[int(info["partition-id"])] = reply.metadata.src_node_id
            sizes.add(int(info["num-partitions"]))
        if len(sizes) != 1 or sorted(parts) != list(range(sizes.pop())):
            raise WorkerError(f"the SuperNodes' partition-ids {sorted(parts)} are not 0 .. num-partitions - 1")
        return parts

    def node_of(self, client_id: int) -> int:
        return self.partitions[client_id % len(self.partitions)]

    def map(self, tasks: Sequence[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
        """One message per node with its clients' tasks (no data, no state); replies in task order.

        A reply whose client keeps state on its node comes back with an
        :class:`OnNode` marker as its state (the state itself never leaves the node).
        """
        from flwr.app import Message

        by_node: dict[int, list[ClientTask[Any, Any]]] = {}
        for task in tasks:
            light = dataclasses.replace(task, data=None, state=None)  # type: ignore[arg-type]  # the data stay on the client; its state too
            by_node.setdefault(self.node_of(task.client_id), []).append(light)
        rnd = tasks[0].round if tasks else 0
        messages = [Message(content=encode(batch), dst_node_id=node, message_type="train", group_id=str(rnd)) for node, batch in by_node.items()]
        replies: dict[int, ClientReply[Any, Any]] = {}
        partition = {node: part for part, node in self.partitions.items()}
        failed: list[tuple[int, ConfigError | ClientCodeError | str]] = []  # (partition-id, what): every reply read before one is raised
        for msg in self._send_and_receive(messages):
            node = msg.metadata.src_node_id
            if msg.has_error():  # the node itself failed (lost, its ClientApp crashed): a lost worker's
                failed.append((partition.get(node, -1), f"SuperNode {node} failed a client update: {error_line(msg.error.reason)}; the round was not aggregated"))
                continue
            answer = decode(msg.content)
            if isinstance(answer.get("refused"), Refusal):  # the node's ConfigError (ClientApp's train): raised here as it is
                failed.append((partition.get(node, -1), answer["refused"].error()))
                continue
            failure = answer.get("failed")
            if isinstance(failure, ClientFailure):  # the client's own code raised on the node: the run's failure
                client = f"client {failure.client_id}" if failure.client_id is not None else \
                    f"clients {', '.join(str(t.client_id) for t in by_node.get(node, []))}"  # a node of an older chillfl names none
                if failure.out_of_memory:  # the node's limit: a lost worker's, as a process worker's out of memory
                    failed.append((partition.get(node, -1), f"SuperNode {node} ran out of memory in {client}'s update ({failure.error}); the round was not "
                                                            "aggregated: free memory on that node or give it fewer clients, unless one client alone needs more than it has"))
                    continue
                failed.append((partition.get(node, -1), ClientCodeError(f"SuperNode {node} ({client}): a client update failed: {failure.error}", ran_in="a Flower SuperNode")))
                continue
            held = set(answer["held"])
            for reply in answer["replies"]:
                replies[reply.client_id] = dataclasses.replace(reply, state=OnNode(node) if reply.client_id in held else None)
        if failed:  # the lowest partition's, as the Ray executor raises its lowest worker's: one line naming the field for bad input
            lost = [f for f in failed if isinstance(f[1], str)]  # a lost node makes the round a lost worker's, as a dead Ray actor does
            first = min(lost or failed, key=lambda f: f[0])[1]
            raise first if isinstance(first, (ConfigError, ClientCodeError)) else WorkerError(first)
        missing = [t.client_id for t in tasks if t.client_id not in replies]
        if missing:
            raise WorkerError(f"no reply from clients {missing} within {self.timeout:g} s; the round was not aggregated")
        return [replies[t.client_id] for t in tasks]

    def fetch_states(self, where: dict[int, OnNode]) -> dict[int, Any]:
        """The states of the clients ``where`` places on nodes, asked of each node once (a ``query.states`` message
        carrying a :class:`~chillfl.flower.wire.StatesRequest`): what ``checkpoint.client_models`` saves after the last round."""
        from flwr.app import Message

        by_node: dict[int, list[int]] = {}
        for cid, on in where.items():
            by_node.setdefault(on.node, []).append(cid)
        asks = [Message(content=encode(StatesRequest(sorted(ids))), dst_node_id=node, message_type="query.states") for node, ids in by_node.items()]
        states: dict[int, Any] = {}
        for msg in self._send_and_receive(asks):
            if msg.has_error():
                raise WorkerError(f"SuperNode {msg.metadata.src_node_id} did not send its clients' states: {error_line(msg.error.reason)}")
            for cid in by_node.get(msg.metadata.src_node_id, []):
                state = load_client_state(msg.content, cid)
                if state is not None:
                    states[cid] = state
        missing = sorted(set(where) - set(states))
        if missing:
            raise WorkerError(f"the states of clients {missing} did not come back from their SuperNodes within {self.timeout:g} s")
        return {cid: states[cid] for cid in where}  # in the order the protocol stored them

    def run(self, jobs: Sequence[Any]) -> list[Any]:
        raise NotImplementedError("a Flower run sends whole client updates (map), not bare training jobs")

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class OnNode:
    """Where a client's state is: on SuperNode ``node`` (the server never holds the state itself)."""

    node: int


class NodeStore:
    """A protocol's client store under Flower: it remembers which node holds each client's state, nothing more.

    ``load`` gives None: the task goes out without state and the node adds
    the client's own. ``ids`` is empty: the server has no client model to
    save or report, until the run has ended and ``checkpoint.client_models`` asked the nodes for the states
    (:meth:`hold_final`): then the protocol builds each client's model from them as under chillfl's runtime.
    """

    on_disk = False

    def __init__(self) -> None:
        self.where: dict[int, OnNode] = {}
        self.final: dict[int, Any] = {}

    def hold_final(self, states: dict[int, Any]) -> None:
        """The clients' states as the nodes sent them after the last round (no round runs after this)."""
        self.final = dict(states)

    def load(self, cid: int) -> Any:
        return self.final.get(cid)

    def save(self, cid: int, state: Any) -> None:
        if state is None:
            return  # the client keeps no state
        if not isinstance(state, OnNode):
            raise TypeError(f"client {cid}'s state came back to the Flower server ({type(state).__name__}); it must stay on its node")
        self.where[cid] = state

    def ids(self) -> list[int]:
        return list(self.final)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any) -> None:
        if state:
            raise ValueError("a Flower run keeps client states on the SuperNodes; it cannot load them on the server")

    def close(self) -> None:
        self.where.clear()
        self.final.clear()


def keep_client_state_on_nodes(protocol: Any) -> None:
    """A protocol's client store -> :class:`NodeStore` (the states live on the nodes)."""
    keeper = capability(protocol, KeepsClientStates)  # not isinstance: through a wrapper ([privacy], [attack]) on Python 3.12 too
    if keeper is not None:
        keeper.store.close()
        keeper.store = NodeStore()


def registered_float32(config: RunConfig) -> contextlib.AbstractContextManager[None]:
    """float32 as the default dtype while a registered model's run is built and runs, as ``chillfl run`` does
    (:func:`~chillfl.models.registry.float32_default`); a user's own model keeps the caller's default dtype.

    Why: under ``torch.set_default_dtype(torch.float64)`` the server built and ran FedGen's generator in float64
    against float32 features (round 1: "mat1 and mat2 must have the same dtype"), and a ClientApp in the caller's
    process would build its parts the same way. A user's model registers the caller's dtype (:func:`caller_dtype`): refused
    beside a run in another thread that holds float32 over another dtype, as ``chillfl run``'s."""
    return caller_dtype() if is_custom(config.model.get("name")) else float32_default()


@once_per_call
def build_server(config: RunConfig) -> tuple[Any, Any]:
    """The server's experiment and protocol (its client states kept on the nodes); raises chillfl's ConfigErrors, and
    a MissingExtra for a ``[log] sinks`` entry whose package is missing, before anything starts."""
    check_supported(config)
    check_sinks(config)  # the ServerApp writes the sinks chillfl run writes (run_server)
    if config.threads:  # the server evaluates the global model: the thread count fixes its float reductions
        torch.set_num_threads(config.threads)
    with registered_float32(config):
        return _build_server(config)


def _build_server(config: RunConfig) -> tuple[Any, Any]:
    exp = build_experiment(config)  # FedChill's server reads no class count (check_node_computable)
    say_notes(run_notes(config, exp, executor=False))  # chillfl run's notes (Krum's f below the attackers, an idle local_dp, ...): a Flower run said none
    say_notes(ignored_on_flower_notes(config))
    if exp.aggregator is not None and measured_after_average(exp.aggregator.client_half()):
        # a method whose option asks for it declares so (on_flower, limited_by), refused by check_supported on that
        # option; a half that asks by itself is named with the algorithm that chose it
        half = ", ".join(type(p).__name__ for p in half_parts(exp.aggregator.client_half()) if measured_after_average(p))
        field, name = half_field(config.algorithm)  # algorithm.base where a wrapper (PA3Fed) runs its base's half
        raise ConfigError(field, f"{name!r}: its client half {half} (after_average = True) {AFTER_AVERAGE}; {RUNTIME}")
    protocol = build_protocol(exp)
    keep_client_state_on_nodes(protocol)
    return exp, protocol


def ignored_on_flower_notes(config: RunConfig) -> list[str]:
    """A note for each group of options a Flower run does not read that is set off its default: ``checkpoint.every``
    (a Flower run is not checkpointed; ``0``, no checkpoints, is what it does), ``executor`` and the ``[ray]`` table (the SuperNodes run the client updates),
    and the soft-label protocol's client store (``distillation.client_store``, ``max_clients_in_memory``, ``state_dir``:
    the nodes hold the clients' states, docs/flower.md).

    Why: ``checkpoint.every = 1`` wrote no checkpoint and ``ray.workers = 2`` did nothing, without a word, where
    ``chillfl run`` notes ignored ``[ray]`` options and docs/configuration.md promises that note; ``chillfl run``'s own
    ``[ray]`` note (:func:`~chillfl.experiment.ignored_ray_note`) names the executor, which a Flower run does not use."""
    defaults = RunConfig()
    notes = []
    if config.checkpoint.every not in (0, defaults.checkpoint.every):  # 0 asks for what a Flower run does: nothing to note
        notes.append(f"note: checkpoint.every = {config.checkpoint.every!r} is ignored: a Flower run is not checkpointed "
                     "(nothing to resume; chillfl run writes checkpoints)")
    ray_default = dataclasses.asdict(defaults.ray)
    changed = [f"ray.{name} = {value!r}" for name, value in dataclasses.asdict(config.ray).items() if value != ray_default[name]]  # in field order
    if config.executor != defaults.executor:
        changed.insert(0, f"executor = {config.executor!r}")
    if changed:
        notes.append(f"note: {', '.join(changed)} {'is' if len(changed) == 1 else 'are'} ignored: under Flower the SuperNodes run the client "
                     "updates (run_simulation's num_supernodes, num_cpus_per_client; docs/flower.md)")
    store = _changed_store(config)
    if store:
        notes.append(f"note: {', '.join(store)} {'is' if len(store) == 1 else 'are'} ignored: under Flower each SuperNode holds its "
                     "clients' states, which the server never stores (docs/flower.md)")
    return notes


STORE_OPTIONS = ("client_store", "max_clients_in_memory", "state_dir")
"""The ``[distillation]`` options of the server's client store (memory or files), which a Flower run does not have."""


def _changed_store(config: RunConfig) -> list[str]:
    """``distillation.<option> = <value>`` for each of :data:`STORE_OPTIONS` set off its default, in that order."""
    setup = config.distillation_setup
    if setup is None:
        return []
    written, defaults = dataclasses.asdict(setup.common), dataclasses.asdict(DistillationOptions())
    return [f"distillation.{name} = {written[name]!r}" for name in STORE_OPTIONS if written[name] != defaults[name]]


@once_per_call
def run_server(
    config: RunConfig, grid: Any, min_nodes: int = 1, built: tuple[Any, Any] | None = None, stop: SimulationStop | None = None,
) -> RunOutputLite:
    """The ServerApp's body: chillfl's round loop over the SuperNodes; writes the run folder as ``chillfl run`` does,
    its ``[log] sinks`` included, with float32 as the default dtype for a registered model (:func:`registered_float32`).

    ``built``: the server's experiment and protocol from :func:`build_server` (None: built here). ``stop``: the
    simulation's stop signals (:func:`run_simulation`): the loop stops after the round in which the first came
    (:class:`FlowerRunInterrupted`). A run that stops or fails leaves no ``.partial`` folder: nothing in it can be
    resumed (a Flower run is not checkpointed); a StorageError, whose message names the folder, keeps it.

    The server computes (aggregates, evaluates) under the run's ``precision`` and ``deterministic``
    (:func:`~chillfl.runner.device_settings`, as ``chillfl run``'s loop): a caller's ``torch.autocast`` or
    ``set_float32_matmul_precision("medium")`` changed a Flower run's numbers, and ``deterministic = true`` did nothing.
    """
    exp, protocol = built or build_server(config)
    with registered_float32(config), device_settings(config, exp.device):  # the run's precision and determinism, as chillfl run's
        return _run_server(config, grid, min_nodes, exp, protocol, stop)


def _run_server(config: RunConfig, grid: Any, min_nodes: int, exp: Any, protocol: Any, stop: SimulationStop | None) -> RunOutputLite:
    start = time.perf_counter()
    try:
        if stop is not None:
            stop.check()
        config = dataclasses.replace(resolved(config), device=str(exp.device))  # config.toml lists every default, as chillfl run's
        executor = FlowerExecutor(grid, min_nodes, stop=stop)
        writer, held = made_held(lambda: ResultWriter(config.out_dir, config.name))  # released in the clean-up's try below
    except BaseException:
        protocol.close()
        raise
    records: list[dict[str, Any]] = []
    watch = LossWatch(config.strict, hint=loss_hint(run_suspects(config)))  # the loss-health check chillfl run's loop makes (exploding or non-finite losses)
    sinks: list[Any] = []
    trained = False  # every round ran: a later failure (a sink, the client states, the files) keeps the folder
    try:
        held.release()
        write_folder_start(writer, exp, config)  # config.toml and partition.json; a full disk: .partial, its lock given up
        if config.log.sinks:  # chillfl run's sinks (metrics.csv, TensorBoard, W&B, MLflow), built and closed as it does
            sinks = run_sinks(config, writer.path, records)
        for record in run_rounds(
            protocol, executor, seed=config.seed, num_clients=exp.data.num_clients, clients_per_round=config.federation.sample_size(),
            rounds=config.federation.rounds, participation=config.federation, empty=exp.data.without_training_rows(),
        ):
            watch.observe(record)  # before the record is kept, as chillfl run's loop: a warning line, or Diverged with strict
            records.append(record)
            writer.append(record)
            for sink in sinks:  # each its own copy, as chillfl run gives its callbacks
                sink.on_round(copy.deepcopy(record))
            cut = None if stop is None else stop.round_done(len(records), config.federation.rounds)
            if cut is not None:
                raise FlowerRunInterrupted(cut, len(records))
        trained = True
        if config.checkpoint.client_models:  # the client states come back from the nodes before the protocol builds their models
            fetch_client_states(protocol, executor)
        ended = list(sinks)
        output = finish_run(exp, config, protocol, writer, records, time.perf_counter() - start, runtime="flower",  # the files chillfl run writes
                            before_rename=lambda: close_run_sinks(sinks, None))  # finished once they are written, as chillfl run's
        for sink in ended:
            sink.on_end(output)
        return RunOutputLite(str(output.folder), records, output.summary)
    except StorageError:  # its message names the folder (a full disk): kept, its lock given up
        writer.abort()
        raise
    except FlowerRunInterrupted:
        _discard(writer)  # no checkpoint in it: a .partial folder would promise a resume that cannot be
        raise
    except Diverged as exc:  # as chillfl run's: NAME.failed with failure.json, which reports and comparisons read
        exc.folder = writer.fail({"round": exc.round, "client": exc.client, "what": exc.what, "last_checkpoint": None})  # type: ignore[attr-defined]
        raise
    except BaseException as exc:
        if trained:  # its rounds' results are whole: kept, said where
            writer.abort()
            say(f"chillfl: the Flower run's rounds all ran, then it failed ({type(exc).__name__}); its results are kept in {shell_path(writer.path)} "
                "(metrics.jsonl); a Flower run is not checkpointed: nothing to resume")
        elif _discard(writer) and (records or not isinstance(exc, ConfigError)):  # as a stopped run's: `chillfl resume` would find no
            # checkpoint in it; a refusal before any round ended is its one line alone, as chillfl run's (its folder removed unsaid)
            what = "was interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            say(f"chillfl: the Flower run {what}; {NOT_CHECKPOINTED}")
        raise
    finally:
        close_run_sinks(sinks, sys.exc_info()[1])  # the exception that ends the run (closed above when it finished)
        protocol.close()


def _discard(writer: ResultWriter) -> bool:
    """Give the run folder up and remove it while it is still ``.partial`` (whether it was): a folder the run finished
    (renamed to its final name before a later step failed) is the run's result and stays."""
    writer.abort()
    if writer.path == writer.final:
        return False
    remove_tree(writer.path)
    return True


def fetch_client_states(protocol: Any, executor: FlowerExecutor) -> None:
    """Bring every client's state back from its node into the server's store, so that the protocol builds each client's
    own model from it (``client_states``) as under chillfl's runtime; a protocol that keeps no client state has none."""
    keeper = capability(protocol, KeepsClientStates)
    store = None if keeper is None else keeper.store
    if isinstance(store, NodeStore):
        store.hold_final(executor.fetch_states(store.where))


@dataclass
class RunOutputLite:
    """What a Flower run leaves: its folder, its records, its summary."""

    folder: str
    records: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClientRuntime:
    """One ClientApp process's parts for one config (built on the first message): template, objective, data."""

    config: RunConfig
    parts: dict[str, Any] = field(default_factory=dict)

    def ready(self) -> tuple[SequentialExecutor, Any]:
        """The node's executor and evaluation, built once, in float32 for a registered model (:func:`registered_float32`),
        without the notes the server says (each ClientApp actor printed them again), errors still raised and logged."""
        if not self.parts:
            if self.config.threads:
                torch.set_num_threads(self.config.threads)
            with registered_float32(self.config), notes_quiet():
                exp = build_experiment(self.node_config())
                protocol = build_protocol(exp)
            self.parts["executor"] = SequentialExecutor(exp.model, exp.spec, client=protocol.client)
            self.parts["evaluation"] = getattr(protocol, "evaluation")
            self.parts["device"] = exp.device
            protocol.close()
        return self.parts["executor"], self.parts["evaluation"]

    def node_config(self) -> RunConfig:
        """The config a node builds its parts from: the run's, less ``checkpoint.client_models``, which the server alone
        acts on (it asks the nodes for the states after the last round, :func:`fetch_client_states`).

        Why: every ClientApp message built the experiment with the server's note that the method keeps no client model
        ("checkpoint.client_models: ... so no client_models.safetensors is saved"), so a simulation printed it once per
        ClientApp actor ("[repeated 5x across cluster]") after the server's one."""
        return dataclasses.replace(self.config, checkpoint=dataclasses.replace(self.config.checkpoint, client_models=False))

    def train(self, content: Any, records: Any) -> Any:
        """This node's client updates of one round: tasks from the message, data built here, states from ``records``.

        ``records`` is the node's ``Context.state``: each client's state is read
        from it before and written back after its update; the reply carries
        no state, only which clients now hold one (``held``). A client update that raises (the client's own code) is a
        reply too, :class:`~chillfl.flower.wire.ClientFailure`: raised here, Flower sent it as an error reply, which the
        server cannot tell from a lost node's.

        The updates run under the run's ``precision`` and ``deterministic`` (:func:`~chillfl.runner.device_settings`,
        set back after): as chillfl's worker processes and Ray actors pin them, so a node trains as a chillfl run's
        client does, whatever its process had set (a ClientApp in the caller's process: its autocast, its matmul precision).
        """
        tasks = decode(content)
        executor, evaluation = self.ready()
        full = [dataclasses.replace(t, data=evaluation.client_data(t.client_id), state=load_client_state(records, t.client_id)) for t in tasks]
        with registered_float32(self.config), device_settings(self.config, self.parts["device"]):  # float32: FedGen's generator, a method's noise
            replies: list[ClientReply[Any, Any]] = []
            for task in full:  # one at a time, as a process worker runs its tasks: a failure names its client
                try:
                    replies.extend(executor.map([task]))
                except ConfigError:
                    raise  # a refusal: the ClientApp sends it as one (Refusal)
                except Exception as error:  # the client's own code: a reply the server raises as ClientCodeError, not a lost node's error
                    logging.getLogger(__name__).error("client %s's update failed on this node", task.client_id, exc_info=True)  # the traceback, where the node runs
                    # out of memory: the node's limit, not the client's code, which the server says as a lost worker's
                    return encode({"failed": ClientFailure(failure_line(error), task.client_id, out_of_memory(error))})
        held = []
        for reply in replies:
            if reply.state is not None:
                save_client_state(records, reply.client_id, reply.state)
                held.append(reply.client_id)
        return encode({"replies": [dataclasses.replace(r, state=None) for r in replies], "held": held})


def server_app(config: RunConfig | None = None, *, min_nodes: int = 1) -> Any:
    """A Flower ``ServerApp`` running ``config`` (None: read from the Flower run config, see the module docstring)."""
    import_flwr()
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        with said_once():  # each note once a run: the config's options are read while loading and building it too
            cfg = config or config_from_run_config(context.run_config)
            nodes = int(context.run_config.get("min-nodes", min_nodes)) if context.run_config else min_nodes
            run_server(cfg, grid, nodes)

    return app


def client_app(config: RunConfig | None = None, *, simulated: bool = False) -> Any:
    """A Flower ``ClientApp`` serving ``config``'s clients (None: read from the Flower run config).

    ``simulated``: it runs in the Ray actors of :func:`run_simulation`, whose ``flwr`` logger then drops Flower's
    :data:`ACTOR_EXIT` line (:func:`without_actor_exit_line`)."""
    import_flwr()
    from flwr.app import ConfigRecord, Message, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()
    runtimes: dict[str, ClientRuntime] = {}

    def runtime(context: Any) -> ClientRuntime:
        if simulated:
            without_actor_exit_line()
        key = "config" if config is not None else repr(sorted(dict(context.run_config or {}).items()))  # a process may serve several runs
        if key not in runtimes:
            runtimes[key] = ClientRuntime(config or config_from_run_config(context.run_config))
        return runtimes[key]

    @app.query("chillfl")
    def query(msg: Any, context: Any) -> Any:
        if simulated:  # every node is asked this first
            without_actor_exit_line()
        node = context.node_config
        info: dict[str, Any] = {"partition-id": int(node.get("partition-id", 0)), "num-partitions": int(node.get("num-partitions", 1))}
        return Message(content=RecordDict({"node": ConfigRecord(info)}), reply_to=msg)

    @app.query("states")
    def states(msg: Any, context: Any) -> Any:
        asked = decode(msg.content)
        if not isinstance(asked, StatesRequest):
            raise TypeError(f"query.states carries a StatesRequest, got {type(asked).__name__}")
        return Message(content=client_states_record(context.state, asked.client_ids), reply_to=msg)

    @app.train()
    def train(msg: Any, context: Any) -> Any:
        """The node's updates; its ConfigError (bad input only a client sees) is a reply (:class:`~chillfl.flower.wire.Refusal`),
        which the server raises as that one line: raised here, Flower logged the traceback and the server got it as text.
        (A client's own exception is a reply as well, made by :meth:`ClientRuntime.train`; what still raises here is the node's.)"""
        try:
            content = runtime(context).train(msg.content, context.state)
        except ConfigError as error:
            content = encode({"refused": Refusal.of(error)})
        return Message(content=content, reply_to=msg)

    return app


@once_per_call
def run_simulation(config: RunConfig, *, num_supernodes: int | None = None, num_cpus_per_client: float = 1.0) -> RunOutputLite:
    """``config`` under Flower's simulation engine (Ray backend), one SuperNode per client unless ``num_supernodes``.

    Returns the run's folder (written by the ServerApp, as ``chillfl run`` writes it), records and summary.

    SIGINT, SIGTERM and SIGHUP (when called from the main thread) stop the run after its current round, a second one at
    once, as under ``chillfl run``: one line names the signal, Flower and its Ray stop, and :class:`FlowerRunInterrupted`
    (a :class:`~chillfl.runner.RunInterrupted` without folder) is raised. A Flower run is not checkpointed: its
    ``.partial`` folder is removed. To keep these signals for chillfl, Flower's simulation runs in a thread of its own
    (Ray, started from the main thread, would take SIGTERM and end the process with ``sys.exit``).

    One call is one scope of :mod:`chillfl.once`, the ServerApp's thread included: each note is said once a run.
    """
    import_flwr()
    from chillfl.executors.processes import default_workers
    from chillfl.executors.ray_executor import import_ray, local_ray_folder, stop_signals_blocked, without_ray_tip

    import_ray()  # RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1 before flwr imports Ray (Ray's C++ handler aborted on SIGTERM: exit 134)
    from flwr.simulation import run_simulation as flwr_simulation

    check_simulation_args(num_supernodes, num_cpus_per_client)  # before Ray starts: it started, then failed with Flower's tracebacks
    num_supernodes, num_cpus_per_client = None if num_supernodes is None else int(num_supernodes), float(num_cpus_per_client)  # numpy's: Flower's own types
    built = build_server(config)  # a ConfigError stops the run here, before Flower and Ray start
    nodes = config.federation.num_clients if num_supernodes is None else num_supernodes
    out: list[RunOutputLite | BaseException] = []
    stop = SimulationStop(rounds=config.federation.rounds)
    server = server_app_capturing(config, out, min_nodes=nodes, built=built, stop=stop, scope=contextvars.copy_context())
    temp = local_ray_folder()  # the simulation's Ray sessions, removed with it
    init = {"num_cpus": default_workers(), "include_dashboard": False, "_temp_dir": temp}
    backend = {"client_resources": {"num_cpus": num_cpus_per_client, "num_gpus": 0.0}, "init_args": init}

    def simulate() -> None:
        with stop_signals_blocked(started_local=True):  # the Ray it starts leaves SIGTERM/SIGHUP to this process, as chillfl's Ray executor's
            flwr_simulation(server_app=server, client_app=client_app(config, simulated=True), num_supernodes=nodes, backend_config=backend)  # type: ignore[arg-type]

    pythonpath = os.environ.get("PYTHONPATH")  # Flower's RayBackend.init_ray writes the driver's sys.path there, for good
    try:
        with without_ray_tip(), without_log_line("flwr", RUN_SIMULATION_DEPRECATED):
            if threading.current_thread() is threading.main_thread():
                with stop.handling(), without_log_line("ray._private.worker", RAY_THREAD_WARNING):
                    in_thread(simulate)
            else:
                simulate()
    finally:
        stop.ended.set()  # a ServerApp still waiting for replies gives up now, not after NODE_TIMEOUT_S
        shutil.rmtree(temp, ignore_errors=True)
        if pythonpath is None:  # later subprocesses of the caller would search the caller's whole sys.path first
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = pythonpath
    if not out:
        built[1].close()
        raise WorkerError("the Flower simulation ended without finishing the run (see Flower's log above)")
    if isinstance(out[0], BaseException):  # the ServerApp's error (e.g. a failed client update), raised here as chillfl run would
        raise out[0]
    if stop.received is not None:  # it came once the rounds were done: the run completed; the signal goes where it would have
        signal.raise_signal(stop.received)
    return out[0]


def check_simulation_args(num_supernodes: int | None, num_cpus_per_client: float) -> None:
    """A one-line ConfigError naming the argument of :func:`run_simulation` that no simulation can run with, before anything starts.

    Why: ``num_cpus_per_client`` above the local Ray's CPUs started Ray and Flower, then ended in Flower's "ActorPool is
    empty" tracebacks and a bare RuntimeError; ``num_supernodes = -2`` started Ray and failed on the SuperNodes'
    partition-ids (its Ray workers outliving the call), and 0 silently meant one node per client. The CPUs are checked
    by the Ray executor's rule (:func:`~chillfl.executors.ray_executor.workers_fit`) against what the simulation gives
    its local Ray (:func:`~chillfl.executors.processes.default_workers`)."""
    from chillfl.executors.processes import default_workers
    from chillfl.executors.ray_executor import workers_fit

    if num_supernodes is not None and (isinstance(num_supernodes, bool) or not isinstance(num_supernodes, numbers.Integral) or num_supernodes < 1):
        raise ConfigError("num_supernodes", f"must be a whole number >= 1 (None: one SuperNode per client), got {num_supernodes!r}")
    cpus = default_workers()
    # numbers.Real: numpy's numbers too (np.float32(1.0) was refused "must be > 0 and at most ...", which it is)
    number = isinstance(num_cpus_per_client, numbers.Real) and not isinstance(num_cpus_per_client, bool)
    if not (number and num_cpus_per_client > 0 and workers_fit({"CPU": cpus}, num_cpus_per_client, 0.0)[0] >= 1):
        raise ConfigError("num_cpus_per_client", f"must be > 0 and at most the CPUs the simulation's local Ray has ({cpus}), got {num_cpus_per_client!r}")


def in_thread(work: Any) -> None:
    """``work()`` in a new thread while this (main) thread waits for it, awake for signal handlers; its exception raised here."""
    failed: list[BaseException] = []

    def body() -> None:
        try:
            work()
        except BaseException as error:
            failed.append(error)

    thread = threading.Thread(target=body, name="chillfl-flower-simulation")
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
    if failed:
        raise failed[0]


@contextlib.contextmanager
def notes_quiet() -> Iterator[None]:
    """chillfl's loggers at ERROR while the block runs (a level already above it kept), as they were after: a ClientApp
    builds the run's parts the server built, whose notes (warnings) the server has said; an error still shows. The
    ``chillfl.data`` loggers keep their level: a node reads or downloads its own data, which the server does not."""
    log, data = logging.getLogger("chillfl"), logging.getLogger("chillfl.data")
    level, data_level = log.level, data.level
    if data_level == logging.NOTSET:  # the node's own data (its download, checksum and cache lines): not the server's to say
        data.setLevel(log.getEffectiveLevel())
    log.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        log.setLevel(level)
        data.setLevel(data_level)


class _WithoutLine(logging.Filter):
    """Drops the records whose message contains ``text``; every other record passes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextlib.contextmanager
def without_log_line(logger: str, text: str) -> Iterator[None]:
    """``logger``'s records that contain ``text`` silenced while the block runs, and nothing else."""
    log = logging.getLogger(logger)
    quiet = _WithoutLine(text)
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


ACTOR_EXIT = "Manually terminating"
"""The start of the WARNING each of Flower's simulation actors logs as Flower ends it (``VirtualClientEngineActor.terminate``)."""


def without_actor_exit_line() -> None:
    """This process's ``flwr`` logger drops :data:`ACTOR_EXIT` for good (once: the filter is added once a process).

    Called in :func:`run_simulation`'s ClientApp, i.e. in a Ray actor that Flower starts for the simulation and ends with
    it. Why: each actor's "(ClientAppActor pid=...) WARNING : Manually terminating ClientAppActor", which Ray forwards to
    the caller's terminal as the actor ends, came after chillfl's own last line (a refusal, a failed run's), noise around
    the one line that matters; it says nothing a user can act on. The filter can only be added in the actor's process:
    the caller's logging never sees the record, only Ray's copy of the actor's stderr."""
    log = logging.getLogger("flwr")
    if not any(isinstance(f, _WithoutLine) and f.text == ACTOR_EXIT for f in log.filters):
        log.addFilter(_WithoutLine(ACTOR_EXIT))


RAY_THREAD_WARNING = "SIGTERM handler is not set"
"""Ray's warning that ``ray.init`` outside the main thread sets no SIGTERM handler: silenced while :func:`run_simulation`
runs Flower's simulation in a thread, which is the point of that thread (chillfl keeps SIGTERM)."""

RUN_SIMULATION_DEPRECATED = "The `run_simulation` function is deprecated"
"""The start of the warning flwr 1.42 logs on every ``flwr.simulation.run_simulation`` call (through its ``flwr`` logger).

Silenced while :func:`run_simulation` runs, and nothing else. Why: Flower's replacement, ``flwr run`` with a simulation
federation, runs the apps from an app folder in processes a SuperLink starts, so the ServerApp cannot hand its run's
output back to this process; flwr has no other in-process entry point (``_run_simulation`` is private). The warning,
five lines on every run, names nothing a user of :func:`run_simulation` can change; docs/flower.md ("Choices and limits")
says it instead. Every other Flower log line, other deprecations included, still shows; the filter goes when the
simulation ends."""


def server_app_capturing(
    config: RunConfig, out: list[RunOutputLite | BaseException], min_nodes: int, built: tuple[Any, Any], stop: SimulationStop | None = None,
    scope: contextvars.Context | None = None,
) -> Any:
    """:func:`server_app` whose run output, or error, is appended to ``out`` (the simulation runs it in a thread of this process).

    ``scope``: the caller's context, in which the ServerApp runs (a copy; its :mod:`chillfl.once` record is the caller's
    own set), so that a note :func:`run_simulation` said while it built the server is not said again from Flower's thread."""
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        try:
            out.append((scope or contextvars.copy_context()).run(run_server, config, grid, min_nodes, built, stop))
        except Exception as error:
            out.append(error)

    return app
