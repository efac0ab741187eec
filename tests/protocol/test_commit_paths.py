"""The commit boundary's path rule for control characters
(:mod:`raydelta.protocol.commit_paths`): every ASCII control character,
raw or percent-encoded, anywhere in a path, is refused on the per-path and
the columnar (Arrow) check alike; every other character is judged as before.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raydelta.protocol.commit_paths import check_file_paths, check_path
from raydelta.protocol.errors import UnsafePathError

ROOT = "/data/table"
CONTROL = [chr(c) for c in range(0x20)] + ["\x7f"]


@pytest.mark.parametrize("character", CONTROL, ids=lambda c: f"U+{ord(c):04X}")
def test_every_control_character_is_refused_raw_and_encoded(character: str) -> None:
    for spelling in (character, f"%{ord(character):02X}", f"%{ord(character):02x}"):
        for path in (f"a{spelling}b.parquet", f"date=x/{spelling}", f"file://{ROOT}/a{spelling}"):
            with pytest.raises(UnsafePathError, match=f"U\\+{ord(character):04X}"):
                check_path(path, field="add.path", table_root=ROOT, allow_external=False)


@pytest.mark.parametrize("count", [1, 200])  # below and above the Arrow pass's threshold
def test_the_columnar_check_refuses_a_control_character_among_plain_paths(count: int) -> None:
    paths = [f"part-{i}.parquet" for i in range(count)]
    assert check_file_paths(paths, field="add.path", table_root=ROOT, allow_external=False)
    for bad in ("x\x00y.parquet", "x\ty.parquet", "x\x7f.parquet"):
        with pytest.raises(UnsafePathError, match="control character"):
            check_file_paths(
                [*paths, bad], field="remove.path", table_root=ROOT, allow_external=False
            )


@given(st.text(alphabet=st.characters(min_codepoint=0x20, exclude_characters="\x7f%/\\:.")))
def test_names_without_control_characters_are_their_own_key(name: str) -> None:
    path = f"date=1/{name}x.parquet"
    assert check_path(path, field="add.path", table_root=ROOT, allow_external=False) == path
    [key] = check_file_paths([path], field="add.path", table_root=ROOT, allow_external=False)
    assert key == path
