"""What a Flower node's failure says on the server, and what a Flower run notes it ignores (seammend 2-4).

2. A node's ConfigError subclass (a MissingExtra, which the CLI says in its own line naming the extra) came back as a
   plain ConfigError: the refusal carries its class now, by name, from a closed list (nothing in a message names
   code to import).
3. Any other exception on a node came back as a WorkerError holding Flower's reason, under Flower's simulation the
   node's whole traceback; it keeps the last line now, as the Ray executor does (chillfl.errors.failure_line, linefix: the exception's line, not the last).
4. ``distillation.client_store = "disk"`` did nothing under Flower without a word, while the other ignored options
   were noted.
"""

from __future__ import annotations

import traceback
from typing import Any, Sequence

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from flwr.app import Error, Message  # noqa: E402
from test_flower_privacy_attacks import InProcessGrid, server_identity  # noqa: E402,F401  (a fixture)

from chillfl.config import load_config  # noqa: E402
from chillfl.engine.protocol import ClientTask  # noqa: E402
from chillfl.errors import ConfigError, MissingExtra, failure_line  # noqa: E402
from chillfl.executors.processes import WorkerError  # noqa: E402
from chillfl.flower import client_app  # noqa: E402
from chillfl.flower.apps import ClientRuntime, FlowerExecutor, error_line, ignored_on_flower_notes  # noqa: E402
from chillfl.flower.wire import Refusal, decode, encode  # noqa: E402
from chillfl.training.terms import TermError  # noqa: E402

TASKS = [ClientTask(client_id=0, round=1, downlink=None, data=None)]  # type: ignore[arg-type]  # the data stay on the node


def _raising(error: Exception) -> Any:
    def train(self: ClientRuntime, content: Any, records: Any) -> Any:
        raise error

    return train


def _executor(grid: Any) -> FlowerExecutor:
    return FlowerExecutor(grid, min_nodes=1, timeout=5.0)


# ----------------------------------------------------------------------------- 2: the refusal keeps its class


@pytest.mark.usefixtures("server_identity")
def test_a_nodes_missing_extra_is_raised_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientRuntime, "train", _raising(MissingExtra("JPEG datasets", "PIL.Image", "images")))
    with pytest.raises(MissingExtra) as caught:
        _executor(InProcessGrid(client_app(load_config(None, {})), 1)).map(TASKS)
    error = caught.value
    assert (error.field, error.what, error.module, error.extra) == ("images", "JPEG datasets", "PIL.Image", "images")
    assert str(error) == 'PIL.Image is needed for JPEG datasets: pip install "chillfl[images]"'  # the CLI's line, no field before it


@pytest.mark.usefixtures("server_identity")
def test_a_nodes_term_error_is_raised_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientRuntime, "train", _raising(TermError("T returned a tensor of shape (3,)", "objective.terms[0]")))
    with pytest.raises(TermError) as caught:
        _executor(InProcessGrid(client_app(load_config(None, {})), 1)).map(TASKS)
    assert (caught.value.field, caught.value.message) == ("objective.terms[0]", "T returned a tensor of shape (3,)")


class PluginExtra(MissingExtra):
    """A plugin's own subclass: not in the closed list, sent as the nearest class it derives from that is."""

    def __init__(self) -> None:
        super().__init__("my plots", "seaborn", "plots")
        self.hint = "try again"
        self.count = 3


def test_a_subclass_no_list_names_comes_back_as_the_nearest_one_that_does() -> None:
    refusal = decode(encode({"refused": Refusal.of(PluginExtra())}))["refused"]
    assert (refusal.kind, refusal.attributes) == ("MissingExtra", {"what": "my plots", "module": "seaborn", "extra": "plots", "hint": "try again"})
    error = refusal.error()
    assert type(error) is MissingExtra and (error.field, error.extra, error.hint) == ("plots", "plots", "try again")


def test_a_refusal_naming_another_class_or_odd_attributes_is_a_plain_config_error() -> None:
    """Nothing a message names is imported or set but a public text attribute: a newer node's class, or a hostile one."""
    sent = Refusal("algorithm.name", "no", kind="subprocess.Popen", attributes={"_private": "x", "extra": 3, "args": "y"})  # type: ignore[dict-item]
    error = decode(encode({"refused": sent}))["refused"].error()
    assert type(error) is ConfigError and (error.field, error.message) == ("algorithm.name", "no")
    assert "_private" not in vars(error) and "extra" not in vars(error) and error.args == ("algorithm.name: no",)
    bare = Refusal("f", "m", kind="MissingExtra", attributes=["what"]).error()  # type: ignore[arg-type]  # decoded: any shape
    assert type(bare) is MissingExtra and str(bare) == "m"
    odd = Refusal("f", "m", kind=["MissingExtra"]).error()  # type: ignore[arg-type]
    assert type(odd) is ConfigError and str(odd) == "f: m"


