"""Regenerate the docs' "actual output" blocks: ``python -m chillfl.docs_outputs [FILE ...]``.

A block is a fenced code block between two HTML comments that name the
command whose standard output it shows::

    <!-- output: chillfl run -q -->
    ```
    ...replaced by what the command prints...
    ```
    Made on: Intel(R) Xeon(R) Processor (AVX512), 2 CPUs, Linux x86_64, Python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6
    <!-- /output -->

The "Made on" line names the machine that regenerated the block (CPU model and
the kernels torch picks on it, CPU count, OS, Python, torch and numpy): a
block's numbers are bitwise reproducible there and only there (another CPU or
torch build rounds differently). ``--check`` therefore first compares that line
with this machine's: a block made elsewhere is reported as "made on ..., this
machine is ..." and fails without running its command (it cannot be verified
here; regenerate it, or check it on its machine; ``--other-machines skip``
lists it as not checked instead, and ``--other-machines shape``, as CI does,
reruns it and compares it with every number masked: the command still runs
and prints the same lines and labels, while the numbers, which another CPU
rounds differently, are not held to). On the same machine it reruns
the command and fails on any byte of difference. A block without the line is
stale.

Each command runs in a fresh temporary folder (so ``results/`` folders land
there and vanish), as ``python -m chillfl ...`` with this interpreter; lines
starting with ``results:`` (the result folder's path, which differs per run)
are dropped. Nothing outside the markers changes. ``--check`` reruns the
commands and exits 1 if any block would change, writing nothing; ``--list``
prints the blocks' commands without running them.

A command may have steps, ``A && B``: they run in turn in the same folder (a
metric that reads the comparison the step before wrote), and the block shows the
last step's output. A block may also keep figures its command draws: ``<!-- output: COMMAND ; keep:
results/*/differences.png as img/x.png -->`` copies the one file that matches the
pattern (relative to the command's folder) to ``img/x.png`` beside the markdown
file, for the page to show (``![...](img/x.png)``). Several are separated by
commas. A figure's bytes depend on matplotlib and its fonts, not only on the
run, so ``--check`` neither copies nor compares them; they are remade with the block.

A page may condense its blocks in a Markdown table of its own: marked by
``<!-- summary of the output blocks -->`` on the line before it, each of its
numbers must be one a block prints (to the table's precision). A paragraph
that quotes blocks may end in ``<!-- numbers from the output blocks -->``: its
numbers are held to the same rule (those in inline code excepted). Numbers it
quotes from elsewhere (a paper, a difference worked out by hand) are listed in
the mark, each with why: ``<!-- numbers from the output blocks; not from them:
9.5 (paper), 6.7 (95.73 - 89.03) -->``; each must be in the paragraph. ``--check``
fails on one that is not, and a regeneration that moves a block under such a
table or paragraph lists the numbers to update by hand. A table of results with "±"
outside the blocks and without the mark is a paste (the docs tests refuse it).

A **session** block shows several commands as a shell session would: each
line of its opening comment is one command, run in turn in one temporary
folder (a later command reads the result folders an earlier one wrote), and
the block shows each as a ``$ COMMAND`` line followed by its cleaned output::

    <!-- output session:
    silent: python -c "open('base.toml', 'w').write('...')"
    chillfl run base.toml -q --seed 0 --out results
    chillfl analyze calibration results/base -o ana
    -->
    ```
    ...replaced by "$ chillfl run ...", its output, "$ chillfl analyze ...", its output...
    ```
    Made on: ...
    <!-- /output -->

A command after ``silent: `` runs but shows neither its line nor its output
(setup, such as writing a config or a small dataset; it stays visible in the
page's source); a session shows at least one command and keeps no figures.
It is regenerated and checked like a one-command block: the same "Made on:"
rule, the same byte-for-byte check, the same messages, where it is named
"session of N commands, the first '...'". A failing command fails the
regeneration, naming that command, and nothing is written.

Every page's markup is read before any command runs, in every mode: a block
whose command is not a ``chillfl`` or ``python`` one, a session whose commands
are all silent or that keeps figures, a command holding ``-->`` (it would end
the HTML comment early, and the page would show the rest), or an opening marker
that forms no block is one line, ``page.md: block at line N: ...``, exit
status 2, and no page is written.

Default files: the README and docs/*.md of the repository this module sits in.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

BLOCK = re.compile(
    r"(?P<open><!-- output: (?P<command>[^\n]*?) -->\n)(?P<fence>`{3,})(?P<lang>[^\n]*)\n(?P<body>.*?)(?P=fence)\n(?:Made on: (?P<machine>[^\n]*)\n)?(?P<close><!-- /output -->)",
    re.DOTALL,
)
SESSION = re.compile(
    r"(?P<open><!-- output session:\n(?P<command>(?:(?!-->)[^\n]*\n)*?)-->\n)(?P<fence>`{3,})(?P<lang>[^\n]*)\n(?P<body>.*?)(?P=fence)\n"
    r"(?:Made on: (?P<machine>[^\n]*)\n)?(?P<close><!-- /output -->)",
    re.DOTALL,
)
"""A session block (see the module docstring): the opening comment holds one command a line."""
SILENT = "silent: "
"""Marks a session's command that runs without being shown (setup)."""
DROPPED_PREFIXES = ("results:",)

