"""``raydelta catalog serve``: the server as a command, in its own process (and its
own local Ray), answering Unity Catalog's API with the admin token it printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.uc_api.conftest import uc_request


@pytest.mark.slow
def test_catalog_serve_command(tmp_path: Path) -> None:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raydelta.cli",
            "catalog",
            "serve",
            "--port",
            "0",
            "--store",
            str(tmp_path / "warehouse"),
            "--name",
            "cli-test",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        token = ""
        for line in process.stderr:
            if line.startswith("admin token: "):
                token = line.split(": ", 1)[1].strip()
                break
        assert token.startswith("catalog-admin."), token
        api = url + "/api/2.1/unity-catalog"
        assert uc_request("POST", api + "/catalogs", {"name": "main"}, token=token)[0] == 200
        status, listed = uc_request("GET", api + "/catalogs", token=token)
        assert status == 200 and [c["name"] for c in listed["catalogs"]] == ["main"]
        status, error = uc_request("GET", api + "/catalogs")
        assert (status, error["error_code"]) == (401, "UNAUTHENTICATED")
        assert (tmp_path / "warehouse" / "catalog.sqlite").exists()
        assert (tmp_path / "warehouse" / "unity_namespaces.json").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    assert process.returncode == 0
