"""User-facing errors.

Every mistake a user can make in a config or on the command line raises
:class:`ConfigError`; the CLI turns it into one line on stderr and exit status 2.
Keeping one exception type means library code never prints or exits itself.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

_LINE_BREAKING = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}  # control, format, surrogate, private use, line/paragraph separators


def one_line(text: object) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x00``, ``\\u202e``), so an error stays one line.

    Not a string (a dict key ``1`` of a config built in Python, named as the field): its ``str()``, so reporting the
    mistake cannot raise an AttributeError of its own."""
    text = text if isinstance(text, str) else str(text)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if unicodedata.category(ch) in _LINE_BREAKING:
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


CUT = "~"
"""Where :func:`failure_line` cut a line: ASCII, as the progress bar's cut name (``progress.ELLIPSIS``), so a caller's
ASCII stream can write it."""

_FRAME = re.compile(r'^  File "')
_ANY_FRAME = re.compile(r'^(?: *\| )?  File "')
"""A frame, plain or in an exception group's box (``  |   File "..."``)."""


def framed(lines: Iterable[str]) -> bool:
    """Whether ``lines`` hold a traceback's frame: a plain one, or one in an exception group's box (whose frames are
    all boxed, so a text of a group alone looked like a message of several lines)."""
    return any(_ANY_FRAME.match(line) for line in lines)


def failure_line(error: BaseException | str, limit: int = 300, kind: str | None = None) -> str:
    """The one line that says what failed: ``Type: message`` for an exception (``kind``, else its class's name, as the
    type), the line below for a text; ``""`` for blank text, cut at ``limit`` (:func:`cut_line`).

    Which line of ``str(error)``, in this order:

    * a traceback in it (a Ray task's or a Flower node's text, a wrapped one): the exception's line after the last
      ``  File ...`` frame and its code lines (notes and continuation lines that follow are left out, but see below);
    * where that last traceback is an exception group's (Python 3.11+: ``  + Exception Group Traceback``, its lines
      boxed in ``  | ``, each sub-exception's in a box inside): the first sub-exception's line, through nested groups
      down to a plain exception (``ValueError: boom``), by the rule above inside its box. Why not the group's line:
      ``ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)`` (asyncio's, anyio's) says only that
      something failed, not what. Only the first: one line has room for one, and a TaskGroup lists first the task that
      failed first. A group whose sub-exceptions are not shown (cut by ``max_group_depth``): the group's line;
    * a first line followed by tab-indented ``key: value`` lines (Ray's dead actor: a fixed preamble and the actor's
      details): the next line after them, which says why; the first line where none follows;
    * else the first non-blank line: an exception's message leads with its summary, and a tip or a detail line follows
      (torch's "device-side assert triggered", then "Compile with ..."); PEP 678 notes are not in ``str()`` at all.

    A line that ends with ``:`` introduces what follows (Ray's "Version mismatch: The cluster was started with:"), so the
    lines after it are joined to it (in a traceback's text, a note added to the exception follows its message, and is
    joined too where the message ends with ``:``: the text cannot tell the two apart). Why one rule: the last line,
    which this replaced, gave a tip, a note or a detail line whenever the text had several (Ray's version mismatch said
    only ``    Python: 3.11.7``)."""
    text = str(error)
    lines = [line.rstrip() for line in text.splitlines()]
    leaf = _group_leaf(lines)
    if leaf is not None:
        lines = leaf
    at = 0 if leaf is not None else _exception_at(lines)
    if at is None:
        at = _after_details(lines)
    if at is None:
        at = next((i for i, line in enumerate(lines) if line.strip()), None)
    said = _joined(lines, at) if at is not None else ""
    name = kind if kind is not None else type(error).__name__ if isinstance(error, BaseException) else None
    if name is not None:
        said = f"{name}: {said}" if said else name
    return cut_line(said, limit)


def _exception_at(lines: list[str]) -> int | None:
    """Where a traceback's exception line is: the first unindented non-blank line after its last frame; None without one."""
    frames = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    if not frames:
        return None
    return next((i for i in range(frames[-1] + 1, len(lines)) if lines[i].strip() and not lines[i][0].isspace()), None)


_GROUP = re.compile(r"^ *\+ Exception Group Traceback \(")
"""An exception group's traceback (Python 3.11+), printed unnested: its lines in a box (``  | ``), each sub-exception's
in a box inside (``    | ``, opened by ``  +-+---- 1 ----``). Its first line may have lost its indent (Ray strips
the traceback's text)."""

