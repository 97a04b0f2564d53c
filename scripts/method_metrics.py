"""Every registered method's metrics.jsonl under the sequential and vectorized executors, for byte comparisons.

A refactor that must not change results runs this before and after and compares the two folders
byte for byte::

    python scripts/method_metrics.py cases /tmp/cases.json        # the case list, frozen before the change
    python scripts/method_metrics.py run /tmp/cases.json /tmp/before
    ... change the code ...
    python scripts/method_metrics.py run /tmp/cases.json /tmp/after
    python scripts/method_metrics.py compare /tmp/before /tmp/after

The cases are the test suite's registry cases (``tests/registry_cases.py``: every algorithm, soft-label
method, prototype method, temperature policy and client optimiser), frozen to JSON so that the "after" run
uses the same overrides even when registries move. Bitwise equality holds per machine and torch build.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXECUTORS = ("sequential", "vectorized")


def write_cases(path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from registry_cases import registry_cases

    path.write_text(json.dumps(dict(registry_cases()), indent=1, sort_keys=True) + "\n")
    print(f"{path}: {sum(1 for _ in registry_cases())} cases")


def run_cases(cases_file: Path, out: Path) -> None:
    from chillfl.config import load_config
    from chillfl.runner import run_experiment

    cases = json.loads(cases_file.read_text())
    out.mkdir(parents=True, exist_ok=True)
    for case, overrides in cases.items():
        for executor in EXECUTORS:
            name = f"{case}--{executor}"
            config = load_config(None, {**overrides, "executor": executor, "device": "cpu", "out_dir": str(out / "runs"), "name": name})
            result = run_experiment(config, progress=False)
            assert result.folder is not None
            (out / f"{name}.jsonl").write_bytes((Path(result.folder) / "metrics.jsonl").read_bytes())
            print(name, flush=True)


def compare(before: Path, after: Path) -> int:
    names = sorted(p.name for p in before.glob("*.jsonl"))
    missing = [n for n in names if not (after / n).exists()]
    differ = [n for n in names if n not in missing and (before / n).read_bytes() != (after / n).read_bytes()]
    extra = sorted(p.name for p in after.glob("*.jsonl") if not (before / p.name).exists())
    print(f"{len(names)} metrics.jsonl files before; {len(names) - len(missing) - len(differ)} byte-identical after, "
          f"{len(differ)} differ, {len(missing)} missing, {len(extra)} new")
    for n in differ:
        print("differs:", n)
    for n in missing:
        print("missing:", n)
    return 1 if differ or missing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("cases").add_argument("file", type=Path)
    run = sub.add_parser("run")
    run.add_argument("cases", type=Path)
    run.add_argument("out", type=Path)
    cmp = sub.add_parser("compare")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "cases":
        write_cases(args.file)
        return 0
    if args.command == "run":
        run_cases(args.cases, args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
