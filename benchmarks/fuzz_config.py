"""Fuzz ``chillfl run`` with generated bad configs and count how each one ends.

Draws N cases from the property test's generator (``tests/test_hostile_input.py``: every group,
``[privacy]`` and ``[attack]`` among them) with a seed of its own, plus ``out_dir`` cases (a file, a path under a file, a
path under ``/proc``) and a ``distillation.state_dir`` that is a file,
and runs each in a forked child with a time limit. A case is *clean* when it
exits 2 with one stderr line ``error: <the broken field>: ...``, no traceback
and nothing under ``out_dir``.

    python benchmarks/fuzz_config.py -n 400 --seed 17 --save /tmp/cases.jsonl
    PYTHONPATH=/path/to/old/src python benchmarks/fuzz_config.py --load /tmp/cases.jsonl   # the same cases on an older tree

A saved case is one JSON line: its path, its field and its value as the TOML text the run reads (no pickle: loading a
file runs no code from it).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib.util
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import torch
from hypothesis import HealthCheck, given, seed, settings

import chillfl.config as config_module
from chillfl.cli import main

from bench_cli import OneLineParser  # the script's folder is on sys.path: run as a script, or by the tests

if not hasattr(config_module, "MAX_NAME_BYTES"):  # an older tree: let the test module import
    config_module.MAX_NAME_BYTES = 200  # type: ignore[attr-defined]
    config_module.check_out_dir = None  # type: ignore[attr-defined]

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("hostile", ROOT / "tests" / "test_hostile_input.py")
assert spec and spec.loader
hostile = importlib.util.module_from_spec(spec)
sys.modules["hostile"] = hostile
spec.loader.exec_module(hostile)


def collect(n: int, rng_seed: int) -> list:
    cases: list = []

    @seed(rng_seed)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=hostile.hostile_cases())
    def draw(case) -> None:
        cases.append(case)

    draw()
    return cases


def save_cases(cases: list, path: str) -> None:
    """One JSON line a case: its path, field and value as TOML text (what the run reads; :func:`load_cases` reads it)."""
    with open(path, "w", encoding="utf-8") as f:
        for c in cases:
            f.write(json.dumps({"path": list(c.path), "field": c.field, "toml": hostile.toml_value(c.value)}) + "\n")


def load_cases(path: str) -> list:
    """The cases :func:`save_cases` wrote, each value as its TOML text (written into the config as is)."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [hostile.Case(tuple(r["path"]), hostile.Raw(r["toml"]), r["field"]) for r in rows]


def run_one(case, timeout: float, out_kind: str | None = None) -> tuple[str, str]:
    """(outcome, first stderr line) of one case in a forked child."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        out_dir = root / "out"
        data = case.config(str(out_dir))
        if out_kind == "file":
            out_dir.write_text("x")
        elif out_kind == "under_file":
            (root / "f").write_text("x")
            out_dir = root / "f" / "out"
            data["out_dir"] = str(out_dir)
        elif out_kind == "proc":  # exists, os.access says writable to root, mkdir fails
            data["out_dir"] = f"/proc/chillfl-fuzz-{os.getpid()}/out"
        elif out_kind == "state_dir_file":
            (root / "state").write_text("x")
            data["distillation"] = {"method": "dsfl", "public_size": 100, "subset_size": 50, "client_store": "disk", "state_dir": str(root / "state" / "clients")}
        path = root / "bad.toml"
        path.write_text(hostile.to_toml(data), encoding="utf-8")
        err_path = root / "stderr.txt"
        pid = os.fork()
        if pid == 0:  # child
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT)
            os.dup2(fd, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            signal.alarm(int(timeout))
            try:
                code = main(["run", str(path), "--quiet"])
            except BaseException:  # noqa: BLE001 - what the user would see
                import traceback

                traceback.print_exc()
                code = 99
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 98)
        _, status = os.waitpid(pid, 0)
        err = err_path.read_text(errors="replace")
        first = err.splitlines()[0] if err.strip() else ""
        if os.WIFSIGNALED(status):
            return ("hang" if os.WTERMSIG(status) == signal.SIGALRM else f"signal {os.WTERMSIG(status)}"), first
        code = os.WEXITSTATUS(status)
        wrote = out_kind is None and out_dir.is_dir() and any(out_dir.iterdir())
        if code == 0:
            return "accepted (exit 0)", first
        if "Traceback" in err or code != 2:
            return f"traceback/crash (exit {code})", err.strip().splitlines()[-1] if err.strip() else ""
        if len(err.splitlines()) != 1:
            return "exit 2, several lines", first
        if wrote:
            return "exit 2, wrote files", first
        match = hostile.ERROR_LINE.match(first)
        field = case.field if out_kind is None else "distillation.state_dir" if out_kind == "state_dir_file" else "out_dir"
        if not match or match["field"] != hostile.escaped(field):
            return "exit 2, wrong field", first
        return "clean", first


def main_cli() -> None:
    torch.set_num_threads(1)  # before the first fork: the children run one thread each
    parser = OneLineParser(prog="fuzz_config.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=400)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--timeout", type=float, default=15)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--save", help="write the generated cases to this file")
    parser.add_argument("--load", help="run the cases saved by --save instead of generating")
    args = parser.parse_args()
    if args.load:  # the exact cases of an earlier run (hypothesis' generation is not stable across trees)
        generated = load_cases(args.load)
    else:
        generated = collect(args.n, args.seed)
    if args.save:
        save_cases(generated, args.save)
    cases = [(c, None) for c in generated]
    # over the values' TOML text: a saved and reloaded set of cases has the digest of the set it was saved from
    digest = hashlib.sha256(repr([(c.path, hostile.toml_value(c.value), c.field) for c, _ in cases]).encode()).hexdigest()[:12]
    print(f"{len(cases)} generated cases (sha256 {digest})", flush=True)
    base = hostile.Case(("name",), "ok", "out_dir")
    cases += [(base, "file"), (base, "under_file"), (base, "proc"), (base, "state_dir_file")] * 5
    outcomes: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    for case, kind in cases:
        outcome, line = run_one(case, args.timeout, kind)
        outcomes[outcome] += 1
        label = f"{kind or case.field}: {str(case.value)[:60]!r} -> {line[:160]}"
        examples[outcome].append(label)
        if args.verbose and outcome != "clean":
            print(outcome, label, flush=True)
    total = sum(outcomes.values())
    print(f"{total} bad configs: {outcomes['clean']} clean (exit 2, one line naming the field, nothing written)")
    for outcome, count in outcomes.most_common():
        print(f"  {count:4d}  {outcome}")
        if outcome != "clean":
            for ex in examples[outcome][:6]:
                print(f"          e.g. {ex}")


if __name__ == "__main__":
    main_cli()
