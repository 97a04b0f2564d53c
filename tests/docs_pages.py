"""A docs page's code blocks, met in page order, as a reader meets them (tests/test_docs_pages.py).

``python docs_pages.py PAGE`` runs PAGE's blocks top to bottom in the current folder, all ``python`` blocks in one
namespace (``__name__ == "__main__"``, as a script or a notebook has it). The page's markers, on the line right
before a fence, say what else a block is:

* ``<!-- file: NAME -->``: the contents of a file the reader writes (blocks of the same NAME are appended in order).
  It is written to the folder, which is on ``sys.path``; a module already imported from that folder is dropped from
  ``sys.modules``, so the next block imports the file as it now stands (as the reader's next script would).
* ``<!-- not run: REASON -->``: a python block that cannot run here (a GPU, a Ray cluster, a network, hours of
  training). The test lists every such block with its reason; no block is skipped without one.
* ``<!-- example: NAME -->`` / ``<!-- prints: NAME -->``: names for the pages' own tests; an example still runs here.

Each block is compiled at its own line of the page, so a traceback names the page's line.
"""

from __future__ import annotations

import importlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FENCE = re.compile(r"(?:^<!-- (file|example|prints|not run): ([^\n]*?) -->\n)?^```(\w*)\n(.*?)^```", flags=re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block: its marker (kind, value), language, source and the page line of its first source line."""

    kind: str | None
    value: str | None
    language: str
    source: str
    line: int


def blocks(text: str) -> list[Block]:
    """Every fenced block of a page, in order."""
    return [Block(m.group(1), m.group(2), m.group(3), m.group(4), text.count("\n", 0, m.start(4)) + 1) for m in FENCE.finditer(text)]


def runs(block: Block) -> bool:
    """A python block that is run in the page's namespace (not a file's contents, not marked as not run)."""
    return block.language == "python" and block.kind not in ("file", "not run")


def not_run(text: str) -> list[tuple[int, str]]:
    """The page's python blocks marked ``<!-- not run: REASON -->``: (line, reason)."""
    return [(b.line, b.value or "") for b in blocks(text) if b.kind == "not run"]


def _forget_modules_from(folder: Path) -> None:
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().parent == folder:
            del sys.modules[name]
    importlib.invalidate_caches()


def run_page(page: Path, folder: Path) -> None:
    """Run PAGE's blocks in order in FOLDER, printing one line per block run."""
    folder = folder.resolve()
    sys.path.insert(0, str(folder))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    written: dict[str, str] = {}
    for block in blocks(page.read_text(encoding="utf-8")):
        if block.kind == "file":
            assert block.value is not None
            written[block.value] = written.get(block.value, "") + block.source + "\n"
            (folder / block.value).write_text(written[block.value], encoding="utf-8")
            _forget_modules_from(folder)
        elif block.kind == "not run" and block.language == "python":
            print(f"{page.name}:{block.line}: not run: {block.value}", flush=True)
        elif runs(block):
            start = time.perf_counter()
            exec(compile("\n" * (block.line - 1) + block.source, str(page), "exec"), namespace)
            print(f"{page.name}:{block.line}: ran in {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":  # spawned workers (a page's executor = "processes") re-import this file: the guard keeps them out
    import torch

    torch.set_num_threads(1)  # as tests/conftest.py: tiny models, a small shared machine
    run_page(Path(sys.argv[1]), Path.cwd())
