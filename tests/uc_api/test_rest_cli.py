"""``raydelta catalog serve``: the server as a command, in its own process (and its
own local Ray), answering Unity Catalog's API with the admin token it wrote to
a 0600 file (never printed: a log of its output holds no secret).
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
        # the token is never printed: stderr names the 0600 file holding it
        said = ""
        for line in process.stderr:
            said += line
            if line.startswith("admin token written to "):
                break
        token_file = tmp_path / "warehouse" / "admin-token"
        assert f"admin token written to {token_file} (mode 0600)" in said
        assert (token_file.stat().st_mode & 0o777) == 0o600
        token = token_file.read_text().strip()
        assert token.startswith("catalog-admin."), token
        assert token not in said
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
