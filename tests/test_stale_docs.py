"""Docs that name the files a run writes, or say what chillfl lacks, agree with the code.

Issue 25 found the README saying "there is no LEAF loader yet" and "there is
no device option yet" long after both existed, and ``config.py`` naming
``checkpoint.pt`` where the run writes ``checkpoint.safetensors``. These
checks read every page and docstring, so the next such sentence fails here.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "src" / "chillfl").rglob("*.py")])

MODEL_FILE = re.compile(r"\b(?:checkpoint|model|client_models)\.(?:pt|pth|ckpt|safetensors|bin|npz|pkl)\b")
MISSING = re.compile(r"\bno ([\w-]+) (loader|option)\b[^.]{0,40}?\byet\b", re.IGNORECASE)


def written_model_files() -> set[str]:
    from chillfl.storage.run_folder import CHECKPOINT
    from chillfl.runner import CLIENT_MODELS, MODEL

    return {Path(CHECKPOINT).name, MODEL, CLIENT_MODELS}


def wrong_file_names(text: str) -> list[str]:
    """Model and checkpoint file names in ``text`` that no run writes."""
    return sorted({m.group(0) for m in MODEL_FILE.finditer(text)} - written_model_files())


def stale_claims(text: str) -> list[str]:
    """Sentences saying "no X loader/option yet" where X is a dataset source chillfl reads, or a config option."""
    from chillfl.config import RunConfig
    from chillfl.data import dataset_names
    from chillfl.data.sources import MANUAL, SOURCES

    sources = " ".join([*dataset_names(), *(m.instructions for m in MANUAL.values()), *(repr(s) for s in SOURCES.values())]).lower()
    options = {f.name for f in dataclasses.fields(RunConfig)}
    out = []
    for m in MISSING.finditer(text):
        name, kind = m.group(1), m.group(2).lower()
        if (kind == "loader" and name.lower() in sources) or (kind == "option" and name.lower() in options):
            out.append(m.group(0))
    return out


def test_the_checks_catch_the_sentences_issue_25_found() -> None:
    assert stale_claims("- **FEMNIST**: there is no LEAF loader yet; `flexchill/table4-mnist-dnn` runs") == ["no LEAF loader yet"]
    assert stale_claims("- **Devices**: runs are on the CPU; there is no device option yet.") == ["no device option yet"]
    assert stale_claims("there is no Sent140 loader yet; there is no warp option yet") == []  # neither exists: not stale
    assert wrong_file_names('"""When the run state is saved into the run folder (``checkpoint.pt``)."""') == ["checkpoint.pt"]
    assert wrong_file_names("``checkpoint.safetensors`` and ``model.safetensors``") == []


def test_no_page_names_a_file_no_run_writes_or_a_stale_gap() -> None:
    found = {str(p.relative_to(ROOT)): wrong_file_names(t) + stale_claims(t) for p in PAGES if (t := p.read_text(encoding="utf-8"))}
    assert {page: bad for page, bad in found.items() if bad} == {}
