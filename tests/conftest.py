"""Test-wide setup: one intra-op thread.

The models in the tests are tiny, where torch's thread pool costs more than it
gives, and CI machines are small and shared; one thread also keeps the process
executor's bitwise comparison with the sequential one meaningful.
"""

import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator

import pytest
import torch

torch.set_num_threads(1)

# A vmap fallback (the vectorised executor, the batched predictor) raises instead of rerunning one
# client at a time: a fallback must never hide an exception of the run's own code behind a warning
# (issue 26). Tests that exercise a fallback on purpose unset it (``no_strict_fallbacks``).
os.environ.setdefault("CHILLFL_STRICT_VECTORIZED", "1")
# No fsync in the tests' run folders (chillfl.storage.checkpoint.NO_FSYNC), which are deleted seconds later: the writes
# stay atomic (a killed run still leaves the old file or the new one); each fsync waited for the disk, thousands a suite.
os.environ.setdefault("CHILLFL_NO_FSYNC", "1")


@pytest.fixture(autouse=True)
def notes_said_afresh() -> None:
    """Each test starts with no once-a-process warning said (:mod:`chillfl.once`): what a test sees on stderr must not
    depend on which tests ran before it in the same worker."""
    once = sys.modules.get("chillfl.once")  # not imported here: a test may check what is imported
    if once is not None:
        once.forget()


@pytest.fixture(scope="session", autouse=True)
def shared_worker_pools() -> Iterator[None]:
    """The workers ``lent_pools`` lends the shared run helpers' process-pool runs stop with the session (none outlives pytest)."""
    yield
    lent = sys.modules.get("lent_pools")
    if lent is not None:
        lent.close()


@pytest.fixture
def no_strict_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test of a fallback itself: vmap failures fall back, as in a user's run."""
    monkeypatch.delenv("CHILLFL_STRICT_VECTORIZED", raising=False)

# tests/private_net/ (Ray clusters, Flower's simulation and deployment) run only inside a private
# network namespace, started by tests/test_private_net.py: there the loopback device is the only
# interface, so Ray, which otherwise advertises the host's own address, cannot send a packet anywhere else.
collect_ignore = [] if os.environ.get("CHILLFL_PRIVATE_NET") == "1" else ["private_net"]


@pytest.fixture
def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> Callable[[type, str], list[int]]:
    """``batch_sizes(Class, "method")``: wraps ``Class.method(self, jobs)`` and returns the list of ``len(jobs)`` of its calls."""

    def spy_on(owner: type, name: str) -> list[int]:
        calls: list[int] = []
        original = getattr(owner, name)

        def spy(self: Any, jobs: Any) -> Any:
            calls.append(len(jobs))
            return original(self, jobs)

        monkeypatch.setattr(owner, name, spy)
        return calls

    return spy_on


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``): on a shared
    2-core machine torch's default oversubscribes and the soft-label tests run ~50x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def short_temp() -> Iterator[Path]:
    """An empty folder with a short path, for a subprocess's TMPDIR: under a long one (pytest's own, in an xdist
    worker) multiprocessing's sockets move to /tmp, and a test of what is left in its TMPDIR would check nothing."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="cf-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def user_module(tmp_path: Path) -> Iterator[Callable[[str, str], None]]:
    """``user_module(name, source)``: a user's module, written to a folder put on ``sys.path`` as a plugin
    author's would be; the folder and the imported module are gone again after the test."""
    names: list[str] = []

    def write(name: str, source: str) -> None:
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        names.append(name)

    sys.path.insert(0, str(tmp_path))
    try:
        yield write
    finally:
        sys.path.remove(str(tmp_path))
        for name in names:
            sys.modules.pop(name, None)



SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


_NET = "tests/test_private_net.py::test_ray_and_flower_suites_pass_in_a_private_network"
FIRST = (
    f"{_NET}[test_ray-signals]", f"{_NET}[test_flower-deployment]", f"{_NET}[test_ray-rest]", f"{_NET}[test_flower-rest]",
    f"{_NET}[test_plugins_on_backends]", f"{_NET}[test_flower_signals]",
    "tests/test_compile.py::test_two_fresh_processes_compile_the_same_bits_and_leave_no_process",
    "tests/test_docs_pages.py::test_the_page_runs_top_to_bottom[python-api.md]",
    "tests/test_public_typing.py::test_every_documented_callback_form_type_checks",
    "tests/test_reproduce_resume.py::test_without_resume_every_claim_runs_again", f"{_NET}[test_rayint_signals]",
    f"{_NET}[test_extending_ray]", f"{_NET}[test_plugin_dataset_ray]", f"{_NET}[test_thrfix_ray]", f"{_NET}[test_statefix_ray]",
)
"""The longest tests, longest first, started before the rest: the Ray and Flower suites' parts (1-4.5 minutes each,
~21 in all, measured one at a time under -n 0 on a loaded 2-core machine, 2026-12-07), in the order of CI's last log
(the 24-minute run; worker-seconds: ray-signals 125, flower-deployment 120, ray-rest 108, flower-rest 194 then, about half
since its simulations share one Ray, plugins_on_backends 89, flower_signals 80); then the tests of a minute or more.
Under ``-n auto`` (pytest-xdist, CI's ``--dist worksteal``) the other worker runs the rest meanwhile and takes
the queued parts when it runs out, instead of a long test starting last and one worker running it alone at the end."""


