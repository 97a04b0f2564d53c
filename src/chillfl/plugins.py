"""Methods from outside the package: ``"pkg.module:Name"`` import paths and the ``chillfl.plugins`` entry points.

A config may name a user's aggregator by import path::

    [algorithm]
    name = "mypkg.robust:GeometricMedian"
    eps = 1e-6            # the class's own options, validated like a built-in's

and an installed distribution may register names under the entry-point group
``chillfl.plugins`` (``[project.entry-points."chillfl.plugins"] mymethod =
"mypkg.robust:GeometricMedian"``), which then show in ``chillfl list`` and are
used as ``name = "mymethod"``. The same works for temperature policies
(``[temperature] policy = ...``), soft-label methods (``[distillation]
method = ...``), models (``[model] name = ...``), partitioners
(``[partition] name = ...``) and datasets (``[dataset] name = ...``); ``chillfl list`` shows each entry point under the part its
object belongs to. Nothing is registered in a global table: a name is
resolved where it is read, every time.

This module only finds and imports the named object; what it must be (an
aggregator class, or an :class:`~chillfl.aggregation.registry.AlgorithmSpec`)
is checked by the registry that reads it. A path that cannot be imported is
one :class:`~chillfl.errors.ConfigError` line naming the field.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import importlib
import inspect
import logging
import os
import pkgutil
import re
import sys
from types import FrameType
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any, Callable, Collection, Generic, Iterator, Mapping, Sequence, TypeVar

from chillfl.capabilities import declared
from chillfl.errors import ConfigError, choice_error, closest_name, signal_in
from chillfl.once import warn_once
from chillfl.options import short_repr

log = logging.getLogger(__name__)

GROUP = "chillfl.plugins"
_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")

CUSTOM = "custom"
"""``model.name`` / ``dataset.name`` of a run given a user's own ``nn.Module`` / tensors from Python
(:func:`chillfl.api.run`): the saved config says what ran, and a config file cannot rebuild it."""


def is_custom(name: object) -> bool:
    """``custom`` (or ``custom:<label>``): a part that came from Python, not from a registry."""
    return isinstance(name, str) and (name == CUSTOM or name.startswith(CUSTOM + ":"))


class PluginNotImported(ConfigError):
    """A name that only a plugin's code could answer (an import path or an entry point), met while a results folder is read
    as data (:func:`reading_data`): that code is not imported. ``name``: the name as written."""

    def __init__(self, field: str, name: str, command: str, hint: str = "") -> None:
        self.name, self.command = name, command
        super().__init__(field, f"{name!r} is plugin code that a results folder names; {command} reads the folder as data and imports none of it{hint}")


_READING: contextvars.ContextVar[tuple[str, str, list[tuple[str, str]]] | None] = contextvars.ContextVar("chillfl_reading_data", default=None)
"""While a results folder is read as data: what reads it and a hint (for the message), and the (field, name)s refused so far."""


@contextmanager
def reading_data(command: str, hint: str = "") -> Iterator[list[tuple[str, str]]]:
    """Read result folders as data while the block runs: a plugin a saved config names (``"pkg.mod:Name"``, an entry point)
    is not imported but a :class:`PluginNotImported` on its field, and listings name the built-ins only.

    Why: a results folder may come from anyone, and under ``python -m chillfl`` the working directory (often that folder)
    is on the import path: reading it must not run a module, or an entry point's ``.dist-info``, shipped beside it. The
    readers that can go on without the part (the report's figures, ``status``) do; yields the (field, name)s refused, for
    their one-line note. ``command``: what reads (``chillfl report``), named in the refusal; ``hint``: appended to it.
    """
    refused: list[tuple[str, str]] = []
    token = _READING.set((command, hint, refused))
    try:
        yield refused
    finally:
        _READING.reset(token)


_BUILT_INS_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("chillfl_built_ins_only", default=False)
"""While set (:func:`built_ins_only`), :func:`plugin_names` lists no entry point of a part: none is imported to tell."""


@contextmanager
def built_ins_only() -> Iterator[None]:
    """List the built-ins alone while the block runs (:func:`plugin_names` imports no entry point to tell its part).

    Why: telling the parts apart imports every ``chillfl.plugins`` entry point's module, and a config's ``[privacy]`` or
    ``[attack]`` table that is off still lists keys (every saved ``config.toml`` does), whose owners were looked up among
    every spec: parsing a plain fedavg folder (``chillfl.load_run``, ``run --dry-run``) imported every installed plugin, and
    under ``python -m`` or in a notebook one that a received folder ships in a ``.dist-info`` beside itself. A reader
    looks among the built-ins first and at the plugins only for a key no built-in takes (:class:`~chillfl.settings.chosen.Choice`).
    """
    token = _BUILT_INS_ONLY.set(True)
    try:
        yield
    finally:
        _BUILT_INS_ONLY.reset(token)


def refuse_plugin(field: str, name: str) -> None:
    """Raise :class:`PluginNotImported` for ``name`` on ``field`` while a folder is read as data (:func:`reading_data`); else nothing."""
    reading = _READING.get()
    if reading is not None:
        command, hint, refused = reading
        if (field, name) not in refused:
            refused.append((field, name))
        raise PluginNotImported(field, name, command, hint)


def is_import_path(name: str) -> bool:
    """Whether ``name`` reads as ``module.path:Attribute`` (a user's object) rather than a registered name."""
    return ":" in name


def load_object(path: str, field: str) -> Any:
    """The object ``path`` = ``"pkg.module:Name"`` names; a ConfigError on ``field`` when it cannot be imported."""
    if not _PATH.match(path):
        raise ConfigError(field, f"{path!r} is not an import path; write 'package.module:Name'")
    module_name, _, attribute = path.partition(":")
    if module_name != "chillfl" and not module_name.startswith("chillfl."):  # a built-in is chillfl's own code, not the folder's
        refuse_plugin(field, path)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module: any error while importing it is a bad config value
        raise ConfigError(field, f"cannot import module {module_name!r} of {path!r} ({type(exc).__name__}: {exc}){_in_this_folder(module_name, exc)}") from None
    parts = attribute.split(".")
    for i, part in enumerate(parts):
        if not hasattr(obj, part):
            raise ConfigError(field, f"module {module_name!r} has no attribute {attribute!r}{_nearest_attribute(obj, module_name, parts[:i], part)}")
        obj = getattr(obj, part)
    return obj


def _nearest_attribute(obj: object, module_name: str, before: list[str], missing: str) -> str:
    """``" (did you mean 'pkg.mod:FEDDYN'?)"`` for a typo in an import path's attribute (``pkg.mod:FEDDYM``), else ``""``.

    Why: the path is typed by hand in a config, and the module's own names are at hand here. The whole path is
    suggested, so that it can be pasted back; only public names (no leading ``_``) are offered.
    """
    match = closest_name(missing, [n for n in dir(obj) if not n.startswith("_")])
    return "" if match is None else f" (did you mean {module_name + ':' + '.'.join([*before, match])!r}?)"


def _in_this_folder(module_name: str, exc: Exception) -> str:
    """A hint when the missing module is a file or package in the working directory, which is not on the import path.

    The ``chillfl`` script starts with its own folder on ``sys.path``, not the working directory (``python -m
    chillfl`` puts it there): a plugin beside the config imports under one and not the other. Not added to the
    path here: a stray ``torch.py`` in a results folder would then shadow torch.
    """
    top = module_name.split(".")[0]
    missing = isinstance(exc, ModuleNotFoundError) and exc.name == top
    here = Path.cwd()
    if not missing or not ((here / f"{top}.py").is_file() or (here / top / "__init__.py").is_file()):
        return ""
    return f"; {top!r} is in the working directory, which is not on the import path: run PYTHONPATH=. chillfl ... (only in a folder of your own: its every module then imports first)"


def entry_points() -> dict[str, str]:
    """Name -> import path of every ``chillfl.plugins`` entry point of the installed distributions."""
    return dict(_entry_points(_import_path_state()))


def _import_path_state() -> tuple[tuple[str, int, int], ...]:
    """Each ``sys.path`` folder (the working directory for ``""``) with its modification time and link count: installing
    or removing a distribution adds or removes a ``.dist-info`` folder there, which changes both, and so the cache's key."""
    state = []
    for entry in sys.path:
        try:
            folder = os.path.abspath(entry or os.getcwd())
            found = os.stat(folder)
            state.append((folder, found.st_mtime_ns, found.st_nlink))
        except OSError:
            state.append((entry, -1, -1))
    return tuple(state)


@functools.lru_cache(maxsize=8)
def _entry_points(state: tuple[tuple[str, int, int], ...]) -> tuple[tuple[str, str], ...]:
    """The entry points while the import path is in ``state``: scanning every distribution's metadata took 22 ms, and
    validating a config asks once per option table (the catalogue's 568 variants spent 5 minutes here)."""
    return tuple((ep.name, ep.value) for ep in metadata.entry_points(group=GROUP))


def plugin_names(accepts: Callable[[Any], bool] | None = None, built_ins: Collection[str] = (), what: str = "") -> list[str]:
    """Entry-point names, or those whose object ``accepts`` takes (each registry passes its own test: an
    aggregator, a temperature policy, a soft-label method), so that ``chillfl list`` shows each under its part.

    An entry point whose module cannot be imported is left out of every part, with one warning naming it (``chillfl list``
    lists it apart, :func:`unusable_plugins`); one of
    this part named like one of its ``built_ins`` (named by the config key ``what``) is warned about as
    :func:`warn_if_shadowed` does.
    """
    names = sorted(entry_points())
    if accepts is None:
        return names
    if _READING.get() is not None or _BUILT_INS_ONLY.get():  # telling the parts apart imports each entry point: a folder read as data lists the built-ins
        return []
    out = []
    for name in names:
        try:
            obj = load_object(entry_points()[name], f"plugin {name!r}")
        except ConfigError as exc:
            warn_once(log, str(exc))  # each part asks (chillfl list asks seven): one warning per broken entry point, not one per part
            continue
        if accepts(obj):
            out.append(name)
            if name in built_ins:
                warn_if_shadowed(name, what, accepts, built_ins[name] if isinstance(built_ins, Mapping) else None)
    return out


def unusable_plugins(usable: Collection[str]) -> list[tuple[str, str]]:
    """Each ``chillfl.plugins`` entry point that no part lists, with why in one line: the error importing its object,
    or what that object is. ``usable``: every name the parts list (built-ins and the entry points they take).

    Why: ``chillfl list`` left such an entry point out without a word in its listing (an object of no part: not a
    word at all), and its author looked for the name in vain; naming it in a config gives the same reason as an error.
    Nothing is imported while a results folder is read as data (:func:`reading_data`).
    """
    if _READING.get() is not None:
        return []
    out = []
    for name, path in sorted(entry_points().items()):
        try:  # even under a listed name: a broken entry point named like a built-in is listed only as the built-in
            obj = load_object(path, f"plugin {name!r}")
        except ConfigError as exc:
            out.append((name, exc.message))
            continue
        if name in usable:
            continue
        out.append((name, f"{path} is {short_repr(obj)} ({type(obj).__name__}), which no part takes: name a spec of "
                          "chillfl.extend, or a class or builder of a part (docs/extending.md)"))
    return out


def warn_if_shadowed(name: str, what: str, accepts: Callable[[Any], bool], built_in: object = None) -> None:
    """One warning a process when a ``chillfl.plugins`` entry point of this part (``accepts`` takes its object) has the
    name of a built-in, which ``name`` in the config key ``what`` always means: the entry point is never used.
    ``built_in``: what the registry holds under ``name`` (None: not known); none when it is the plugin's own
    (:func:`registered_by_plugin`).

    Why: a built-in name is looked up first, so the plugin's method never ran, without a word, under a name its
    author meant for it (an entry point of another part with that name is no clash: it is found in its own table).
    Nothing is imported while a results folder is read as data (:func:`reading_data`).
    """
    path = entry_points().get(name)
    if path is None or _READING.get() is not None or _BUILT_INS_ONLY.get():  # nothing imported to tell: built_ins_only
        return
    try:
        loaded = load_object(path, f"plugin {name!r}")
        if not accepts(loaded):
            return
    except ConfigError:  # broken: plugin_names says so where the names are listed
        return
    if built_in is not None and registered_by_plugin(path, loaded, built_in):
        return
    message = (f"{what}: chillfl.plugins entry point {name!r} ({path}) has the name of a built-in, which {name!r} keeps "
               "meaning: the entry point is never used; give it another name")
    warn_once(log, message)


def registered_by_plugin(path: str, loaded: object, built_in: object) -> bool:
    """Whether ``built_in``, what a registry holds under an entry point's name, is that plugin's own registration: the
    very object the entry point (``path``) loads (``my_rule = "pkg.rules:SPEC"``, where ``SPEC = register_algorithm(
    "my_rule", ...)``), or one the entry point's module holds (the entry point names the class its registered spec
    ``makes``) and no ``chillfl`` module does (a plugin module that imports a built-in's spec does not own it).

    Why: docs/extending.md tells a plugin to register its spec in the module that defines its class, and the entry
    point of that name then imports it; warning that the entry point "is never used" was false on every listing and run.
    """
    if loaded is built_in:
        return True
    module = sys.modules.get(path.partition(":")[0])
    if module is None or not any(value is built_in for value in list(vars(module).values())):
        return False
    return not any(any(value is built_in for value in list(vars(held).values()))
                   for known, held in list(sys.modules.items()) if held is not None and (known == "chillfl" or known.startswith("chillfl.")))


def has_methods(obj: Any, methods: Sequence[str]) -> bool:
    """Whether ``obj`` (a class) has every one of ``methods``: how a registry recognises a user's class."""
    return isinstance(obj, type) and all(callable(getattr(obj, m, None)) for m in methods)


def check_constructor(cls: type, with_options: bool, name: str, field: str) -> None:
    """A ConfigError on ``field`` when a user's class cannot be built the documented way: ``cls(options)`` when it declares
    an ``Options`` dataclass, ``cls()`` otherwise. Found when the config is read, not as a TypeError once the run is built."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # no signature to read (a builtin type): building it will tell
        return
    try:
        signature.bind(*((None,) if with_options else ()))
    except TypeError as exc:
        how = f"{cls.__name__}(options), as it declares an Options dataclass" if with_options else f"{cls.__name__}(), as it declares no Options dataclass"
        raise ConfigError(field, f"{name!r} is built as {how}, which its __init__ does not take ({exc})") from None


Hook = tuple[str, object, tuple[str, ...]]
"""One hook of a spec: (its field, the hook or None when absent, the parameters the runtime calls it with)."""


@contextmanager
def building(name: object, field: str, built_in: bool, called: str = "") -> Iterator[None]:
    """Build a part of family ``field`` inside the block: a plugin's (import path, entry point) constructor or builder
    that raises is one line on ``field`` -- its code refused this input -- not a traceback. A built-in's error is
    raised as it is (a slip of ours to see), and so is a stop signal (:func:`~chillfl.errors.signal_in`): neither is
    the plugin's. ``called``: how the plugin was called, said in the line (e.g. " for inputs of shape (1, 8, 8)")."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's constructor: any error is its refusal of this input
        if built_in or signal_in(exc) is not None:
            raise
        raise ConfigError(field, f"{name!r} fails to build{called}: {type(exc).__name__}: {exc}") from None


def check_hooks(name: object, hooks: Sequence[Hook], field: str) -> None:
    """A ConfigError on ``field`` when a hook of spec ``name`` cannot take the parameters the runtime calls it with.

    Why: the families' hooks differ (an algorithm's ``check(options, config, section)``, an attack's ``check(options,
    config)``); a hook written for the other was a TypeError traceback once the first run called it. Checked where a
    spec is read (a plugin's and a built-in's alike), before anything is built or written.
    """
    for hook_field, hook, parameters in hooks:
        if hook is None:
            continue
        call = f"{hook_field}({', '.join(parameters)})"
        if not callable(hook):
            raise ConfigError(field, f"{name!r}: its spec's {hook_field} must be a function called as {call}, got {short_repr(hook)}")
        try:
            refused = _refused_call(hook, parameters)
        except TypeError:  # an unhashable callable: not cached
            refused = _refused_call.__wrapped__(hook, parameters)
        if refused is not None:
            raise ConfigError(field, f"{name!r}: its spec's {hook_field} is called as {call}, which {refused} does not take")


Call = tuple[str, tuple[str, ...]]
"""One method a run calls on a part it was given (an aggregator, a client half, a policy, a term): (its name, the
arguments the runtime passes it, positionally)."""


def check_calls(obj: object, calls: Sequence[Call], field: str) -> None:
    """A ConfigError on ``field`` when a method of ``obj``, a built part, cannot take the arguments the runtime passes it.

    Why: a hook that exists with the wrong parameters (``aggregate(self, global_params, results)``, no ``round``) passed
    every check that it exists, and the run then wrote its folder and stopped at round 1 with a TypeError traceback from
    inside chillfl. Read from the bound method (``self`` already given), so that extra parameters with defaults,
    ``*args`` and ``**kwargs`` pass as a call would; a method absent here is refused where the part is recognised.
    ``__call__`` is read on ``obj`` itself when it is a function or a ``functools.partial`` (whose own ``__call__`` is a
    wrapper taking anything, so a function term's parameters went unchecked), and on ``obj.__call__`` for any other
    instance: ``inspect.signature`` of an instance drops the first parameter of a ``staticmethod`` ``__call__`` and
    follows an instance's ``__wrapped__`` (a class-based decorator's ``functools.update_wrapper(self, fn)``) to a
    function Python never calls with the run's arguments; both were refused though they ran.
    """
    for method, parameters in calls:
        itself = method == "__call__" and _is_function_like(obj)
        bound = obj if itself else getattr(obj, method, None)
        if not callable(bound):
            continue
        try:
            signature = inspect.signature(bound, follow_wrapped=_is_function_like(bound))  # an instance's __wrapped__ is not what runs
        except (TypeError, ValueError):  # no signature to read (a builtin): calling it will tell
            continue
        try:
            signature.bind(*parameters)
        except TypeError:
            if _binds_unwrapped(bound, parameters):  # a decorator (functools.wraps) that supplies an argument itself: a call tells
                continue
            empty = inspect.Parameter.empty
            written = signature.replace(parameters=[p.replace(annotation=empty) for p in signature.parameters.values()], return_annotation=empty)
            who = obj.__qualname__ if bound is obj and inspect.isroutine(obj) else f"{type(obj).__name__}.{method}"  # a function term by its name
            raise ConfigError(field, f"{who}{written} cannot be called as {method}({', '.join(parameters)}), "
                                     "as the run calls it") from None


def _is_function_like(obj: object) -> bool:
    """Whether ``obj`` is a function, a method or a ``functools.partial``: what ``inspect.signature`` reads as it runs.
    Any other callable is an instance, run through its class's ``__call__``."""
    return inspect.isroutine(obj) or isinstance(obj, functools.partial)


def _binds_unwrapped(bound: Callable[..., Any], parameters: tuple[str, ...]) -> bool:
    """Whether a decorated hook may still be called with ``parameters`` though the function it wraps (the signature
    ``functools.wraps`` hands on) cannot.

    An adapter, whose own named parameters take every argument (none left to its ``*args``/``**kwargs``), may call the
    wrapped function as it likes (drop ``round``, say): accepted, as a call would be. A pass-through (``*args,
    **kwargs``: a timer's), or a wrapper that hands some arguments on through them (``(self, global_params, *args,
    **kwargs)``), passes them to the wrapped function, so that must take them: a missing ``round`` is refused, though
    it may lack arguments the decorator supplies itself (``bind_partial``). One behind torch's ``no_grad()``, which
    supplies none, is checked as the wrapped function (:func:`_supplies_nothing`). Only a function's or a method's
    ``__wrapped__`` is followed: a callable instance's names a function its ``__call__`` need not pass anything on to."""
    if _supplies_nothing(bound) or not _is_function_like(bound):
        return False
    try:
        own = inspect.signature(bound, follow_wrapped=False)
        passed_on = {p.name for p in own.parameters.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        if not passed_on & set(own.bind(*parameters).arguments):
            return True  # its named parameters take the whole call: what it hands the wrapped function is its own
        inspect.signature(bound).bind_partial(*parameters)  # handed on: more than the wrapped takes is a TypeError
    except (TypeError, ValueError):
        return False
    return True


_PASS_THROUGH_MODULES = ("torch.utils._contextlib",)
"""Modules whose decorators only pass a call on (``torch.no_grad()``, ``torch.enable_grad()``, ``torch.inference_mode()``:
``decorate_context``): a hook behind one is checked as the function it wraps."""


def _supplies_nothing(bound: Callable[..., Any]) -> bool:
    """Whether ``bound``'s wrapper is one of :data:`_PASS_THROUGH_MODULES`' decorators, which supply no argument.

    Why: its own signature is ``(*args, **kwargs)``, as a decorator's that does supply one (a timer's ``clock=``), so
    ``@torch.no_grad()`` on ``aggregate(..., round, extra)`` passed the check and was a TypeError at round 1. Told by
    the file of the wrapper's code (``functools.wraps`` copies ``__module__`` from the wrapped function)."""
    function = bound.__func__ if inspect.ismethod(bound) else bound if inspect.isroutine(bound) else type(bound).__call__  # a term: its class's
    if not inspect.isfunction(function):
        return False
    files = {module.__file__ for name in _PASS_THROUGH_MODULES if (module := sys.modules.get(name)) is not None}
    return function.__code__.co_filename in files


def missing_hooks(obj: object, methods: Sequence[str]) -> list[str]:
    """The ``methods`` that instance ``obj`` cannot be called with: read on the instance, so hooks it sets itself or
    forwards (a proxy's ``__getattr__``) count; a class lacks them all (its methods are not bound: call it)."""
    if isinstance(obj, type):
        return list(methods)
    return [m for m in methods if not callable(getattr(obj, m, None))]


def instance_only_hooks(obj: object, methods: Sequence[str]) -> list[str]:
    """The ``methods`` instance ``obj`` answers but its class does not define: set on the instance or forwarded through
    ``__getattr__`` (a proxy). Why: a run checks and binds a part by its class (the spec that makes it, its declared
    capabilities), so a proxy's class hides the rule it runs from every check (SCAFFOLD ran with Adam behind one)."""
    return [m for m in methods if callable(getattr(obj, m, None)) and not callable(getattr(type(obj), m, None))]


def refuse_bad_registration(name: object, spec: object, spec_type: type, helper: str) -> None:
    """A TypeError or ValueError naming the argument when ``helper`` (``register_algorithm``) is given a name no config can
    write or a spec not of ``spec_type``; raised before the registry is touched.

    Why: ``register_algorithm(3, spec)`` was accepted, and every later listing and every misspelt name's suggestion then
    failed with a TypeError comparing an int to a str, far from the cause; a str spec failed with an AttributeError.
    """
    check_name(name, helper)
    if not isinstance(spec, spec_type):
        raise TypeError(f"{helper}: spec must be a chillfl.extend.{spec_type.__name__}, got {short_repr(spec)} ({type(spec).__name__})")


def check_name(name: object, helper: str) -> None:
    """A TypeError when a registered ``name`` is not a str, a ValueError when it is empty or holds whitespace (a config
    names it in one word), as a name registered twice is refused."""
    if not isinstance(name, str):
        raise TypeError(f"{helper}: name must be a str, got {short_repr(name)} ({type(name).__name__})")
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"{helper}: name must be a non-empty word without whitespace, got {name!r}")


def check_spec_parts(name: object, options: object, summary: object, kind: str, field: str) -> None:
    """A ConfigError on ``field`` when spec ``name`` (a ``kind``, ``AlgorithmSpec``) has ``options`` that are not a dataclass
    class, or a ``summary`` that is not a str. Why: every option table is parsed against that class, and a dict, None or
    an instance there was a TypeError traceback from deep in the parser; a class's nested ``Options`` was already one line."""
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(field, f"{name!r}: its {kind}'s options must be a dataclass (the class, not an instance), got {short_repr(options)}")
    if not isinstance(summary, str):
        raise ConfigError(field, f"{name!r}: its {kind}'s summary must be a str, got {short_repr(summary)}")


@functools.lru_cache(maxsize=4096)
def _refused_call(hook: Callable[..., Any], parameters: tuple[str, ...]) -> str | None:
    """``hook``'s name and signature when it cannot be called with ``parameters``, else None (also when it has no
    signature to read, a builtin: calling it will tell). Cached: a spec is read once per option table validated."""
    try:
        signature = inspect.signature(hook)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*parameters)
    except TypeError:
        if _binds_unwrapped(hook, parameters):  # a decorator that supplies an argument itself (functools.wraps)
            return None
        return f"{getattr(hook, '__qualname__', type(hook).__name__)}{signature}"
    return None


def resolve(name: str, field: str) -> Any | None:
    """The object ``name`` refers to: an import path, or an entry point's target; None when it is neither."""
    if is_import_path(name):
        return load_object(name, field)
    path = entry_points().get(name)
    if path is not None:
        refuse_plugin(field, name)  # the entry point's name, as the folder wrote it
    return None if path is None else load_object(path, field)


def look_up(name: object, field: str, registered: Mapping[str, Any], accepts: Callable[[Any], bool], names: Callable[[], list[str]],
            user: Callable[[Any, Any, str], Any]) -> Any:
    """A part's spec: built-in ``name`` from ``registered``, else the user's object it names (import path, entry point)
    made a spec by ``user(obj, name, field)``; a ConfigError on ``field`` listing ``names()`` when it names nothing.

    Why one home: every part looks up in the same order (a built-in first, so an entry point with a built-in's name is
    warned about and never used, :func:`warn_if_shadowed`), and a plugin part meets the same rules as every other.
    """
    if isinstance(name, str) and name in registered:
        found = registered[name]
        warn_if_shadowed(name, field, accepts, found)
        return found
    found = resolve(name, field) if isinstance(name, str) and name else None
    if found is None:
        raise choice_error(field, name, names())
    return user(found, name, field)


@dataclass(frozen=True)
class Unread:
    """A plugin's own options as a results folder wrote them, kept unparsed while the folder is read as data
    (:func:`reading_data`): its options dataclass is the plugin's code. Written back as they were."""

    name: str
    table: Mapping[str, Any]


T = TypeVar("T")


class Registry(Generic[T]):
    """Specs named next to their code: each built-in module calls :meth:`register` at import.

    ``modules``: what registers the built-ins: a package (every module of it, so a new built-in module needs no
    list edited) or single modules. A lookup (:meth:`get`) imports the package's module named after the name
    first and every module only when that one does not register it; a listing imports every module. A name
    registered twice from two modules is a programming error: two methods would answer to it. Registered again from
    the module that registered it (a notebook cell run again, ``importlib.reload`` or ``%autoreload`` of a plugin
    module), the new spec replaces the old one: the module's new code is what the name means now.
    """

    def __init__(self, what: str, *, package: str | None = None, modules: Sequence[str] = ()) -> None:
        self.what = what
        self.package = package
        self.modules = tuple(modules)
        made_in = sys._getframe(1)
        while made_in.f_back is not None and made_in.f_globals.get("__name__") == "typing":  # Registry[T](...) is called through typing
            made_in = made_in.f_back
        self._owner = str(made_in.f_globals.get("__name__", ""))  # the register_* helper's module (:meth:`_home`)
        self._specs: dict[str, T] = {}
        self._homes: dict[str, str] = {}  # who registered each name (:meth:`_home`)
        self._loaded = False  # set only once every module is imported: a True read without the lock is final
        self._loading = False
        # Re-entrant: a module imported during the walk that looks a name up (same thread) must not deadlock, and
        # sees the partial registry; another thread waits for the walk instead of reading a half-filled one.
        self._lock = threading.RLock()

    def register(self, name: str, spec: T) -> T:
        """Name ``spec`` ``name``; returns ``spec`` (``SPEC = register_x("name", XSpec(...))``).

        A name already registered is replaced when the same module registers it again (its code re-run: a notebook
        cell, a reloaded module) and refused when another module does (see the class). chillfl's own modules register
        without a lock (a module registers while another thread may hold the walk's lock waiting on that import); a
        caller outside chillfl first loads the built-ins (:meth:`_load`, under that lock, which imports only chillfl's
        modules), so that a built-in's name is refused, not taken."""
        check_name(name, f"{self.what} registry")
        home = self._home()
        if is_import_path(name) and _chillfl_home(home):
            # :meth:`get` looks a "pkg.mod:Name" name up among the registered specs alone, importing no built-in module
            raise ValueError(f"{self.what} {name!r}: a built-in's name holds no ':' (a config reads it as an import path)")
        if not self._loaded and not _chillfl_home(home):
            # Built-ins load lazily: without this, a plugin registered first under a built-in's name took it without a
            # word (the run recorded the built-in's name) and the clash surfaced later, in a listing.
            self._load()
        if name in self._specs and self._specs[name] is not spec and self._homes[name] != home:
            raise ValueError(f"{self.what} {name!r} is registered twice: by module {self._homes[name]!r} and again by "
                             f"module {home!r} (only the module that registered a name may register it again, replacing it)")
        self._specs[name] = spec
        self._homes[name] = home
        return spec

    def registered(self, name: str) -> T | None:
        """The spec registered as ``name`` so far, importing nothing (what a ``register_*`` helper replaces)."""
        return self._specs.get(name)

    def _home(self) -> str:
        """Who registers: the first caller outside the registry and the ``register_*`` helper's module, and the module
        whose top-level code runs the registration (the nearest module-level frame: a plugin module being imported or
        reloaded, a notebook cell's ``__main__``). Both, since either alone let two plugins
        replace each other without a word: the caller alone made a helper module plugins register through
        (``mylib.reg(...)``) every plugin's home (rev104b), the top alone made two libraries' ``install()`` functions
        called from one script (or from threads, whose stack has no module frame) one home (rev104c). Said as the top
        module, ``"top (through caller)"`` where they differ."""
        frame: FrameType | None = sys._getframe(2)
        caller = top = ""
        while frame is not None:
            module = _module_name(frame)
            if not caller and module not in (__name__, self._owner):
                caller = module
            if frame.f_code.co_name == "<module>":
                top = module
                break
            frame = frame.f_back
        caller = caller or top  # the helper's module registering at its own top level
        top = top or caller  # a thread's stack: no module frame
        return top if caller == top else f"{top} (through {caller})"

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded or self._loading:
                return  # done by the thread we waited for, or a lookup from a module this thread's walk imports
            self._loading = True
            try:
                modules = list(self.modules)
                if self.package is not None:
                    package = importlib.import_module(self.package)
                    modules += [f"{self.package}.{m.name}" for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name)]
                for module in modules:
                    importlib.import_module(module)
                self._loaded = True  # a broken module leaves it False: it fails every lookup, not only the first
            finally:
                self._loading = False

    def specs(self) -> dict[str, T]:
        """Every registered spec by name, sorted (a copy: the registry changes through :meth:`register` only)."""
        self._load()
        return dict(sorted(self._specs.items()))

    def get(self, name: str) -> T | None:
        """The spec registered as ``name``, importing as little as it can: the package's module of that name first
        (most built-ins live in a module named after them), every module only when that one registers no such name.

        Why: a run needs one method's spec, and importing every module of ``chillfl.aggregation`` (64) took 65 ms
        of a 2-core CPU's start-up and 0.20 s of an H200 machine's (issue 39's start-up target). An import path
        (``"pkg.mod:Name"``) imports none: no built-in takes such a name (:meth:`register` refuses one from chillfl's
        code), so only a plugin, whose module registered it when imported, can hold it; looking one up walked every
        built-in module (0.3 s of each run of a plugin named by path, or of an instance whose ``built_by`` names one).
        The shadowing rules still hold: a plugin that registers loads the built-ins then (:meth:`register`), and an
        entry point's name, which holds no ``:``, takes the walk below.
        """
        if is_import_path(name):
            return self._specs.get(name)
        if name not in self._specs and not self._loaded and self.package is not None and name in package_modules(self.package):
            importlib.import_module(f"{self.package}.{name}")
        if name not in self._specs:
            self._load()
        return self._specs.get(name)

    def view(self) -> Mapping[str, T]:
        """The registry as a read-only mapping whose lookups go through :meth:`get` (what :func:`look_up` takes);
        listing it imports every module."""
        return _RegistryView(self)