_CUT_DEPTH = re.compile(r"^\.\.\. \(max_group_depth is \d+\)$")
"""What a sub-exception's box holds where the group nests deeper than ``max_group_depth`` (10 by default)."""

_HEADERS = ("Traceback (most recent call last):", "Exception Group Traceback (most recent call last):",
            "During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")


def _group_leaf(lines: list[str]) -> list[str] | None:
    """A text's last traceback, where it is an exception group's (no plain frame after it): its first sub-exception's
    lines, descending through nested groups to a plain exception, unboxed; the group's own lines where that sub-exception
    says no exception (cut by ``max_group_depth``). None where the last traceback is not a group's."""
    groups = [i for i, line in enumerate(lines) if _GROUP.match(line)]
    frames = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    if not groups or (frames and frames[-1] > groups[-1]):
        return None
    start = groups[-1] + 1
    column = _edge(lines[start]) if start < len(lines) and _boxed(lines[start], 0) else _edge(lines[groups[-1]])
    end = next((i for i in range(start, len(lines)) if not _boxed(lines[i], column)), len(lines))
    group: list[str] | None = None  # the lines of the group whose box is read
    while True:
        content = [(i, lines[i][column + 2 :]) for i in range(start, end) if lines[i][column : column + 1] == "|"]
        at = _box_exception(content)
        if at is None or _CUT_DEPTH.match(content[at][1]):
            return group
        opener = " " * column + "+-+"
        box = next((i for i in range(content[at][0] + 1, end) if lines[i].startswith(opener)), end)
        inner = column + 2
        first = next((i for i in range(box + 1, end) if lines[i][inner : inner + 1] == "|"), None)
        if first is None:  # a plain exception: the leaf (or a group whose sub-exceptions are not shown)
            return [text for _, text in content[at:]]
        # sub-exception 1 ends at the box's next edge on its column (``+---- 2 ----`` or its bottom), not a group's
        # box opened inside it (``+-+``)
        group, start, column = [text for _, text in content[at:]], first, inner
        end = next((i for i in range(start, end) if lines[i].startswith(" " * column + "+") and not lines[i].startswith(" " * column + "+-+")), end)


def _edge(line: str) -> int:
    """The column of ``line``'s first non-space character."""
    return len(line) - len(line.lstrip(" "))


def _boxed(line: str, column: int) -> bool:
    """Whether ``line`` is inside the box whose edge is at ``column`` (its own ``|``/``+`` there or in a box inside)."""
    edge = _edge(line)
    return edge >= column and line[edge : edge + 1] in ("|", "+")


def _box_exception(content: list[tuple[int, str]]) -> int | None:
    """In one box's unboxed lines, where its (last) exception line is: the first unindented non-blank line after the
    last frame or traceback header (an exception raised in a worker or made but never raised has no frame)."""
    texts = [text for _, text in content]
    last = max((i for i, text in enumerate(texts) if _FRAME.match(text) or text.strip() in _HEADERS), default=-1)
    return next((i for i in range(last + 1, len(texts)) if texts[i].strip() and not texts[i][0].isspace() and texts[i].strip() not in _HEADERS), None)


def _after_details(lines: list[str]) -> int | None:
    """Where the line after a first line's tab-indented details is (that first line where none follows); None where
    the first non-blank line has no tab-indented line under it."""
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None or first + 1 >= len(lines) or not lines[first + 1].startswith("\t"):
        return None
    rest = (i for i in range(first + 1, len(lines)) if lines[i].strip() and not lines[i].startswith("\t"))
    return next(rest, first)


def _joined(lines: list[str], at: int) -> str:
    """Line ``at``, stripped; where it ends with ``:``, the non-blank lines after it joined to it, stripped."""
    said = lines[at].strip()
    if not said.endswith(":"):
        return said
    return " ".join([said, *(line.strip() for line in lines[at + 1 :] if line.strip())])


