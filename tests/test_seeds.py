"""``derive_seed``: the whole tuple keys a stream; the names kept on their old 4-byte key keep their old seeds, and no
two call sites of them share a stream."""

from __future__ import annotations

import ast
import hashlib
import itertools
from pathlib import Path

import numpy as np
import pytest

from chillfl.seeds import PREFIX_KEYED, derive_seed

SRC = Path(__file__).resolve().parents[1] / "src" / "chillfl"


def _prefix_word(name: str) -> int:
    return int.from_bytes(name.encode(), "little") % 2**32


def _old_derive_seed(*parts: int | str) -> int:
    """The key every stream had before 2026-12, written out again: what a prefix-keyed name must still give."""
    ints = [p if isinstance(p, int) else _prefix_word(p) for p in parts]
    state = np.random.SeedSequence(ints).generate_state(2, dtype=np.uint32)
    return (int(state[0]) | int(state[1]) << 32) & (2**63 - 1)


def test_the_name_is_read_in_full() -> None:
    # Before: both pairs shared a stream (the first 4 bytes only), Per-FedAvg's adaptation batches were its first
    # training batches.
    assert derive_seed(7, "perfedavg") != derive_seed(7, "perfedavg-adapt")
    assert derive_seed(7, "fesem", 1) != derive_seed(7, "fesem-init", 1)
    assert derive_seed(7, "stream-a", 3) != derive_seed(7, "stream-b", 3)
    assert derive_seed(7, "ab") != derive_seed(7, "ab\x00")


def test_the_tuple_is_not_padded() -> None:
    assert derive_seed(7, "mine") != derive_seed(7, "mine", 0)
    assert derive_seed(7, "mine", 0) != derive_seed(7, "mine", 0, 0)
    assert derive_seed(7, "mine", 1, 23) != derive_seed(7, "mine", 12, 3)
    assert derive_seed(7, "mine", "1") != derive_seed(7, "mine", 1)


def test_a_full_key_is_a_63_bit_hash_of_the_tagged_tuple() -> None:
    key = b"i7,s4:mine" + b"i3,"
    expected = int.from_bytes(hashlib.blake2b(key, digest_size=8, person=b"chillfl-seed").digest(), "little") & (2**63 - 1)
    assert derive_seed(7, "mine", 3) == expected
    assert 0 <= derive_seed(2**70, "mine") < 2**63


@pytest.mark.parametrize("name", sorted(PREFIX_KEYED))
def test_a_prefix_keyed_name_keeps_its_old_seed(name: str) -> None:
    for parts in [(7, name), (0, name, 3), (2**40 + 5, name, 2, 9), (name, 1)]:
        assert derive_seed(*parts) == _old_derive_seed(*parts)


def test_ints_only_keep_their_old_seed() -> None:
    assert derive_seed(3, 4) == _old_derive_seed(3, 4)


def test_the_written_out_old_key_is_the_old_code_s() -> None:
    # printed by chillfl.seeds.derive_seed at a3414f4d (the last commit before the change)
    assert _old_derive_seed(7, "sample", 3) == 2214980959208295044
    assert _old_derive_seed(2**40 + 5, "train", 2, 9) == 1987241434680597841
    assert _old_derive_seed("items", 1) == 6295890046289346517


def test_bad_parts_are_refused() -> None:
    with pytest.raises(ValueError, match="ints >= 0"):
        derive_seed(-1, "mine")
    with pytest.raises(TypeError, match="ints and strs"):
        derive_seed(np.int64(3), "mine")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ints and strs"):
        derive_seed(7, True)


def _call_sites() -> list[tuple[str, tuple[str | None, ...]]]:
    """Every ``derive_seed(...)`` under src/: (where, its arguments: a string literal, or None for any int)."""
    sites = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "derive_seed":
                args = tuple(a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args)
                sites.append((f"{path.relative_to(SRC)}:{node.lineno}", args))
    return sites


def _may_share(a: tuple[str | None, ...], b: tuple[str | None, ...]) -> bool:
    """Prefix-keyed, every int argument one word: the same words at every place, the shorter tuple zero-padded to 4.

    An int against a name counts as different (an int equal to a name's 4 bytes, ~1e9, is a coincidence)."""
    if len(a) != len(b) and max(len(a), len(b)) > 4:
        return False
    for x, y in itertools.zip_longest(a, b, fillvalue=0):
        if isinstance(x, str) != isinstance(y, str) or (isinstance(x, str) and isinstance(y, str) and _prefix_word(x) != _prefix_word(y)):
            return False
    return True


def test_no_two_prefix_keyed_call_sites_share_a_stream() -> None:
    sites = _call_sites()
    assert len(sites) > 50  # the scan finds the calls
    used = {s for _, args in sites for s in args if isinstance(s, str)}
    assert PREFIX_KEYED <= used, f"no longer used, drop from PREFIX_KEYED: {sorted(PREFIX_KEYED - used)}"
    keyed = {args for _, args in sites if all(s is None or s in PREFIX_KEYED for s in args)}
    shared = set()
    for a, b in itertools.combinations(sorted(keyed, key=repr), 2):
        names_a, names_b = tuple(s for s in a if s is not None), tuple(s for s in b if s is not None)
        if names_a != names_b and _may_share(a, b):
            shared.add(tuple(sorted(["/".join(names_a), "/".join(names_b)])))
    assert shared == set()
