"""Imports point down only (the README's "Layout" section).

Every ``.py`` file under ``protocol/``, ``storage/``, ``actors/`` and the face
folder ``raydelta/`` (its real files; its ``actors``/``protocol``/``storage``
entries are symlinks to the folders above and are skipped) is parsed with
``ast``. Every import counts wherever it stands: module level, inside a
function, under ``if TYPE_CHECKING:``, relative (``from ..storage import x``)
or a literal ``importlib.import_module("...")`` / ``__import__("...")``.

- ``protocol`` imports nothing of ours but itself, and none of Ray, fsspec or
  the modules that touch files, processes, sockets or clocks;
- ``storage`` imports ``protocol`` (and itself), never Ray nor ``actors``;
- ``actors`` imports ``storage`` and ``protocol`` (and itself), never the face;
- the face ``raydelta`` imports anything.

In every layer the old top-level names ``protocol``, ``storage`` and
``actors`` are wrong: the installed package has only ``raydelta``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Folder -> its dotted package once installed.
LAYERS: dict[str, str] = {
    "protocol": "raydelta.protocol",
    "storage": "raydelta.storage",
    "actors": "raydelta.actors",
    "raydelta": "raydelta",
}

# Which of our packages each layer may import (itself included).
ALLOWED_OURS: dict[str, set[str]] = {
    "protocol": {"protocol"},
    "storage": {"storage", "protocol"},
    "actors": {"actors", "storage", "protocol"},
    "raydelta": {"raydelta", "actors", "storage", "protocol"},
}

# Third-party and standard modules a layer must not import (the module or any
# submodule of it).
_IO_MODULES = {
    "os",
    "shutil",
    "subprocess",
    "socket",
    "socketserver",
    "time",
    "tempfile",
    "glob",
    "pathlib",
    "io",
    "threading",
    "multiprocessing",
    "asyncio",
    "select",
    "selectors",
    "signal",
    "fcntl",
    "mmap",
    "urllib.request",
    "http",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyarrow.dataset",
}
FORBIDDEN_EXTERNAL: dict[str, set[str]] = {
    "protocol": {"ray", "fsspec", *_IO_MODULES},
    "storage": {"ray"},
    "actors": set(),
    "raydelta": set(),
}

OLD_TOP_LEVEL = {"protocol", "storage", "actors"}


@dataclass(frozen=True)
class Import:
    file: Path
    line: int
    module: str  # absolute dotted name of what is imported
    text: str  # the import as written


def source_files(repo: Path = REPO) -> Iterator[tuple[str, Path]]:
    """``(layer, path)`` of every real ``.py`` file of the four layers."""
    for layer in LAYERS:
        root = repo / layer
        for path in sorted(root.rglob("*.py")):
            relative = path.relative_to(root)
            # raydelta/{actors,protocol,storage} are symlinks to the layers
            # above: their files belong to those layers, not to the face.
            parts = [root.joinpath(*relative.parts[: i + 1]) for i in range(len(relative.parts))]
            if any(part.is_symlink() for part in parts):
                continue
            yield layer, path


def _package_of(repo: Path, layer: str, path: Path) -> str:
    """The dotted package a file lives in (for relative imports)."""
    relative = path.relative_to(repo / layer).with_suffix("")
    # a/b.py and a/__init__.py both live in package a
    return ".".join([LAYERS[layer], *relative.parts[:-1]])


def _resolve_relative(package: str, level: int, module: str | None) -> str:
    base = package.split(".")
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imports_of(repo: Path, layer: str, path: Path) -> Iterator[Import]:
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as error:  # reported, not a crash of the whole check
        yield Import(path, error.lineno or 0, "<unparseable>", f"SyntaxError: {error.msg}")
        return
    package = _package_of(repo, layer, path)
    lines = source.splitlines()

    def text_of(node: ast.stmt | ast.expr) -> str:
        end = node.end_lineno or node.lineno
        return " ".join(line.strip() for line in lines[node.lineno - 1 : end])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            text = text_of(node)
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, alias.name, text)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(package, node.level, node.module)
            else:
                base = node.module or ""
            if base == "raydelta" or (node.level and not node.module):
                # ``from raydelta import storage`` and ``from . import x`` may
                # name submodules: judge each name as ``base.name``.
                # (``from raydelta import open_table`` is the face either way.)
                for alias in node.names:
                    yield Import(path, node.lineno, f"{base}.{alias.name}", text)
            else:
                yield Import(path, node.lineno, base, text)
        elif isinstance(node, ast.Call):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if (
                name in {"import_module", "__import__"}
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and not node.args[0].value.startswith(".")
            ):
                yield Import(path, node.lineno, node.args[0].value, text_of(node))


def layer_of_module(module: str) -> str | None:
    """Which of our layers a dotted module belongs to, or None if not ours."""
    parts = module.split(".")
    if parts[0] != "raydelta":
        return None
    if len(parts) >= 2 and parts[1] in OLD_TOP_LEVEL:
        return parts[1]
    return "raydelta"


def _matches(module: str, forbidden: set[str]) -> str | None:
    for name in forbidden:
        if module == name or module.startswith(name + "."):
            return name
    return None


def violations(repo: Path = REPO) -> list[str]:
    """One line per wrong import: ``file:line: 'import ...': why``."""
    found: list[str] = []
    for layer, path in source_files(repo):
        for imp in imports_of(repo, layer, path):
            where = f"{imp.file.relative_to(repo)}:{imp.line}: {imp.text!r}"
            if imp.module == "<unparseable>":
                found.append(f"{where}: cannot parse the file, so its imports are unchecked")
                continue
            top = imp.module.split(".")[0]
            if top in OLD_TOP_LEVEL:
                found.append(
                    f"{where}: the top-level name {top!r} does not exist once installed "
                    f"(use raydelta.{imp.module})"
                )
                continue
            target = layer_of_module(imp.module)
            if target is not None:
                if target not in ALLOWED_OURS[layer]:
                    allowed = ", ".join(sorted(ALLOWED_OURS[layer] - {layer})) or "nothing of ours"
                    found.append(
                        f"{where}: {layer} must not import {target} ({layer} may import: {allowed})"
                    )
                continue
            bad = _matches(imp.module, FORBIDDEN_EXTERNAL[layer])
            if bad is not None:
                found.append(f"{where}: {layer} must not import {bad}")
    return found


def test_the_layers_have_files() -> None:
    counts = {layer: 0 for layer in LAYERS}
    for layer, _ in source_files():
        counts[layer] += 1
    assert all(counts.values()), counts
    # The face's symlinks are skipped, not read as the face.
    assert (REPO / "raydelta" / "protocol").is_symlink()
    assert not any(
        path.is_relative_to(REPO / "raydelta" / "protocol")
        for layer, path in source_files()
        if layer == "raydelta"
    )


def test_imports_point_down_only() -> None:
    found = violations()
    assert not found, "imports that point the wrong way:\n" + "\n".join(found)


# The checker itself, on snippets: it must see what a grep would miss.
CASES = [
    ("protocol", "import ray\n", "protocol must not import ray"),
    ("protocol", "import os.path\n", "protocol must not import os"),
    ("protocol", "from time import monotonic\n", "protocol must not import time"),
    (
        "protocol",
        "from raydelta.storage.log import store as log_store\n",
        "protocol must not import storage",
    ),
    ("protocol", "from ..storage.snapshot import x\n", "protocol must not import storage"),
    ("protocol", "from raydelta import open_table\n", "protocol must not import raydelta"),
    ("storage", "import ray.util\n", "storage must not import ray"),
    ("storage", "from raydelta import actors\n", "storage must not import actors"),
    (
        "storage",
        "def f():\n    import raydelta.actors.table.client\n",
        "storage must not import actors",
    ),
    (
        "storage",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from raydelta.actors import x\n",
        "storage must not import actors",
    ),
    (
        "storage",
        "import importlib\nm = importlib.import_module('raydelta.actors.cluster')\n",
        "storage must not import actors",
    ),
    ("actors", "def f():\n    from raydelta.cli import main\n", "actors must not import raydelta"),
    ("actors", "import raydelta\n", "actors must not import raydelta"),
    ("actors", "from protocol.actions import AddFile\n", "does not exist once installed"),
]
CLEAN = [
    ("protocol", "import pyarrow as pa\nfrom raydelta.protocol.actions import AddFile\n"),
    ("protocol", "from . import actions\nfrom .errors import RaydeltaError\n"),
    ("storage", "import os\nimport fsspec\nfrom raydelta.protocol import actions\n"),
    ("actors", "import ray\nfrom raydelta.storage.snapshot import load_snapshot\n"),
    (
        "raydelta",
        "import ray\nfrom raydelta.actors.table import client\nfrom raydelta import cli\n",
    ),
]


def _check_snippet(tmp_path: Path, layer: str, code: str) -> list[str]:
    """Violations of a miniature repository holding ``code`` in ``layer``.

    Its face has a symlink to protocol/ holding a violating file: skipped
    as the real one is, or every case would report it twice."""
    root = tmp_path / "repo"
    for name in LAYERS:
        (root / name).mkdir(parents=True)
    (root / "protocol" / "__init__.py").write_text("")
    (root / "raydelta" / "protocol").symlink_to(root / "protocol")
    (root / layer / "module.py").write_text(code)
    return violations(root)


@pytest.mark.parametrize(("layer", "code", "expected"), CASES)
def test_checker_catches(tmp_path: Path, layer: str, code: str, expected: str) -> None:
    found = _check_snippet(tmp_path, layer, code)
    assert len(found) == 1, found
    assert expected in found[0], found
    # file and line of the offending import (always the snippet's last line)
    assert found[0].startswith(f"{layer}/module.py:{len(code.splitlines())}: "), found


@pytest.mark.parametrize(("layer", "code"), CLEAN)
def test_checker_allows(tmp_path: Path, layer: str, code: str) -> None:
    assert _check_snippet(tmp_path, layer, code) == []
