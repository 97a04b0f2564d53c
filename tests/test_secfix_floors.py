"""The dependency floors leave out versions whose "safe" readers run code from a file the user was given: torch before
2.6 (``torch.load(weights_only=True)``, which reads ``analyze --soft-labels FILE.pt``, had a bypass, CVE-2025-32434)
and datasets before 2.20 (``load_dataset`` of a hub name ran the repository's loading script by default; 2.20 made
``trust_remote_code`` default to asking, huggingface/datasets#6954). The floors were torch 2.4 and datasets 2.14.7.
The README and install page state torch's floor: they must say the same."""

from __future__ import annotations

import re

from test_pkgfix_packaging import ROOT, _pyproject


def _floor(requirements: list[str], name: str) -> tuple[int, ...]:
    """The ``>=`` version of ``name`` in ``requirements`` (each must give one)."""
    found = [m.group(1) for r in requirements if (m := re.match(rf"{re.escape(name)}\s*>=\s*([\d.]+)", r))]
    assert found, (name, requirements)
    return tuple(int(part) for part in found[0].split("."))


def test_torch_floor_is_past_the_weights_only_bypass() -> None:
    assert _floor(_pyproject()["project"]["dependencies"], "torch") >= (2, 6)


def test_every_datasets_floor_is_past_loading_scripts_run_by_default() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    holders = [name for name, reqs in extras.items() if any(re.match(r"datasets\s*[<>=!~]", r) for r in reqs)]
    assert sorted(holders) == ["flwr-datasets", "hf"]
    for name in holders:
        assert _floor(extras[name], "datasets") >= (2, 20), name


def test_the_pages_that_state_torchs_floor_state_pyprojects() -> None:
    floor = ".".join(str(part) for part in _floor(_pyproject()["project"]["dependencies"], "torch"))
    for page in (ROOT / "README.md", ROOT / "docs" / "install.md"):
        stated = re.findall(r"any torch >= ([\d.]+) works", page.read_text(encoding="utf-8"))
        assert stated == [floor], (page, stated)


def test_install_page_gives_the_datasets_floor() -> None:
    text = " ".join((ROOT / "docs" / "install.md").read_text(encoding="utf-8").split())
    assert "datasets >= 2.20" in text and "torch >= 2.6" in text
