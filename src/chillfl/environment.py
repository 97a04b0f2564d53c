"""What a run ran on: versions, device, threads, git commit, the code's digest. Bitwise reproducibility depends on all of them.

Recorded in ``summary.json`` (``environment``) and as comment lines at the top of
the saved ``config.toml`` (comments: a config file stays loadable, and a rerun
from it is not tied to the old machine). ``chillfl resume`` compares the
checkpoint's record with the resuming machine's and warns in one line.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence, TypedDict

import numpy as np
import torch

from chillfl._version import __version__

COMPARED = ("chillfl", "torch", "numpy", "python", "device", "cpu_capability", "kernel_caps", "threads", "git_commit", "code")
"""The fields whose change can change results bit for bit (``resume`` warns about these)."""

KERNEL_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")
"""Environment variables that cap or fix the kernels oneDNN (convolutions), MKL (torch's matmuls), OpenBLAS (numpy's
matmuls and dots) and numpy's own SIMD loops (its float64 ``exp``/``log``, its sorts) pick, beside ATen's own
(``ATEN_CPU_CAPABILITY``, read back as ``cpu_capability``): each can change the bits (docs/reproducibility.md), and
neither torch nor numpy reports them. (MKL's cap moves no bit on an AMD CPU, where MKL takes its AVX2 path anyway;
it is recorded all the same: the record cannot tell which vendor's kernels a cap left alone.)"""

FIRST_KERNEL_CAPS = KERNEL_CAPS[:4]
"""What a record without ``kernel_caps_tracked`` tracked (a chillfl before 2026-12-07): oneDNN's and MKL's caps only."""

CHUNKED = ("cores",)
"""Compared besides :data:`COMPARED` for a run whose executor groups clients by the cores
(:func:`chillfl.executors.parallel.follows_cores`): a change of the others' float path only."""


def environment(device: torch.device) -> dict[str, Any]:
    """This process's record, on ``device``, at the current torch thread settings."""
    return {
        "chillfl": __version__,
        "torch": str(torch.__version__),
        "numpy": str(np.__version__),
        "python": platform.python_version(),
        "device": device_name(device),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "kernel_caps": kernel_caps(),
        "kernel_caps_tracked": list(KERNEL_CAPS),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "cores": usable_cores(),
        "git_commit": git_commit(),
        "code": code_sha256()[:16],
    }


def kernel_caps() -> str | None:
    """The :data:`KERNEL_CAPS` this process was given (``ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2``;
    None: none): ``cpu_capability`` stays AVX512 under them while the convolutions and matmuls round as on AVX2."""
    caps = [f"{name}={os.environ[name]}" for name in KERNEL_CAPS if os.environ.get(name)]
    return " ".join(caps) or None


def tracked_caps(env: Mapping[str, Any]) -> tuple[str, ...]:
    """The :data:`KERNEL_CAPS` a record's ``kernel_caps`` looked at: its ``kernel_caps_tracked``, else
    :data:`FIRST_KERNEL_CAPS` (an older record's). Why: ``kernel_caps None`` in such a record says nothing of a variable
    added since, so a resume that compared it whole warned of ``OPENBLAS_CORETYPE`` on every machine that presets it."""
    tracked = env.get("kernel_caps_tracked")
    if isinstance(tracked, (list, tuple)):
        return tuple(str(name) for name in tracked)
    # a variable its value names was tracked too: a record of the hours between KERNEL_CAPS growing and this field
    # (2026-12-07) named OPENBLAS_CORETYPE; read as the first four only, its removal went unwarned (rev116a 2)
    caps = env.get("kernel_caps")
    named = {word.partition("=")[0] for word in caps.split(" ")} if isinstance(caps, str) else set()
    return tuple(name for name in KERNEL_CAPS if name in FIRST_KERNEL_CAPS or name in named)


def caps_of(caps: str | None, known: Sequence[str], keep: Sequence[str]) -> str | None:
    """``caps`` (a ``kernel_caps`` value) with only the variables in ``keep``, in its order (None: none left).

    A value may hold spaces (``NPY_DISABLE_CPU_FEATURES=X86_V4 AVX512_ICL``): a word starts a variable only where it
    is ``NAME=`` of a name in ``known``, else it continues the value before it."""
    if not caps:
        return None
    entries: list[tuple[str, str]] = []
    for word in caps.split(" "):
        name, eq, _ = word.partition("=")
        if (eq and name in known) or not entries:
            entries.append((name, word))
        else:
            entries[-1] = (entries[-1][0], f"{entries[-1][1]} {word}")
    return " ".join(word for name, word in entries if name in keep) or None


def comparable(saved: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """``saved`` and ``now`` with ``kernel_caps`` narrowed to the variables both records tracked: an older record's
    ``None`` is "unset" of the variables it tracked and says nothing of those added since. Unchanged where both
    tracked the same variables, or where either has no ``kernel_caps``."""
    if "kernel_caps" not in saved or "kernel_caps" not in now:
        return saved, now
    ours, theirs = tracked_caps(saved), tracked_caps(now)
    if ours == theirs:
        return saved, now
    known = tuple(dict.fromkeys((*ours, *theirs, *KERNEL_CAPS)))
    both = [name for name in ours if name in theirs]
    return ({**saved, "kernel_caps": caps_of(saved["kernel_caps"], known, both)},
            {**now, "kernel_caps": caps_of(now["kernel_caps"], known, both)})


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity, which a cluster job's allocation, ``taskset`` or a container's
    cpuset narrows below the machine's ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def device_name(device: torch.device) -> str:
    """``cuda:0 (NVIDIA H100 80GB HBM3)``; ``cpu (<CPU model>)`` where the OS says it."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    model = cpu_model()
    return f"{device} ({model})" if model and device.type == "cpu" else str(device)


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name: Linux's ``/proc/cpuinfo``, macOS's ``sysctl`` (``Apple M2 Pro``), else what
    :func:`platform.processor` says. Why sysctl: on macOS that says ``arm`` or ``i386`` of every chip, so two Macs'
    results looked as if from one machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            brand = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=2, check=False)
        except (OSError, subprocess.SubprocessError):
            brand = None
        if brand is not None and brand.returncode == 0 and brand.stdout.strip():
            return brand.stdout.strip()
    return platform.processor()


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the checkout chillfl is imported from (``+dirty`` with local changes); None when installed.

    Only a repository that tracks chillfl's own files names its code: an installed chillfl can sit in a virtual
    environment inside the user's own repository, whose HEAD says nothing of chillfl's code, and would make
    ``chillfl resume`` warn of another set-up after every commit of the user's.
    """
    source = Path(__file__).resolve().parent
    if not any((p / ".git").exists() for p in (source, *source.parents)):
        return None
    try:
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "__init__.py"], cwd=source, capture_output=True, text=True, timeout=5, check=False)
        if tracked.returncode != 0:  # not chillfl's checkout: a repository around an installed copy (or git refuses it)
            return None
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "."], cwd=source, capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