Runner = Callable[[str], str]


@dataclass(frozen=True)
class Block:
    command: str
    body: str
    start: int
    end: int
    machine: str | None
    """What the block's "Made on:" line says; None for a block without one (stale)."""

    @property
    def label(self) -> str:
        """How messages name the block (:func:`label`)."""
        return label(self.command)


def label(command: str) -> str:
    """How messages name a block: its command, or for a session its size and first command (one line either way)."""
    steps = session_steps(command) if is_session(command) else []
    return f"session of {len(steps)} commands, the first {steps[0]!r}" if steps else command


def is_session(command: str) -> bool:
    """Whether a block's command text is a session's: its commands one a line, each ending in a newline
    (a one-command block's command is one line without one)."""
    return command.endswith("\n")


def session_steps(command: str) -> list[str]:
    """A session's commands, as written (``silent: `` included)."""
    return command.splitlines()


def silent_and_shown(command: str) -> list[tuple[bool, str]]:
    """A session's steps as ``(silent, command)``, the ``silent: `` prefix taken off."""
    return [(line.startswith(SILENT), line.removeprefix(SILENT).strip()) for line in session_steps(command)]


def _matches(text: str) -> list[re.Match[str]]:
    """The one-command and the session blocks of ``text``, in order (the two patterns cannot match the same text)."""
    return sorted([*BLOCK.finditer(text), *SESSION.finditer(text)], key=lambda m: m.start())


def _command(m: re.Match[str]) -> str:
    """A block's command text: a one-command block's line, or a session's non-blank lines each ending in a newline."""
    if m.re is SESSION:
        return "".join(f"{line.strip()}\n" for line in m["command"].splitlines() if line.strip())
    return m["command"].strip()


def find_blocks(text: str) -> list[Block]:
    """The output blocks of a document, in order."""
    return [Block(_command(m), m["body"], m.start(), m.end(), m["machine"]) for m in _matches(text)]