def _module_name(frame: FrameType) -> str:
    """The name of the module whose code ``frame`` runs: for a module run with ``python -m pkg.mod``, its real name
    (``__spec__.name``), not ``__main__``. Why: its top level registered under ``__main__``, loading the built-ins
    first imported it again under its real name, and that copy's registration of the same name made the two clash
    (``python -m chillfl.plots.pa3fed`` always failed: "figure 'clp' is registered twice"). A script or a notebook
    (no ``__spec__``) stays ``__main__``."""
    module = str(frame.f_globals.get("__name__", ""))
    spec = frame.f_globals.get("__spec__") if module == "__main__" else None
    name = spec.name if isinstance(spec, ModuleSpec) else None
    return name if isinstance(name, str) and name else module


def _chillfl_home(home: str) -> bool:
    """Whether a :meth:`Registry._home` is chillfl's own code (a built-in registering at import), which needs no
    built-ins loaded first: loading them from there would import them in the middle of one another's imports."""
    modules = home.removesuffix(")").split(" (through ")
    return all(m == "chillfl" or m.startswith("chillfl.") for m in modules)


class _RegistryView(Mapping[str, T]):
    def __init__(self, registry: Registry[T]) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> T:
        spec = self._registry.get(name) if isinstance(name, str) else None
        if spec is None:
            raise KeyError(name)
        return spec

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._registry.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.specs())

    def __len__(self) -> int:
        return len(self._registry.specs())