def _collects_all_of_tests(config: pytest.Config) -> bool:
    """Whether this session collects every module of tests/: no file or node id of it alone, nothing ignored, no
    ``--lf`` (which skips whole files). Only then can a listed id that matches nothing be called stale."""
    if (config.getoption("lf", False) or config.getoption("stepwise", False) or config.getoption("stepwise_skip", False)
            or config.getoption("ignore", None) or config.getoption("ignore_glob", None)):  # each drops tests before this hook
        return False
    here = Path(__file__).resolve().parent
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if "::" not in arg and (path == here or path in here.parents):
            return True
    return False


def _stale(listed: set[str], items: list[pytest.Item], root: Path) -> list[str]:
    """The listed ids no collected test has, where their module was collected (a module skipped whole, an extra
    missing, or one that failed to import, has no tests to compare with) or is gone."""
    ids = {item.nodeid for item in items}
    modules = {nodeid.split("::")[0] for nodeid in ids}
    return sorted(n for n in listed - ids if n.split("::")[0] in modules or not (root / n.split("::")[0]).is_file())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests ``slow_tests.txt`` lists ``slow`` (the measured slow ones of otherwise fast modules); the longest first.

    A run of the whole of tests/ refuses a listed id that matches no test: a test renamed or parametrised since it
    was listed would otherwise drop back into the fast loop (``-m "not slow"``) unnoticed."""
    listed = {line.strip() for line in SLOW_TESTS.read_text().splitlines() if line.strip() and not line.startswith("#")}
    whole = _collects_all_of_tests(config)
    stale = _stale(listed, items, config.rootpath) if whole else []
    unordered = _stale(set(FIRST), items, config.rootpath) if whole else []
    if unordered:  # a renamed long test would lose its early start unnoticed
        message = f"tests/conftest.py's FIRST names {len(unordered)} id(s) that match no collected test:\n" + "\n".join(unordered)
        config.hook.pytest_collectreport(report=pytest.CollectReport("tests/conftest.py", "failed", message, []))
    if stale:  # a collection error (pytest-xdist relays one from its workers; a UsageError there is a crash)
        message = (f"{SLOW_TESTS.name} lists {len(stale)} id(s) that match no collected test (renamed, parametrised or "
                   f"removed since: fix or drop the line):\n" + "\n".join(stale))
        config.hook.pytest_collectreport(report=pytest.CollectReport(os.path.relpath(SLOW_TESTS, config.rootpath), "failed", message, []))
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    first = {nodeid: rank for rank, nodeid in enumerate(FIRST)}
    items.sort(key=lambda item: first.get(item.nodeid, len(FIRST)))  # stable: otherwise in collection order


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every matplotlib figure saved while the test runs, in order, once rendered (its extents and tick labels final)."""
    from matplotlib.figure import Figure

    figures: list[Any] = []
    save = Figure.savefig

    def spy(self: Figure, *args: Any, **kwargs: Any) -> Any:
        out = save(self, *args, **kwargs)
        figures.append(self)
        return out

    monkeypatch.setattr(Figure, "savefig", spy)
    return figures


@pytest.fixture()
def my_methods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """docs/extending.md's ``my_methods.py`` (every ``file: my_methods.py`` block, in order), imported: the tests of
    the page's examples and reference (test_plugfix_downlink_doc, test_sldocs_softlabel_reference) run it."""
    from test_extending_docs import files

    (tmp_path / "my_methods.py").write_text(files()["my_methods.py"], encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_methods", None)
    import my_methods

    yield my_methods
    sys.modules.pop("my_methods", None)


class Hung(Exception):
    """The ``guard`` fixture went off: the call did not return."""


@pytest.fixture
def guard() -> Iterator[None]:
    """A hang fails the test instead of stalling the suite (no speed is asserted: the limit is minutes, the call ms);
    the accountant tests use it (Opacus's RDP series looped without end at a vanishing noise)."""

    def hung(signum: int, frame: FrameType | None) -> None:
        raise Hung

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