def this_machine() -> str:
    """This machine as a block's "Made on:" line names it: what decides whether a rerun is bitwise equal.

    Asked of the interpreter that runs the commands (in a subprocess, so the tool
    itself imports no torch): CPU model with the kernel level torch uses on it
    (``AVX512``, ``AVX2``), logical CPUs, OS and architecture, Python, torch, numpy.
    """
    code = (
        "import os, platform, numpy, torch; from chillfl.environment import cpu_model; "
        "print(f'{cpu_model() or platform.processor() or \"unknown CPU\"} ({torch.backends.cpu.get_cpu_capability()}), "
        "{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, Python {platform.python_version()}, "
        "torch {torch.__version__}, numpy {numpy.__version__}')"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def clean_output(output: str) -> str:
    """What goes into a block: the output without result-path lines, ending in one newline."""
    lines = [line.rstrip() for line in output.splitlines() if not line.startswith(DROPPED_PREFIXES)]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def replace_blocks(text: str, run: Runner, machine: str, only: str | None = None) -> str:
    """``text`` with every block's body replaced by ``clean_output(run(command))`` and its "Made on:" line by
    ``machine``; the rest kept byte for byte. With ``only``, just the blocks whose command holds it: a change that
    moves one block's numbers need not rerun the page's others, which keep their machine."""

    pieces: list[str] = []
    done = 0
    for m in _matches(text):
        if only is not None and only not in _command(m):
            continue
        body = clean_output(run(_command(m)))
        pieces += [text[done : m.start()], f"{m['open']}{m['fence']}{m['lang']}\n{body}{m['fence']}\nMade on: {machine}\n{m['close']}"]
        done = m.end()
    return "".join([*pieces, text[done:]])


def check_blocks(text: str, run: Runner, machine: str, *, other_machines: str = "fail") -> tuple[list[str], list[str]]:
    """Why each stale block of ``text`` is stale (empty: every block is current on ``machine``), and which
    blocks were not checked.

    A block made on another machine is not compared byte for byte: its bytes
    are only promised there, so a difference here would say nothing and a match
    would be luck. With ``other_machines = "skip"`` such a block is listed as
    not checked instead of stale; with ``"shape"`` it is rerun and compared
    numbers aside (:func:`output_shape`), and listed as checked so (CI, whose
    machine may not be the one that made a block).
    """
    problems: list[str] = []
    skipped: list[str] = []
    for b in find_blocks(text):
        if b.machine is None:
            problems.append(f"{b.label}: names no machine (no 'Made on:' line)")
        elif b.machine != machine and other_machines == "shape":
            if output_shape(clean_output(run(b.command))) != output_shape(b.body):
                problems.append(f"{b.label}: made on {b.machine}; here its output differs beyond its numbers")
            else:
                skipped.append(f"{b.label}: made on {b.machine}; this machine is {machine}: {MASKED}")
        elif b.machine != machine:
            note = f"{b.label}: made on {b.machine}; this machine is {machine}: not checked"
            (skipped if other_machines == "skip" else problems).append(note)
        elif clean_output(run(b.command)) != b.body:
            problems.append(f"{b.label}: its output differs")
    return problems, skipped


MASKED = "checked with its numbers masked"
"""How a note of :func:`check_blocks` ends for a block made elsewhere and rerun under ``other_machines = "shape"``."""
_NUMBER_RUN = re.compile(r"[-+]?\d+(?:[.,:]\d+)*")
_BLANKS = re.compile(r"[ \t]+")
_EVENT_CELL = re.compile(r"(?<=\| )(?:never|diverged|# \(#/#\))(?= \|)")
"""A table cell holding a run's outcome rather than a number: a round count with how many seeds reached it
(``12.5 (2/3)``, masked to ``# (#/#)``), ``never`` (no seed reached the target) or ``diverged`` (a tuning run's loss
became non-finite). Which of these a cell holds follows a threshold, so another CPU's rounding can flip it."""


def output_shape(body: str) -> str:
    """``body`` with every number (``91.75``, ``-0.58``, ``2/3``'s parts, ``1,354``) as ``#``, each run of blanks as one
    space, and each outcome cell (:data:`_EVENT_CELL`) as ``#``: what a block says whatever the CPU's rounding (column
    widths follow the numbers' widths, so blanks too; a near-tie that tuning breaks another way, or an accuracy just
    either side of a target, turns ``never`` into a round count)."""
    return _EVENT_CELL.sub("#", _BLANKS.sub(" ", _NUMBER_RUN.sub("#", body)))


SUMMARY_MARK = "<!-- summary of the output blocks -->"
"""Opens a Markdown table that condenses the page's output blocks (see :func:`summary_mismatches`)."""

QUOTE_MARK = "<!-- numbers from the output blocks -->"
"""Ends a paragraph whose numbers are quoted from the page's output blocks (see :func:`summary_mismatches`)."""
NOT_FROM_THEM = "; not from them: "
"""Extends :data:`QUOTE_MARK` with the paragraph's numbers that no block prints: ``<!-- numbers from the output blocks; not from them: 9.5 (paper) -->``."""
_QUOTE = re.compile(r"<!-- numbers from the output blocks(?P<rest>(?:(?!-->).)*?)-->", re.DOTALL)
_EXEMPT_ITEM = re.compile(r"\s*(?P<number>[-+]?\d+(?:\.\d+)?) \((?P<why>[^()]+)\)\s*(?:,|$)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_SUMMARY = re.compile(re.escape(SUMMARY_MARK) + r"\n((?:\|[^\n]*\n)+)")
_DECIMAL = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?!\w|\.\d)")
"""A decimal, also one ending a sentence ("61.97."), but no part of a version ("2.13.0")."""
_PERCENT = re.compile(r"(?<![\w.])\d+(?= ?%)")
_PLUS_MINUS = re.compile(r"\d ± \d")
_ANY_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w])")