@lru_cache(maxsize=1)
def code_sha256() -> str:
    """SHA-256 of chillfl's own source (every ``.py`` of the package, by relative path and bytes).

    The version string stays 0.1.0 across changes, and an installed package has no
    git commit: this names the code that made a result, so a finished comparison is
    reused (``chillfl reproduce --resume``) only by the code that made it, and a run's record holds its first 16
    digits (``code``), which ``chillfl resume`` compares: without a checkout a code change was unsaid.
    """
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def as_comment(env: Mapping[str, Any]) -> str:
    """The record as TOML comment lines (a ``config.toml`` header); without ``kernel_caps_tracked``, which only lets
    :func:`differences` tell "not tracked" from "unset" (the code the record names says it too)."""
    return "# ran with: " + ", ".join(f"{k} {v}" for k, v in env.items() if v is not None and k != "kernel_caps_tracked") + "\n"


def differences(saved: Mapping[str, Any], now: Mapping[str, Any], fields: Sequence[str] = COMPARED) -> list[str]:
    """``["torch 2.4.0 -> 2.5.1", ...]``: the ``fields`` that differ (absent ones are skipped; ``kernel_caps`` over the
    variables both records tracked: :func:`comparable`)."""
    saved, now = comparable(saved, now)
    return [f"{k} {saved[k]} -> {now.get(k)}" for k in fields if k in saved and saved[k] != now.get(k)]


NO_CODE = "written by a chillfl that recorded no code digest: the rest of the run may differ from what this code gives uninterrupted"
"""The warning for a record without ``code`` (:func:`lacks_code`)."""


def lacks_code(saved: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether ``saved`` (a checkpoint's record) has no code digest to compare (a chillfl before 2026-12-03 wrote none),
    unless both records name the same clean git commit, which names the code as well.

    Why: :func:`differences` skips what ``saved`` lacks, so an installed chillfl (no ``git_commit``) resuming such a
    checkpoint said nothing, though its code may be another's than the one that ran the first rounds."""
    if "code" in saved:
        return False
    commit = saved.get("git_commit")
    return not (isinstance(commit, str) and not commit.endswith("+dirty") and commit == now.get("git_commit"))


class ResumedSetup(TypedDict):
    """One resume on another setup, as ``summary.json``'s ``resumed`` lists it: rounds up to ``round`` ran on the first."""

    round: int
    changed: dict[str, list[Any]]


def changes(saved: Mapping[str, Any], now: Mapping[str, Any], fields: Sequence[str] = COMPARED) -> dict[str, list[Any]]:
    """``{field: [saved, now]}`` for what :func:`differences` lists, and ``code: [None, now]`` where :func:`lacks_code`:
    what a resumed run's ``summary.json`` records under ``resumed`` (``kernel_caps`` as compared: :func:`comparable`)."""
    compared_saved, compared_now = comparable(saved, now)
    out = {k: [compared_saved[k], compared_now.get(k)] for k in fields if k in compared_saved and compared_saved[k] != compared_now.get(k)}
    if "code" in fields and lacks_code(saved, now):
        out["code"] = [None, now.get("code")]
    return out