# ----------------------------------------------------------------------------- 3: the last line of a node's exception


class TracebackGrid(InProcessGrid):
    """Flower's simulation engine: a ClientApp's exception is an error reply whose reason is its Ray task error's text."""

    def send_and_receive(self, messages: Sequence[Message], timeout: float | None = None) -> list[Message]:
        out = []
        for m in messages:
            try:
                out.append(self.app(m, self.contexts[m.metadata.dst_node_id]))
            except Exception as exc:  # noqa: BLE001 - as Flower's vce_api writes it
                reason = str(type(exc)) + ":<'" + "ray::ClientAppActor.run()\n" + traceback.format_exc() + "'>"
                out.append(Message(Error(code=1, reason=reason), reply_to=m))
        return out


@pytest.mark.usefixtures("server_identity")
def test_a_nodes_exception_is_its_last_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientRuntime, "train", _raising(RuntimeError("boom")))
    with pytest.raises(WorkerError) as caught:
        _executor(TracebackGrid(client_app(load_config(None, {})), 1)).map(TASKS)
    assert str(caught.value) == "SuperNode 10 failed a client update: RuntimeError: boom; the round was not aggregated"


@pytest.mark.parametrize(("reason", "said"), [
    ("<class 'ZeroDivisionError'>:<'division by zero'>", "ZeroDivisionError: division by zero"),  # a deployed SuperNode's
    ("<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::ClientAppActor.run()\n  File \"a.py\", line 1\n"
     "RuntimeError: boom\n\nflwr.clientapp.client_app.ClientAppException: \nException ClientAppException occurred. Message: boom\n'>",
     "RuntimeError: boom"),  # the node's own exception, not Flower's wrapper (rev112a 1)
    ("<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::ClientAppActor.run()\n  File \"a.py\", line 1\n"
     "AssertionError\n\nThe above exception was the direct cause of the following exception:\n\nray::ClientAppActor.run()\n"
     "flwr.clientapp.client_app.ClientAppException: \nException ClientAppException occurred. Message: \n'>",
     "AssertionError"),
    ("<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::ClientAppActor.run() (pid=1)\n  File \"node.py\", line 3\n"
     "KeyError: 'k'\n\nThe above exception was the direct cause of the following exception:\n\nray::ClientAppActor.run() (pid=1)\n"
     "  File \"node.py\", line 5\nValueError: outer bad\n\nThe above exception was the direct cause of the following exception:\n\n"
     "ray::ClientAppActor.run() (pid=1)\nflwr.clientapp.client_app.ClientAppException: \nException ClientAppException occurred. "
     "Message: outer bad'>", "ValueError: outer bad"),  # raised from another: the node's, not its cause (rev112c 1)
    ("Traceback (most recent call last):\n  File \"a.py\", line 1\nValueError: bad\n", "ValueError: bad"),
    ("RuntimeError: boom", "RuntimeError: boom"),
    ("", ""),
])
def test_a_flower_reason_is_said_in_one_line(reason: str, said: str) -> None:
    assert error_line(reason) == said


def test_the_failure_line_is_cut_and_blank_text_is_empty() -> None:
    """A message's first line now (linefix: the last was a tip or a note), cut at a word with a mark (linefix)."""
    assert failure_line("a\nb\n\n") == "a" and failure_line("  \n ") == "" and failure_line("x" * 400) == "x" * 298 + " ~"


# ----------------------------------------------------------------------------- 4: the client store's note


SOFT = {"distillation.method": "scarlet", "distillation.public_size": 60, "distillation.subset_size": 40}


def test_a_client_store_set_off_its_default_is_noted_as_ignored() -> None:
    notes = ignored_on_flower_notes(load_config(None, {**SOFT, "distillation.client_store": "disk"}))
    assert notes == ["note: distillation.client_store = 'disk' is ignored: under Flower each SuperNode holds its clients' states, "
                     "which the server never stores (docs/flower.md)"]
    both = ignored_on_flower_notes(load_config(None, {**SOFT, "distillation.client_store": "memory", "distillation.max_clients_in_memory": 5}))
    assert both == ["note: distillation.client_store = 'memory', distillation.max_clients_in_memory = 5 are ignored: under Flower each "
                    "SuperNode holds its clients' states, which the server never stores (docs/flower.md)"]


def test_a_default_client_store_or_none_is_not_noted() -> None:
    assert ignored_on_flower_notes(load_config(None, SOFT)) == []
    assert ignored_on_flower_notes(load_config(None, {})) == []