def _shown(value: float, decimals: int) -> str:
    """``value`` printed to ``decimals`` places, with no sign on a zero (a "+0.00" and a "-0.00" are one number)."""
    s = f"{value:.{decimals}f}"
    return s.lstrip("-") if float(s) == 0 else s


def _roundings(printed: str, decimals: int) -> set[str]:
    """The ways ``printed`` (a block's number) reads at ``decimals`` places: as Python formats its float, and
    rounded half up from its printed digits, as a reader does ("2.65" is 2.6 as a float, 2.7 to a reader)."""
    half_up = Decimal(printed).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return {_shown(float(printed), decimals), _shown(float(half_up), decimals)}


def summary_mismatches(text: str) -> list[str]:
    """The numbers of the page's summary tables and marked paragraphs that none of its output blocks shows.

    A summary table (right after ``<!-- summary of the output blocks -->``) is
    copied from blocks that ``python -m chillfl.docs_outputs`` regenerates;
    nothing else keeps it in step with them. Each of its decimals must equal a
    number of some block printed to the table's own precision (0.0253 in a
    block supports 0.025 in the table; a tie, 2.65, supports 2.6 and 2.7), and each integer before a "%" an integer
    of some block. Other integers (rounds, counts) are not checked.

    A paragraph that ends in ``<!-- numbers from the output blocks -->`` (from
    the blank line before the mark to the mark) is held to the same rule, except
    for numbers in inline code (options such as ``partition.alpha=5.0``, not quotes)
    and those its mark lists as not from the blocks, each with why:
    ``<!-- numbers from the output blocks; not from them: 9.5 (paper), 6.7 (95.73 - 89.03) -->``
    (a paper's number, one worked out by hand). A listed number the paragraph
    does not print (as written, a "+" aside) is reported: the list is stale.
    """
    shown: dict[int, set[str]] = {}
    numbers = [m.group(0) for b in find_blocks(text) for m in _ANY_NUMBER.finditer(b.body)]

    def unsupported(quote: str) -> list[str]:
        """The numbers of ``quote`` that no block prints to their own precision."""
        out = []
        for token in [*_DECIMAL.findall(quote), *_PERCENT.findall(quote)]:
            decimals = len(token.split(".")[1]) if "." in token else 0
            if decimals not in shown:
                shown[decimals] = {r for n in numbers if ("." in n) == (decimals > 0) for r in _roundings(n, decimals)}
            if _shown(float(token), decimals) not in shown[decimals]:
                out.append(token)
        return out

    missing: list[str] = []
    for m in _SUMMARY.finditer(text):
        line = text.count("\n", 0, m.start(1)) + 1
        missing += [f"the summary table at line {line}: {token} is in no output block" for token in unsupported(m.group(1))]
    for m in _QUOTE.finditer(_INLINE_CODE.sub(lambda code: " " * len(code.group(0)), text)):  # a mark shown in `code` marks nothing
        end = m.start()
        paragraph = _INLINE_CODE.sub("", text[text.rfind("\n\n", 0, end) + 1 : end])
        where = f"the paragraph ending at line {text.count(chr(10), 0, end) + 1}"
        exempt, problems = _exempt_numbers(m.group("rest"), paragraph)
        missing += [f"{where}: {problem}" for problem in problems]
        missing += [f"{where}: {token} is in no output block" for token in unsupported(paragraph) if token.lstrip("+") not in exempt]
    return missing


