"""What a user installs: one import package ``raydelta``, nothing else.

- The wheel (built with ``python -m build --wheel`` from a copy of the source
  tree, so a stale ``build/`` cannot leak into it) holds exactly one top-level
  name, ``raydelta``, besides its ``.dist-info``; the layers, the bundled
  example table and every ``py.typed`` are inside; it declares the
  ``raydelta`` console script.
- ``import raydelta`` works, and every name of ``raydelta.__all__`` resolves,
  when pyspark, deltalake, duckdb, pandas and psycopg cannot be imported.
- The old top-level names ``protocol``, ``storage`` and ``actors`` are not
  importable outside the repository.

Each check runs in a subprocess from a directory outside the repository with
``PYTHONPATH`` unset, as a user's shell would.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("protocol", "storage", "actors")
OPTIONAL = ("pyspark", "deltalake", "duckdb", "pandas", "psycopg")

# Not part of any build: the test suite, tools' caches, earlier build output.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "tests",
    "benchmarks",
)


def _user_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONSTARTUP", None)
    return env


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    # symlinks=True keeps raydelta/{actors,protocol,storage} as the links they are.
    shutil.copytree(REPO, source, symlinks=True, ignore=_NOT_SOURCE)
    out = work / "dist"
    result = _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)],
        cwd=work,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    (built,) = out.glob("raydelta-*.whl")
    return zipfile.ZipFile(built)


def _dist_info(names: list[str]) -> str:
    (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    return info


def test_wheel_installs_only_raydelta(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    info = _dist_info(names)
    record = wheel.read(f"{info}/RECORD").decode()
    recorded = [line.rsplit(",", 2)[0] for line in record.splitlines() if line.strip()]
    assert sorted(recorded) == sorted(names), "RECORD and the archive disagree"
    top_level = {name.split("/")[0] for name in recorded} - {info}
    assert top_level == {"raydelta"}, f"top-level names installed: {sorted(top_level)}"


def test_wheel_holds_the_layers_the_example_and_py_typed(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for package in ("raydelta", *(f"raydelta/{layer}" for layer in LAYERS)):
        assert f"{package}/__init__.py" in names, package
        assert f"{package}/py.typed" in names, package
    for layer in LAYERS:
        # every module of the layer's folder and of its concept folders, installed under raydelta/
        expected = {
            f"raydelta/{layer}/{p.relative_to(REPO / layer).as_posix()}"
            for p in (REPO / layer).rglob("*.py")
        }
        assert expected <= names, sorted(expected - names)
    face_root = REPO / "raydelta"
    face = {
        f"raydelta/{p.relative_to(face_root).as_posix()}"
        for p in face_root.rglob("*.py")
        if p.relative_to(face_root).parts[0] not in (*LAYERS, "examples")
    }
    # every module of the public face, its subpackages (dml, spark, uc, ...) included
    assert face <= names, sorted(face - names)

    examples = REPO / "raydelta" / "examples"
    shipped = {
        f"raydelta/examples/{p.relative_to(examples).as_posix()}"
        for p in examples.rglob("*")
        if p.is_file() and not p.name.startswith(".")  # .crc checksums are optional
    }
    assert shipped, "no bundled example in the source tree"
    assert shipped <= names, f"example files missing from the wheel: {sorted(shipped - names)}"


def test_wheel_declares_the_console_script(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(f"{_dist_info(names)}/entry_points.txt").decode())
    assert parser.has_option("console_scripts", "raydelta"), dict(parser.items())
    target = parser.get("console_scripts", "raydelta")
    module, _, function = target.partition(":")
    assert function, target
    assert f"{module.replace('.', '/')}.py" in names, target


_BLOCKING_IMPORT = textwrap.dedent(
    """
    import importlib.abc
    import sys

    BLOCKED = set(sys.argv[1:])

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    for name in BLOCKED:
        try:
            __import__(name)
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit(f"the blocker let {name} through")

    import raydelta

    names = getattr(raydelta, "__all__", None)
    assert isinstance(names, (list, tuple)) and names, "raydelta.__all__ is missing or empty"
    missing = [n for n in names if not hasattr(raydelta, n)]
    assert not missing, f"raydelta.__all__ names that do not resolve: {missing}"
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
    assert not loaded, loaded
    old = sorted(m for m in sys.modules if m.partition(".")[0] in ("protocol", "storage", "actors"))
    assert not old, f"old top-level names imported: {old}"
    print(len(names), "names")
    """
)


def test_import_raydelta_without_optional_dependencies(tmp_path: Path) -> None:
    result = _run([sys.executable, "-c", _BLOCKING_IMPORT, *OPTIONAL], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:] or result.stdout[-4000:]
    assert result.stdout.strip().endswith("names"), result.stdout


@pytest.mark.parametrize("name", LAYERS)
def test_old_top_level_names_are_not_importable(tmp_path: Path, name: str) -> None:
    result = _run([sys.executable, "-c", f"import {name}"], cwd=tmp_path)
    assert result.returncode != 0, f"`import {name}` worked outside the repository"
    assert f"ModuleNotFoundError: No module named '{name}'" in result.stderr, result.stderr
