"""The refusal of a chillfl entry point called while a spawned worker starts (an unguarded script re-run there).

A module of its own, importing nothing heavy: the command line calls it before it imports torch."""

from __future__ import annotations

GUARD_SECTION = 'docs/python-api.md, "Worker processes: the __main__ guard"'


def refuse_in_worker_start(entry: str) -> None:
    """End this process with one line when ``entry`` is called while it starts as a spawned worker.

    Why: a worker started with ``spawn`` (``executor = "processes"``; forkserver too) runs the parent's script again as
    ``__mp_main__`` before it is handed its work. A script without the ``__main__`` guard then called chillfl again in
    every worker: each claimed a run folder of its own (``run-2.partial`` ... left behind) and failed deep in
    multiprocessing, in a traceback a screen long. multiprocessing marks exactly that phase on the process object
    (``_inheriting``, what its own "bootstrapping phase" check reads); a worker's own code after it (chillfl's workers,
    a Ray actor, a forked child) is not refused. Exits rather than raises: the process exists only to be a worker, and
    an exception here printed multiprocessing's start-up frames."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise SystemExit(f"chillfl: error: {entry} was called while a worker process started: a spawned worker re-runs your script, "
                         f"whose top level starts a run again; put the call under 'if __name__ == \"__main__\":' ({GUARD_SECTION})")
