"""The benchmark scripts' argument parser: a bad option ends with exit 2 and one line, as chillfl's CLI does.

argparse's own ``error`` prints the whole usage before its message; a script run in a batch (gpu-check.sh) then
buries the one line that says what was wrong.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit 2 (no usage block, no traceback)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(2)