def cut_line(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: cut after its last sentence within them (where that keeps half of
    them), else at its last word boundary (where that keeps half of them: else inside the long word), and marked with
    :data:`CUT`. Why: a cut at a character count ended a dead actor's line mid-word (``Some common causes incl``), and a
    cut at a word alone left ``No such file or directory: ~`` of a message ending in a long path."""
    if len(text) <= limit:
        return text
    room = text[: max(limit - len(CUT) - 1, 0)]
    end = room.rfind(". ")
    if end >= len(room) // 2:
        return f"{room[: end + 1]} {CUT}"
    space = room.rfind(" ")
    if space < len(room) // 2:  # one long token (a path, a repr, text without spaces): cut inside it, not down to nothing
        return f"{room} {CUT}"
    return f"{room[:space]} {CUT}"


MAX_JSON_DEPTH = 200
"""How deeply lists and objects may nest in a JSON file chillfl reads; deeper is a damaged file (:func:`json_loads`).

The deepest chillfl writes is 7 (a checkpoint's metadata: a method's state with a tensor in a dict in a list), a
``metrics.jsonl`` line 2, a LEAF data file 5. Why a bound of its own: Python's parser nests as deep as the recursion
limit lets it, so what was refused depended on ``sys.setrecursionlimit`` (which a test, a notebook or a package may
raise), and under a high one a deep enough file overflowed the C stack: a crash, not a one-line refusal."""

_SKIPPED = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(text: str) -> int:
    """How deeply the lists and objects of the JSON ``text`` nest (0 for a bare value), brackets in strings not counted.

    Escaped backslashes and quotes are dropped, then what lies between each pair of quotes, then every byte but a
    bracket: all in C (a 150 MB LEAF file in about a tenth of ``json.loads``'s time), but the one step per bracket left.
    Text that is no JSON may count otherwise; ``json.loads`` refuses it anyway."""
    raw = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(raw.split(b'"')[::2]).translate(None, _SKIPPED)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def json_loads(text: str | bytes) -> Any:
    """``json.loads``, with lists or objects nested deeper than :data:`MAX_JSON_DEPTH` a ValueError, as any other damaged
    file is, whatever Python's recursion limit.

    Why: ``'[' * 200000`` in a received ``summary.json``, ``metrics.jsonl`` or ``sweep.json`` raised RecursionError,
    which every reader's ``except ValueError`` let through as a traceback from ``status``, ``report`` and ``analyze``.
    The depth is counted before parsing, so it is never Python's stack that refuses it (see :data:`MAX_JSON_DEPTH`)."""
    import json

    if isinstance(text, (bytes, bytearray)):  # as json.loads reads bytes: UTF-8, -16 or -32, told by the first bytes
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"not JSON (lists or objects nested too deeply: more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(text)
    except RecursionError:  # within the bound, but called with Python's stack already nearly full
        raise ValueError("not JSON (lists or objects nested too deeply)") from None


class ConfigError(ValueError):
    """A bad user-supplied value: names the field and what is allowed.

    ``field`` and ``message`` keep the raw text; ``str()`` escapes control
    characters, because a key or value from a hostile file must not be able to
    turn the CLI's one error line into several (or into terminal escapes).
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{one_line(field)}: {one_line(message)}")

    def __reduce__(self) -> tuple[object, tuple[type[ConfigError], dict[str, object]]]:
        """Pickled by its attributes, whatever a subclass's ``__init__`` takes: a worker process or a Ray actor sends it
        back to the run as the same one-line error (same class, field and message)."""
        return (rebuilt_error, (type(self), dict(self.__dict__)))


class DataAbsent(ConfigError):
    """The dataset's files are not on this machine and cannot be fetched now (the hub is offline or unreachable).

    A ``--dry-run`` then checks names and options only, as it does when ``data_dir`` lacks a dataset's files
    (which stay a plain ConfigError on ``data_dir``): the config may be right for the machine it will run on.
    """


class Unreachable(Exception):
    """A source the run reads cannot be reached now (the Hugging Face hub without network): the input may be right.

    Not a :class:`ConfigError` (exit 2, bad input): one line and exit 1, as ``chillfl data download`` without network.
    ``field`` names the option that asked for the source (``dataset.path``), so the line says what to change to run
    without it; a ``--dry-run`` treats it as :class:`DataAbsent` (names and options checked, the files absent).
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(field, message)

    def __str__(self) -> str:
        return f"{one_line(self.field)}: {one_line(self.message)}"


def rebuilt_error(cls: type[ConfigError], state: dict[str, object]) -> ConfigError:
    """The unpickled error: :class:`ConfigError`'s own set-up from the saved field and message, then the rest of its
    attributes. Also how a Flower node's error is raised again on the server (:class:`~chillfl.flower.wire.Refusal`),
    whose message carries no pickle: a subclass's ``__init__`` takes other arguments than ``(field, message)``."""
    error = cls.__new__(cls)
    ConfigError.__init__(error, str(state["field"]), str(state["message"]))
    error.__dict__.update(state)
    return error


SHORT_NAME = 5
"""Typed names shorter than this are matched by :func:`did_you_mean` on edits, not on difflib's ratio."""


def did_you_mean(value: object, allowed: Iterable[object]) -> str:
    """``" (did you mean 'alpha'?)"`` for the closest allowed name to a typo, else ``""``.

    The same name in another case first (``Krum`` -> ``krum``). Then, for a name of :data:`SHORT_NAME` characters or
    more, difflib's ratio >= 0.6 (``scafold`` -> ``scaffold``, ``calib`` -> ``calibration``). A shorter one meets that
    ratio by chance (``foo`` and ``fedfomo`` share three letters: 0.6), so it needs one edit (a letter added, dropped,
    changed, or two neighbours swapped: ``ndt`` -> ``ntd``, ``muu`` -> ``mu``), or else to be part of one name only
    (``prox`` -> ``fedprox``); a one-letter name only the case.
    """
    match = closest_name(value, allowed)
    return f" (did you mean {match!r}?)" if match is not None else ""


def closest_name(value: object, allowed: Iterable[object]) -> str | None:
    """The allowed name :func:`did_you_mean` suggests for ``value``, None for none (or when ``value`` is allowed as it is).

    For a message that suggests more than the name (a whole import path: :func:`chillfl.plugins.load_object`).
    """
    if not isinstance(value, str):
        return None
    names = [str(a) for a in allowed]
    return _closest(value, names) if value not in names else None


def _closest(value: str, names: list[str]) -> str | None:
    """The allowed name :func:`did_you_mean` suggests for ``value`` (not itself one of ``names``), None for none."""
    folded = value.casefold()
    same = [n for n in names if n.casefold() == folded]
    if same:
        return same[0]
    if len(value) >= SHORT_NAME:
        close = difflib.get_close_matches(value, names, n=1) or difflib.get_close_matches(folded, [n.casefold() for n in names], n=1)
        return next((n for n in names if n.casefold() == close[0].casefold()), close[0]) if close else None
    near = [n for n in names if len(value) > 1 and one_edit(folded, n.casefold())]
    if near:  # the most alike by difflib's ratio; a tie by name, so the order of ``names`` decides nothing
        return min(near, key=lambda n: (-difflib.SequenceMatcher(None, folded, n.casefold()).ratio(), n))
    holding = [n for n in names if len(value) > 2 and folded in n.casefold()]
    return holding[0] if len(holding) == 1 else None


def one_edit(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter added, dropped or changed, or two neighbouring letters swapped (False for
    ``a == b``). The one typo matcher: :func:`did_you_mean` and :func:`chillfl.training.local.misspelt_flag` use it."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if len(a) != len(b):  # the first difference is the added (or dropped) letter
        return a[start:] == b[start + 1 :] if len(b) > len(a) else a[start + 1 :] == b[start:]
    swapped = a[start : start + 2] == b[start : start + 2][::-1]
    return a[start + 1 :] == b[start + 1 :] or (swapped and a[start + 2 :] == b[start + 2 :])


def choice_error(field: str, value: object, allowed: list[str] | tuple[str, ...]) -> ConfigError:
    """Error for an unknown name, listing the valid ones (and the closest, for a typo)."""
    return ConfigError(field, f"unknown value {value!r}{did_you_mean(value, allowed)}; allowed: {', '.join(sorted(allowed))}")


DIVERGED_EXIT = 3
"""The CLI's exit status when a run diverges (a loss, parameter or metric turned non-finite)."""

LOSS_HINT = "lower client.lr, or check the options that scale the loss or the data: client.weight_decay, a method's or term's weight, the partition's noise"
"""The hint of a non-finite loss whose cause is not known. Why: "lower client.lr?" alone blamed the lr where
``client.weight_decay``, a method's loss weight or a partition's noise blew it up (fuzzing found each)."""


def loss_hint(suspects: Sequence[str] = ()) -> str:
    """:data:`LOSS_HINT`, led by what this run adds that can blow a loss up by itself (``suspects``, each a whole
    clause: ``[privacy]``'s noise, an attack), so that a blow-up caused by ``privacy.noise_multiplier`` is not sent
    to ``client.lr`` alone; none: the plain hint."""
    return "; ".join([*suspects, f"or {LOSS_HINT}"]) if suspects else LOSS_HINT


class Diverged(ArithmeticError):
    """Training produced a non-finite value: names the round (1-based), the client when known, and what."""

    def __init__(self, round: int, what: str, client: int | None = None) -> None:
        self.round, self.what, self.client = round, what, client
        self.stop_signal: int | None = None
        """A stop signal that came during the run that diverged (``runner._Signals``): a comparison, which goes on past
        a diverged run, passes it on once the run is recorded, so the stop asked for is not lost."""
        where = f"round {round}" + (f", client {client}" if client is not None else "")
        super().__init__(f"{where}: {what}")


class SweepFailed(RuntimeError):
    """Every run of a comparison diverged or failed: nothing to tabulate (the CLI exits :data:`DIVERGED_EXIT`).

    ``folder``: where the runs' partial results are (None without a result folder).
    """

    def __init__(self, message: str, folder: object = None) -> None:
        super().__init__(message)
        self.folder = folder


class ComparisonInterrupted(KeyboardInterrupt):
    """A signal stopped a comparison where no run held it (between two runs, or once a run had done its rounds).

    ``folder``: the comparison's ``.partial`` folder, so the CLI's one line says which folder ``chillfl resume``
    goes on with; the signal's own exception (SIGINT's KeyboardInterrupt, the CLI's SIGTERM/SIGHUP kin) is its cause.
    """

    def __init__(self, folder: Path) -> None:
        super().__init__(str(folder))
        self.folder = folder


class InterruptedAfterRun(KeyboardInterrupt):
    """A signal came once a run had done its rounds: the run completed first (its folder is final, nothing to resume),
    then the signal ended the command. Not the generic "*.partial folders" line: that one would send the user looking for
    a ``.partial`` folder that is not there.

    ``folder``: the run's final folder (None for a run that writes none); the signal's own exception is its cause.
    ``output``: the run's :class:`~chillfl.runner.RunOutput` (None where the run's table was being printed, the CLI's) and
    ``result``: :func:`chillfl.run`'s / :func:`chillfl.resume`'s :class:`~chillfl.api.Result` (None elsewhere): the complete
    run, which a caller would otherwise lose with the return value.
    """

    def __init__(self, folder: Path | None, output: Any = None) -> None:
        super().__init__(str(folder))
        self.folder = folder
        self.output = output
        self.result: Any = None


class RunNotStarted(KeyboardInterrupt):
    """A signal stopped a fresh run before its rounds began (while its data and model were built, or its folder made):
    the folder, if made, was removed again, so there is nothing to resume. The signal's own exception is its cause.

    ``what``: what had not started, for the CLI's line: ``"run"``, ``"comparison"`` (stopped before its folder was made),
    or None for a command that writes no run (``report``, ``data show``, ``analyze``): only that nothing was written.
    """

    def __init__(self, what: str | None = "run") -> None:
        super().__init__(what or "")
        self.what = what


def signal_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The stop signal's exception that ``exc`` was raised from (its ``__cause__`` chain), if one was.

    Why: third-party code can wrap the exception of a signal that lands inside it. Python 3.11 reports one raised in a
    class body's ``__set_name__`` (torch's and numpy's lazily imported modules have such classes) as ``RuntimeError:
    Error calling __set_name__``, from the KeyboardInterrupt: the command is stopped all the same, not failed.
    """
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__
    return None


class StorageError(OSError):
    """The run folder could not be written (disk full, I/O error, file system gone read-only).

    One line for the CLI (exit 1): what could not be written and why; the runner
    adds which checkpoint is kept. Not a :class:`ConfigError`: the input was fine; an
    OSError, so that code catching those still catches it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class MissingExtra(ConfigError):
    """An optional dependency is not installed: one line naming the extra that brings it.

    A :class:`ConfigError` (field = the extra), so every path that turns user
    errors into exit 2 with nothing written handles it too; ``str()`` reads
    ``matplotlib is needed for plots: pip install "chillfl[plots]"``: the package leads, so the line reads right
    whatever ``what`` is (``plots``, ``[privacy]``, ``reading the LEAF parquet files``).
    """

    def __init__(self, what: str, module: str, extra: str) -> None:
        self.what, self.module, self.extra = what, module, extra
        super().__init__(extra, f"{module} is needed for {what}: pip install \"chillfl[{extra}]\"")

    def __str__(self) -> str:
        return one_line(self.message)


@contextlib.contextmanager
def stopped_as(stopped: Callable[[], KeyboardInterrupt]) -> Iterator[None]:
    """A stop signal in the block, or its exception that a package wrapped (:func:`signal_in`), raised as ``stopped()``
    from it: what a command's start says it had not yet done (:class:`RunNotStarted`) or how to go on
    (:class:`ComparisonInterrupted`). One that says so already passes as it is."""
    try:
        yield
    except (RunNotStarted, ComparisonInterrupted):
        raise
    except (KeyboardInterrupt, Exception) as exc:
        signalled = exc if isinstance(exc, KeyboardInterrupt) else signal_in(exc)
        if signalled is None:
            raise
        raise stopped() from signalled