def _exempt_numbers(rest: str, paragraph: str) -> tuple[set[str], list[str]]:
    """The numbers a mark lists as not from the blocks (written without a "+"), and what is wrong with the list.

    ``rest`` is the mark's text after "numbers from the output blocks". The
    list is read, not trusted: a misspelt list, an item that is not
    ``NUMBER (why)`` or a number the paragraph does not print would exempt
    nothing while looking as if it did (a number edited in the prose but not in the mark).
    """
    if not rest.strip():
        return set(), []
    if not rest.startswith(NOT_FROM_THEM):
        return set(), [f"its mark {rest.strip()!r} cannot be read: end it in ' -->' or{NOT_FROM_THEM}NUMBER (why), ... -->"]
    listed = rest[len(NOT_FROM_THEM) :].rstrip()
    items: list[str] = []
    pos = 0
    while pos < len(listed):
        item = _EXEMPT_ITEM.match(listed, pos)
        if item is None:
            return set(), [f"its mark's list {listed.strip()!r} cannot be read: write{NOT_FROM_THEM}NUMBER (why), NUMBER (why)"]
        items.append(item.group("number").lstrip("+"))
        pos = item.end()
    printed = {n.lstrip("+") for n in _ANY_NUMBER.findall(paragraph)}
    absent = [f"{n} is listed as not from the blocks but the paragraph does not print it" for n in items if n not in printed]
    return set(items), absent


def unmarked_result_tables(text: str) -> list[str]:
    """Result tables (Markdown rows with a "mean ± std" in numbers) outside the output blocks and not marked as a summary of them:
    numbers pasted by hand, which nothing regenerates or checks."""
    for b in find_blocks(text):
        text = text.replace(b.body, "\n" * b.body.count("\n"))
    summarised = {text.count("\n", 0, m.start(1)) + 1 + i for m in _SUMMARY.finditer(text) for i in range(m.group(1).count("\n"))}
    return [
        f"line {n}: a result table outside <!-- output: COMMAND --> markers and not after {SUMMARY_MARK}"
        for n, row in enumerate(text.splitlines(), 1)
        if row.startswith("|") and _PLUS_MINUS.search(row) and n not in summarised
    ]


KEEP = " ; keep: "
"""Separates a block's command from the figures it keeps."""


def split_keep(command: str) -> tuple[str, list[tuple[str, str]]]:
    """``(command, [(pattern, destination), ...])`` of a block's opening text (see the module docstring)."""
    command, sep, kept = command.partition(KEEP)
    keep: list[tuple[str, str]] = []
    for item in (k.strip() for k in kept.split(",") if k.strip()) if sep else ():
        pattern, as_, dest = item.partition(" as ")
        if not as_ or not pattern.strip() or not dest.strip():
            raise ValueError(f"keep {item!r}: write PATTERN as DESTINATION")
        keep.append((pattern.strip(), dest.strip()))
    return command.strip(), keep


