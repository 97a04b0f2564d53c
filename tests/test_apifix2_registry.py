"""A plugin registered under a built-in's name is refused even before the built-ins are loaded (apifix2, pyapi #3):
built-ins load lazily, so in a fresh session ``register_algorithm("fedprox", ...)`` took the name without a word, a
config naming fedprox ran the user's code, and the clash surfaced later as a raw ValueError from ``chillfl.available()``.
Each case runs in a fresh interpreter: the registry is process state, and this test's own session has loaded it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import dataclasses
    from chillfl.extend import AlgorithmSpec, FedAvg, register_algorithm
    from chillfl.training.terms import TermSpec, register_term

    @dataclasses.dataclass(frozen=True)
    class O:
        mu: float = 0.0

    def refused(register, name, spec):
        try:
            register(name, spec)
        except ValueError as exc:
            return "registered twice" in str(exc)
        return False

    algorithm = AlgorithmSpec(O, lambda o, c: (FedAvg(), []), "mine")
    term = TermSpec(O, lambda o: None, "mine")
    print(refused(register_algorithm, "fedprox", algorithm), refused(register_term, "ntd", term))
    register_algorithm("apifix2_mine", algorithm)
    register_algorithm("apifix2_mine", dataclasses.replace(algorithm, summary="mine, again"))  # a cell run again
    register_term("apifix2_term", term)
    import chillfl
    from chillfl.aggregation.registry import registered_algorithms
    chillfl.available()
    print(registered_algorithms()["apifix2_mine"].summary, registered_algorithms()["fedprox"] is not algorithm)
""")


def test_a_built_in_name_is_refused_in_a_fresh_session_and_a_new_name_registers() -> None:
    src = os.path.join(os.path.dirname(__file__), "..", "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["True True", "mine, again True"]
