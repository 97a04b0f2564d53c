"""``extends = "other.toml"`` in configs, and the bundled configs rewritten to use it.

``bundled_configs_before.json`` holds every bundled config as it was before the
rewrite (the TOML files of main at 193c31d, parsed with tomllib, one config a
line; ``demo`` and ``fedchill/table1-*`` were not rewritten and are not in it),
except for later, deliberate changes: SCARLET's CIFAR-10 configs train
``resnet20`` (its Table III model) where they had ``resnet18`` as a stand-in,
and the full-size CIFAR configs of FLex&Chill and SCARLET set the papers'
augmentation (``[dataset.augment]``: random crop with padding 4 and flip),
and the full-size configs (datasets that need a download) run ``executor = "auto"``;
and SCARLET's CIFAR-10 configs and FLex&Chill's Dirichlet ones (Table 7) use
the authors' splitters (``scarlet_dirichlet`` / ``flexchill_dirichlet`` with
``eval.client_split = "partition"``), where they had ``dirichlet``; and
FLex&Chill's full-size FedProx and SCAFFOLD Table 7 configs take 5 clients a
round, 5 local epochs and batch 32, the hyper-parameters its earlier version
states for those runs (flexchill-short Appendix C.2, Table 6); and the
full-size FLex&Chill configs take the authors' ``--decay`` as SGD weight decay
1e-5 (no ``lr_decay``), FLex&Chill's ResNet-18 and SCARLET's ResNet-20 the
initialisation of the authors' code (``init``).
Each rewritten config must resolve to the very same dict and the very same
RunConfig as its old file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import config_from_dict, load_config, read_config_file
from chillfl.errors import ConfigError
from chillfl.experiments import bundled_experiments, experiments_root, resolve_config
from chillfl.resolve import algorithm_table, model_table, resolved

BEFORE: dict[str, dict] = json.loads((Path(__file__).parent / "bundled_configs_before.json").read_text(encoding="utf-8"))


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_rewritten_bundled_config_resolves_as_before(name: str) -> None:
    old = BEFORE[name]
    path = resolve_config(name)
    assert path.is_file(), name
    assert read_config_file(path) == old
    assert load_config(path) == config_from_dict({"name": path.stem, **old})


def test_the_rewrite_really_uses_extends_and_bases_are_not_experiments() -> None:
    root = experiments_root()
    bases = sorted(str(p.relative_to(root)) for p in root.rglob("_*.toml"))
    assert "flexchill/_base-digits.toml" in bases and len(bases) >= 8
    users = [n for n in BEFORE if "extends" in resolve_config(n).read_text(encoding="utf-8")]
    assert len(users) >= 60
    names = bundled_experiments()
    assert set(BEFORE) <= set(names)
    assert not [n for n in names if "/_" in n or n.startswith("_")]
    assert resolve_config("flexchill/_base-digits") == Path("flexchill/_base-digits")  # not found by name


def test_base_is_merged_deeply_and_the_including_file_wins(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", 'name = "base"\nseed = 4\n[client]\nlr = 0.5\nepochs = 3\n[partition]\nname = "dirichlet"\nalpha = 0.3\n[variants.a]\nclient = { lr = 0.1 }\n')
    child = write(tmp_path, "sub/child.toml", 'extends = "../base.toml"\n[client]\nlr = 0.25\n[variants.b]\nclient = { lr = 0.2 }\n')
    data = read_config_file(child)
    # client merged key by key (child's lr, base's epochs); partition inherited whole; variants a and b both kept;
    # the base's name is not inherited (the run is named after child.toml).
    assert data == {"seed": 4, "client": {"lr": 0.25, "epochs": 3}, "partition": {"name": "dirichlet", "alpha": 0.3}, "variants": {"a": {"client": {"lr": 0.1}}, "b": {"client": {"lr": 0.2}}}}
    config = load_config(child, {"client.epochs": 7})
    assert (config.name, config.seed, config.client.lr, config.client.epochs, config.partition) == ("child", 4, 0.25, 7, {"name": "dirichlet", "alpha": 0.3})


def test_a_part_naming_another_implementation_replaces_the_base_table(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", '[partition]\nname = "dirichlet"\nalpha = 0.3\n[model]\nname = "mlp"\n')
    child = write(tmp_path, "child.toml", 'extends = "base.toml"\n[partition]\nname = "iid"\n')
    assert read_config_file(child)["partition"] == {"name": "iid"}  # not alpha = 0.3, which iid does not take
    assert load_config(child).partition == {"name": "iid"}


def test_chains_resolve_relative_to_each_including_file(tmp_path: Path) -> None:
    write(tmp_path, "a/root.toml", "seed = 1\n[client]\nlr = 0.5\nepochs = 2\n")
    write(tmp_path, "a/b/mid.toml", 'extends = "../root.toml"\nseed = 2\n[client]\nepochs = 5\n')
    leaf = write(tmp_path, "c/leaf.toml", 'extends = "../a/b/mid.toml"\n[client]\nbatch_size = 8\n')
    assert read_config_file(leaf) == {"seed": 2, "client": {"lr": 0.5, "epochs": 5, "batch_size": 8}}


@pytest.mark.parametrize(
    ("files", "start", "message"),
    [
        ({"a.toml": 'extends = "b.toml"\n', "b.toml": 'extends = "a.toml"\n'}, "a.toml", "extends: cycle: a.toml -> b.toml -> a.toml"),
        ({"a.toml": 'extends = "a.toml"\n'}, "a.toml", "extends: cycle: a.toml -> a.toml"),
        ({"a.toml": 'extends = "missing.toml"\n'}, "a.toml", "extends: file not found: 'missing.toml' (relative to {d}, nor a bundled config) in {d}/a.toml"),
        # a near miss of a bundled config: named (it said only "relative to {d}", though a bundled name is looked up too)
        ({"a.toml": 'extends = "flexchill/table4-digit"\n'}, "a.toml",
         "extends: file not found: 'flexchill/table4-digit' (relative to {d}, nor a bundled config) (did you mean 'flexchill/table4-digits'?) in {d}/a.toml"),
        ({"a.toml": "extends = 3\n"}, "a.toml", "extends: expected a TOML file name (a string), got 3 in {d}/a.toml"),
        ({"a.toml": 'extends = "sub"\n', "sub/x.toml": ""}, "a.toml", "extends: '{d}/sub' is a folder, not a config file in {d}/a.toml"),
    ],
)
def test_cycles_and_missing_files_are_one_line_naming_extends(tmp_path: Path, files: dict[str, str], start: str, message: str) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / start)
    assert str(info.value) == message.format(d=tmp_path)
    assert info.value.field == "extends"


def test_cli_refuses_a_cycle_with_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a.toml", 'extends = "b.toml"\n')
    write(tmp_path, "b.toml", 'extends = "a.toml"\n')
    assert main(["run", str(tmp_path / "a.toml"), "--out", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err
    assert err == "chillfl: error: extends: cycle: a.toml -> b.toml -> a.toml\n"
    assert not (tmp_path / "res").exists()


def test_a_long_chain_is_refused(tmp_path: Path) -> None:
    for i in range(20):
        write(tmp_path, f"c{i}.toml", f'extends = "c{i + 1}.toml"\n')
    write(tmp_path, "c20.toml", "seed = 1\n")
    with pytest.raises(ConfigError, match=r"^extends: chain longer than 16 files"):
        load_config(tmp_path / "c0.toml")


def test_the_saved_config_is_the_fully_resolved_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.config import tomllib  # tomli on Python 3.10

    assert main(["run", "flexchill/table7-fedprox-digits", "--dry-run"]) == 0
    saved = tomllib.loads(capsys.readouterr().out)
    assert "extends" not in saved
    old = BEFORE["flexchill/table7-fedprox-digits"]
    # the parts as pinned, every option of each filled in (chillfl.resolve; an unset None option has no TOML form)
    assert saved["variants"] == old["variants"] and saved["algorithm"] == algorithm_table(old["algorithm"])
    assert saved["model"] == {k: v for k, v in model_table(old["model"]).items() if v is not None}
    assert resolved(config_from_dict(saved)) == resolved(load_config(resolve_config("flexchill/table7-fedprox-digits")))
