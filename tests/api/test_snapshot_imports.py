"""``raydelta.load_snapshot`` reads a table from storage alone: no Ray, and
nothing of ``raydelta.actors`` (the one table location lives in
``protocol/``/``storage/``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake


def test_reading_a_snapshot_imports_nothing_of_the_actors(tmp_path: Path) -> None:

    write_deltalake(str(tmp_path / "t"), pa.table({"id": [1, 2]}))
    script = (
        "import sys, raydelta\n"
        f"snapshot = raydelta.load_snapshot({str(tmp_path / 't')!r})\n"
        "assert snapshot.version == 0, snapshot.version\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('raydelta.actors') or m == 'ray')\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