def run_command(command: str, figures_to: Path | None = None) -> str:
    """Run a ``chillfl ...`` (or ``python ...``) command line in a temporary folder; its standard output.

    With ``figures_to`` (a markdown file's folder) the figures the block keeps are copied there; without it
    (``--check``) the keep clause is parsed and nothing is copied. A session's command text runs as a session
    (:func:`run_session`).
    """
    if is_session(command):
        return run_session(command)
    command, keep = split_keep(command)
    steps = _steps(shlex.split(command))
    with tempfile.TemporaryDirectory(prefix="chillfl-docs-") as tmp:
        for argv in steps:  # in one folder: a step reads what the one before wrote; the block shows the last one's output
            out = _run_step(argv, tmp, command)
        if figures_to is not None:
            for pattern, dest in keep:
                found = sorted(Path(tmp).glob(pattern))
                if len(found) != 1:
                    raise RuntimeError(f"{command!r}: keep {pattern!r} matched {len(found)} files, not one")
                target = figures_to / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(found[0], target)
    return out


def run_session(command: str) -> str:
    """A session's transcript: each shown command as ``$ COMMAND`` and its cleaned output, all run in one temporary folder.

    Every command is parsed before the first runs, so a typo in the last one costs no run.
    """
    steps = silent_and_shown(command)
    argvs = _session_argvs(steps)
    shown: list[str] = []
    with tempfile.TemporaryDirectory(prefix="chillfl-docs-") as tmp:
        for (silent, step), argv_list in zip(steps, argvs):
            out = ""
            for argv in argv_list:
                out = _run_step(argv, tmp, step)
            if not silent:
                cleaned = clean_output(out)
                shown += [f"$ {step}\n", cleaned if cleaned.strip() else ""]  # a command that printed nothing: its prompt line only
    return "".join(shown)


def _session_argvs(steps: list[tuple[bool, str]]) -> list[list[list[str]]]:
    """Each of a session's ``(silent, command)`` steps as the argvs it runs; ValueError on markup a session cannot run."""
    if all(silent for silent, _ in steps):
        raise ValueError("a session shows no command: every one is silent")
    argvs = []
    for _, step in steps:
        if split_keep(step)[1]:
            raise ValueError(f"{step!r}: a session keeps no figures")
        argvs.append(_steps(shlex.split(step)))
    return argvs


END_OF_COMMENT = "-->"


def check_command(command: str) -> None:
    """A block's command text read as a run reads it, running nothing: ValueError saying what is wrong.

    A command holding ``-->`` is refused too: that ends the HTML comment the command sits in, so the page would
    show the rest of the command (and of the comment) as text.
    """
    if END_OF_COMMENT in command:
        raise ValueError(f"a command holds {END_OF_COMMENT!r}, which ends the HTML comment around it early (the page would show the rest): "
                         f"write the command without {END_OF_COMMENT!r}")
    if is_session(command):
        _session_argvs(silent_and_shown(command))
    else:
        _steps(shlex.split(split_keep(command)[0]))


_OPENING = re.compile(r"^<!-- output(?: session)?:", re.M)


def markup_problems(text: str) -> list[str]:
    """Each badly marked block of a page, as ``block at line N: why`` (N: its opening marker's line), without running anything:
    an opening marker that opens no block, or a command the tool would refuse when it came to run it."""
    blocks = {m.start(): _command(m) for m in _matches(text)}
    problems = []
    for m in _OPENING.finditer(text):
        where = f"block at line {text.count(chr(10), 0, m.start()) + 1}"
        if m.start() not in blocks:
            problems.append(f"{where}: its markers do not form a block (the opening comment, its command(s), '-->' on its own line, a fenced block, "
                            "a 'Made on:' line and '<!-- /output -->', each on its own line)")
            continue
        try:
            check_command(blocks[m.start()])
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    return problems


def _steps(words: list[str]) -> list[list[str]]:
    """The command's steps (``A && B``: B after A, in A's folder), each as the argv this interpreter runs."""
    steps: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            steps.append([])
        else:
            steps[-1].append(word)
    out = []
    for argv in steps:
        if not argv:
            raise ValueError("empty command")
        if argv[0] == "chillfl":
            out.append([sys.executable, "-m", "chillfl", *argv[1:]])
        elif argv[0] in ("python", "python3"):
            out.append([sys.executable, *argv[1:]])
        else:
            raise ValueError(f"only chillfl and python commands are run, got {argv[0]!r}")
    return out