@functools.lru_cache(maxsize=None)
def package_modules(package: str) -> tuple[str, ...]:
    """The modules of a ``chillfl`` subpackage, by file name (listed, not imported: listing stays light)."""
    folder = Path(__file__).resolve().parent.joinpath(*package.split(".")[1:])
    return tuple(sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")))


@dataclass(frozen=True)
class SpecFamily:
    """A family whose built-ins are the modules of one package, each exporting its spec as ``SPEC``.

    A built-in ``name`` is the import path ``{package}.{name}:SPEC``, and a plugin names its spec by
    import path or entry point: both are loaded by :func:`load_object` and checked the same way, so a
    built-in comes in exactly as a plugin does.
    """

    package: str
    field: str
    """The config key that names a method, e.g. ``distillation.method``."""
    kind: str
    """What a spec of the family is called in messages, e.g. ``chillfl.extend.SoftLabelSpec``."""
    is_spec: Callable[[Any], bool]
    dashed: bool = False
    """Whether a built-in's public name writes its module's ``_`` as ``-`` (``dp_fedavg.py`` is ``dp-fedavg``): a
    module name cannot hold a hyphen, and a name users already write must not change."""

    def built_in_names(self) -> tuple[str, ...]:
        modules = package_modules(self.package)
        return tuple(m.replace("_", "-") for m in modules) if self.dashed else modules

    def _module(self, name: str) -> str:
        """The module of built-in ``name``."""
        return name.replace("-", "_") if self.dashed else name

    def names(self) -> list[str]:
        """Built-in names and the ``chillfl.plugins`` entry points that name a spec of this family."""
        return sorted({*self.built_in_names(), *plugin_names(self.is_spec, self.built_in_names(), self.field)})

    def spec(self, name: object) -> Any:
        """The spec ``name`` names; a ConfigError on :attr:`field` when there is none or it is no spec of this family."""
        if isinstance(name, str) and name in self.built_in_names():
            found = load_object(f"{self.package}.{self._module(name)}:SPEC", self.field)
            warn_if_shadowed(name, self.field, self.is_spec, found)
        else:
            found = resolve(name, self.field) if isinstance(name, str) and name else None
            if found is None:
                raise choice_error(self.field, name, self.names())
        if not self.is_spec(found):
            raise ConfigError(self.field, f"{name!r} must name a {self.kind}, got {short_repr(found)}")
        if hasattr(found, "capabilities"):  # the families whose spec declares them (soft-label, prototype methods)
            declared(found.capabilities, str(name), self.field)
        check_hooks(name, found.calls(), self.field)
        options = found.options
        if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
            raise ConfigError(self.field, f"{name!r}: its options must be a dataclass, got {options!r}")
        return found
