"""The README's Python blocks run, so the README cannot rot.

Every fenced block tagged ``python`` in ``README.md`` runs, in order, in one
namespace, in this process (attached to the session's Ray cluster) with the
working directory changed to a fresh ``tmp_path``: relative paths in the
README land there. Blocks tagged otherwise (``pycon``, ``text``, ``bash``,
``py``, untagged) are shown, never run; tag a block ``python`` only if it runs
as written after the blocks above it. A block that raises fails the test,
with the README's own line numbers in the traceback. Afterwards every
raydelta actor (table, checkpoint, cleanup) of a table under ``tmp_path`` is
killed, and so is every catalog actor the blocks started.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.actor_teardown import kill_actors_under

README = Path(__file__).resolve().parents[1] / "README.md"

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    tag: str
    first_line: int  # 1-based README line of the block's first code line
    code: str


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced code block (CommonMark fences: ``` or ~~~, 3 or more)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        info = opening["info"].strip()
        tag = info.split()[0].lower() if info else ""
        body: list[str] = []
        index += 1
        start = index + 1
        while index < len(lines):
            closing = _FENCE.match(lines[index])
            if (
                closing is not None
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            line = lines[index]
            strip = min(indent, len(line) - len(line.lstrip(" ")))
            body.append(line[strip:])
            index += 1
        else:
            raise AssertionError(f"README.md:{start - 1}: a ```{tag} block is never closed")
        index += 1
        blocks.append(Block(tag, start, "\n".join(body) + "\n"))
    return blocks


def python_blocks() -> list[Block]:
    return [
        block
        for block in fenced_blocks(README.read_text(encoding="utf-8"))
        if block.tag == "python"
    ]


def test_fence_parser() -> None:
    text = "x\n```python\na = 1\n```\n\n```pycon\n>>> 1\n```\n~~~~python\nb = '```'\n~~~~\n"
    blocks = fenced_blocks(text)
    assert [(b.tag, b.first_line, b.code) for b in blocks] == [
        ("python", 3, "a = 1\n"),
        ("pycon", 7, ">>> 1\n"),
        ("python", 10, "b = '```'\n"),
    ]


def _kill_new_catalogs(before: set[str]) -> None:
    """Kill the ``catalog:<name>`` actors the README started (they are named by
    catalog, not by table location)."""
    import ray

    from raydelta.actors.cluster import NAMESPACE

    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"]
        if entry["namespace"] == NAMESPACE and name.startswith("catalog:") and name not in before:
            try:
                ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
            except ValueError:  # died in between
                continue


def run_blocks(blocks: list[Block], filename: str = str(README)) -> dict[str, Any]:
    """Execute ``blocks`` in order in one namespace; the first that raises fails."""
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    for block in blocks:
        # Padding keeps the README's line numbers in tracebacks.
        source = "\n" * (block.first_line - 1) + block.code
        code = compile(source, filename, "exec")
        try:
            exec(code, namespace)
        except BaseException as error:
            raise AssertionError(
                f"the ```python block at README.md:{block.first_line} raised "
                f"{type(error).__name__}: {error}"
            ) from error
    return namespace


def test_a_raising_block_fails_loudly() -> None:
    blocks = fenced_blocks("```python\nx = 1\n```\n\n```python\n\nraise KeyError(x)\n```\n")
    with pytest.raises(AssertionError, match=r"README.md:6 raised KeyError: 1") as caught:
        run_blocks(blocks)
    # the traceback points at the README line that raised
    cause = caught.value.__cause__
    assert isinstance(cause, KeyError)
    frames = [f for f in traceback.extract_tb(cause.__traceback__) if f.filename == str(README)]
    assert [f.lineno for f in frames] == [7]


def test_readme_python_blocks_run(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = python_blocks()
    assert blocks, "README.md has no ```python block: the API tour is not tested"
    monkeypatch.chdir(tmp_path)
    before = {entry["name"] for entry in ray_cluster.util.list_named_actors(all_namespaces=True)}
    try:
        run_blocks(blocks)
    finally:
        kill_actors_under(tmp_path)
        _kill_new_catalogs(before)