def _run_step(argv: list[str], folder: str, command: str) -> str:
    """One step's standard output; a RuntimeError with its stderr's tail when it fails."""
    proc = subprocess.Popen(argv, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate()
    except BaseException:  # interrupted (SIGTERM, Ctrl-C): stop the command the way its own run stops, then clean up
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{command!r} exited with {proc.returncode}:\n{err[-2000:]}")
    return out


STOP_TIMEOUT_S = 30.0
"""How long an interrupted command may take to stop (chillfl runs end their workers on SIGTERM) before it is killed."""


def _stop_on_sigterm() -> None:
    """SIGTERM ends this tool like Ctrl-C does: the running command is stopped and its temporary folder removed."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def default_files() -> list[Path]:
    """README.md and docs/*.md of the checkout this module lies in (``src/chillfl/``); none for an installed chillfl."""
    root = Path(__file__).resolve().parents[2]
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chillfl.docs_outputs", description="Rerun the commands of the docs' output blocks and paste their output.")
    parser.add_argument("files", nargs="*", type=Path, help="markdown files (default: README.md and docs/*.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a block is out of date; write nothing")
    parser.add_argument("--list", action="store_true", help="print every block's command; run nothing")
    parser.add_argument(
        "--other-machines",
        choices=("fail", "skip", "shape"),
        default="fail",
        help="with --check, a block made on another machine: stale (fail, the default), listed as not checked (skip), "
        "or rerun and compared with its numbers masked (shape)",
    )
    parser.add_argument("--only", metavar="TEXT", help="rewrite only the blocks whose command holds TEXT (e.g. one experiment's name); the others stay as they are")
    args = parser.parse_args(argv)
    if args.only is not None and (args.check or args.list):
        print("--only: rewrites blocks; --check and --list take every block", file=sys.stderr)
        return 2
    files = list(args.files or default_files())
    if not files:  # an installed chillfl (site-packages holds no docs): checking nothing is no pass
        print("no README.md or docs/ beside this chillfl: name the files", file=sys.stderr)
        return 2
    for path in files:  # a page that cannot be read: one line, before anything runs
        if not path.is_file():
            print(f"{path}: no such file", file=sys.stderr)
            return 2
    pages = [(path, path.read_text(encoding="utf-8")) for path in files]
    for path, text in pages:  # every page's markup before any command runs or any page is written
        for problem in markup_problems(text)[:1]:
            print(f"{path}: {problem}", file=sys.stderr)
            return 2
    stale = 0
    machine: str | None = None
    for path, text in pages:
        blocks = find_blocks(text)
        if args.list:
            for b in blocks:
                print(f"{path}: {b.command.rstrip()} (made on: {b.machine or 'no machine named'})")
            continue
        if not blocks:
            continue
        machine = machine or this_machine()

        def run(cmd: str, path: Path = path) -> str:
            print(f"{path}: {label(cmd)}", file=sys.stderr)
            return run_command(cmd) if args.check else run_command(cmd, figures_to=path.parent)

        if args.check:
            problems, skipped = check_blocks(text, run, machine, other_machines=args.other_machines)
            problems += summary_mismatches(text)
            for problem in problems:
                print(f"stale: {path}: {problem}", file=sys.stderr)
            for note in skipped:
                print(f"made elsewhere: {path}: {note}", file=sys.stderr)
            if not problems:
                masked = sum(note.endswith(MASKED) for note in skipped)
                aside = f"; {masked} rerun, the same but for their numbers" if masked else ""
                print(f"current: {path} ({len(blocks) - len(skipped)} of {len(blocks)} block(s) rerun, byte-identical{aside})", file=sys.stderr)
            stale += bool(problems)
            continue
        new = replace_blocks(text, run, machine, args.only)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path}", file=sys.stderr)
        for problem in summary_mismatches(new):  # the blocks moved under a table copied from them: say so, it needs a hand
            print(f"update by hand: {path}: {problem}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    _stop_on_sigterm()
    sys.exit(main())
