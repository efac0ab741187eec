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


# --- Inside a layer: one folder per concept, and which folder may import which.
#
# A *unit* of a layer is one of its folders (``storage/log/``) or one of its
# top-level modules (``storage/snapshot.py``). Each unit of ``storage`` and
# ``actors`` states, as data, which other units of its layer it may import;
# "*" means any. A unit missing here fails the check: a new folder says where
# it stands. Every import counts (module level, lazy, type-only), as above.
UNIT_IMPORTS: dict[str, dict[str, set[str]]] = {
    "storage": {
        "__init__": set(),
        "storage_options": set(),
        "table_location": set(),
        # the table-storage contract and its backends (one module each, a registry)
        "backends": {"storage_options"},
        "log": {"storage_options", "backends"},
        "data": {"log", "storage_options"},
        "catalog": {"log", "storage_options"},
        "snapshot": {"log", "data", "catalog", "compaction"},
        # compaction checks the head it compacts (lazily: snapshot replays compactions)
        "compaction": {"log", "snapshot"},
        "history": {"log", "snapshot"},
        "scan": {"log", "data", "snapshot"},
        "live_files": {"log", "data", "catalog", "snapshot"},
        "checkpoint": {"log", "data", "snapshot", "compaction"},
        "cleanup": {"log", "data", "snapshot", "checkpoint", "backends"},
    },
    "actors": {
        "__init__": {"*"},
        "cluster": set(),
        "faults": set(),
        "table": {"cluster", "faults"},
        # the catalog maintains its managed tables with the checkpoint machinery
        "catalog": {"table", "cluster", "faults", "checkpoint"},
        "checkpoint": {"cluster", "faults"},
        "cleanup": {"table", "cluster", "faults"},
    },
    "raydelta": {
        # the face's folders; its top-level modules compose them freely
        "cli": {"*"},
        "examples": {"*"},
        "dml": set(),
        "spark": set(),
        "uc": {"catalog"},
    },
}


def _module_name(repo: Path, layer: str, path: Path) -> str:
    relative = path.relative_to(repo / layer).with_suffix("")
    parts = [*LAYERS[layer].split("."), *relative.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit_of(module: str, layer: str) -> str:
    """The unit of ``layer`` that dotted ``module`` (one of ours) falls in."""
    parts = module.split(".")[len(LAYERS[layer].split(".")) :]
    return parts[0] if parts else "__init__"


def unit_violations(repo: Path = REPO) -> list[str]:
    """One line per import from one unit of a layer into a unit it may not use."""
    found: list[str] = []
    for layer, path in source_files(repo):
        rules = UNIT_IMPORTS.get(layer)
        if rules is None:
            continue
        unit = _unit_of(_module_name(repo, layer, path), layer)
        allowed = rules.get(unit)
        if allowed is None:
            if layer != "raydelta" or path.parent != repo / layer:
                found.append(f"{path.relative_to(repo)}: unit {layer}/{unit} has no import rule")
            continue
        if "*" in allowed:
            continue
        for imp in imports_of(repo, layer, path):
            if layer_of_module(imp.module) != layer:
                continue
            target = _unit_of(imp.module, layer)
            if target != unit and target not in allowed and target != "__init__":
                found.append(
                    f"{imp.file.relative_to(repo)}:{imp.line}: {imp.text!r}: {layer}/{unit} "
                    f"must not import {layer}/{target} (it may import: "
                    f"{', '.join(sorted(allowed)) or 'nothing else of ' + layer})"
                )
    return found


def _import_time_imports(repo: Path, layer: str, path: Path) -> Iterator[str]:
    """What a module imports while it is being imported: statements at module
    level (inside ``try``/``if`` too), not in functions, not ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _package_of(repo, layer, path)

    def walk(body: list[ast.stmt]) -> Iterator[str]:
        for node in body:
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = (
                    _resolve_relative(package, node.level, node.module)
                    if node.level
                    else node.module or ""
                )
                yield base
                yield from (f"{base}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    yield from walk(node.body)
                yield from walk(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    yield from walk(block)
                for handler in node.handlers:
                    yield from walk(handler.body)

    yield from walk(tree.body)


def folder_cycles(repo: Path = REPO) -> list[str]:
    """Import-time cycles among the modules of one folder, one line each."""
    modules = {_module_name(repo, layer, path): (layer, path) for layer, path in source_files(repo)}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (layer, path) in modules.items():
        folder = name.rpartition(".")[0] if path.name != "__init__.py" else name
        for target in _import_time_imports(repo, layer, path):
            if target in modules and target != name and target.rpartition(".")[0] == folder:
                graph[name].add(target)
    cycles: list[str] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return cycles


def test_units_import_only_what_their_rule_allows() -> None:
    found = unit_violations()
    assert not found, "imports between a layer's folders that break its rules:\n" + "\n".join(found)


def test_no_import_cycle_inside_a_folder() -> None:
    cycles = folder_cycles()
    assert not cycles, "import-time cycles inside a folder:\n" + "\n".join(cycles)


def test_unit_checker_catches_a_wrong_folder_import(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for name in LAYERS:
        (root / name).mkdir(parents=True)
    (root / "storage" / "log").mkdir()
    (root / "storage" / "log" / "store.py").write_text(
        "def f():\n    from raydelta.storage.cleanup import vacuum\n"
    )
    (root / "storage" / "gadgets").mkdir()
    (root / "storage" / "gadgets" / "x.py").write_text("")
    found = unit_violations(root)
    assert len(found) == 2, found
    assert "storage/log must not import storage/cleanup" in found[0] + found[1], found
    assert "unit storage/gadgets has no import rule" in found[0] + found[1], found


def test_cycle_checker_catches_a_cycle_inside_a_folder(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for name in LAYERS:
        (root / name).mkdir(parents=True)
    (root / "storage" / "log").mkdir()
    (root / "storage" / "log" / "a.py").write_text("from raydelta.storage.log import b\n")
    (root / "storage" / "log" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nfrom raydelta.storage.log.a import x\n"
    )
    (root / "storage" / "log" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from raydelta.storage.log import a\n"
    )
    (root / "storage" / "log" / "d.py").write_text(
        "def f():\n    from raydelta.storage.log import a\n"
    )
    (root / "storage" / "log" / "__init__.py").write_text("")
    cycles = folder_cycles(root)
    assert cycles == ["raydelta.storage.log.a -> raydelta.storage.log.b -> raydelta.storage.log.a"]


def test_every_package_folder_is_a_package_of_the_wheel() -> None:
    """``pyproject.toml`` lists the packages by name (``package-dir`` maps the
    layers): a new concept folder missing from the list would be missing from
    the wheel, and only the slow wheel build would notice."""
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    names = pyproject["tool"]["setuptools"]["packages"]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"listed twice: {twice}"
    listed = set(names)
    found = set()
    for folder, package in LAYERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder).parts
            if folder == "raydelta" and relative[:1] and relative[0] in LAYERS:
                continue  # the symlinked layers, found under their own folders
            found.add(".".join((package, *relative)))
    assert found == listed, f"missing: {sorted(found - listed)}; stale: {sorted(listed - found)}"
