"""A real PostgreSQL server on this machine for tests: the machine's own binaries on loopback.

``start_postgres_server()`` finds the server binaries (``pg_config --bindir``,
else ``/usr/lib/postgresql/<newest>/bin``, else ``initdb`` on ``PATH``),
creates a cluster in a fresh temporary directory with ``initdb``, starts it
with ``pg_ctl`` on ``127.0.0.1`` and a free port, and returns a
:class:`PostgresServer`: a superuser ``raydelta`` with a random password
(``scram-sha-256`` on TCP, so a wrong password is refused as on a real
server) and a database factory. The session fixture ``postgres_server``
(``tests/conftest.py``) starts one per test session; use a fresh database per
test (:meth:`PostgresServer.new_database`).

Invariants:
- PostgreSQL refuses to run as root: as root, every server command runs as
  the ``postgres`` user (``runuser -u postgres --``), which owns the
  temporary directory. As anyone else, as that user.
- The server listens on loopback only (its Unix socket in the temporary
  directory, not ``/var/run/postgresql``), with the defaults a real one has
  (``fsync`` and ``synchronous_commit`` on), and holds test data only.
- The server stops, and its directory is removed, when the process that
  started it ends, however it ends: a watchdog child (``python -m
  tests.postgres_server --watch DIR``) holds a pipe from the parent and stops
  the server when the pipe closes. :meth:`PostgresServer.stop` closes it.
- Missing binaries are a failure naming the package to install
  (``apt-get install postgresql``, as ``.ci/run`` does), never a skip.
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO_ROOT = Path(__file__).resolve().parent.parent
SUPERUSER = "raydelta"
SERVER_USER = "postgres"
INSTALL_HINT = (
    "PostgreSQL's server binaries (initdb, pg_ctl, postgres) were not found: install them "
    "(Debian/Ubuntu: apt-get install postgresql; .ci/run does it when initdb is missing)"
)


class PostgresNotInstalledError(RuntimeError):
    """No PostgreSQL server binaries on this machine (the message says what to install)."""


def find_bindir() -> Path:
    """The directory of ``initdb`` and ``pg_ctl`` (module doc), or
    :class:`PostgresNotInstalledError`."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        result = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=False
        )
        if result.returncode == 0 and result.stdout.strip():
            candidates.append(Path(result.stdout.strip()))

    def major(path: str) -> int:
        name = Path(path).parent.name
        return int(name) if name.isdigit() else -1

    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major)[::-1]]
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    raise PostgresNotInstalledError(INSTALL_HINT)


def _as_server_user(command: list[str]) -> list[str]:
    """``command`` run as the ``postgres`` user when we are root (module doc)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser") is None:
        raise PostgresNotInstalledError("running as root needs runuser (util-linux) for PostgreSQL")
    return ["runuser", "-u", SERVER_USER, "--", *command]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(command: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _as_server_user(command),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
        **options,
    )


@dataclass
class PostgresServer:
    """A running server (module doc). ``dsn()`` is a URL with the password;
    ``new_database()`` creates an empty database and returns its URL."""

    host: str
    port: int
    password: str = field(repr=False)
    directory: Path
    watchdog: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def dsn(self, database: str = "postgres", *, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return (
            f"postgresql://{SUPERUSER}:{quote(secret, safe='')}@{self.host}:{self.port}/{database}"
        )

    def new_database(self, prefix: str = "test") -> str:
        """Create a fresh database (``CREATE DATABASE``) and return its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        """Stop the server and remove its directory (the watchdog does both)."""
        if self.watchdog is not None and self.watchdog.poll() is None:
            assert self.watchdog.stdin is not None
            self.watchdog.stdin.close()
            try:
                self.watchdog.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()
                self.watchdog.wait(timeout=10)


def _start_cluster(bindir: Path, directory: Path, password: str) -> int:
    """initdb in ``directory/data`` and start it on a free port; returns the port."""
    data = directory / "data"
    pwfile = directory / "pwfile"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        owner = pwd.getpwnam(SERVER_USER)
        for path in (directory, pwfile):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    directory.chmod(0o700)
    pwfile.chmod(0o600)
    init = _run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]
    )
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr[-2000:]}")
    last_error = ""
    for _ in range(5):  # a free port may be taken between probing and binding
        port = _free_port()
        options = f"-h 127.0.0.1 -p {port} -k {directory} -c max_connections=200"
        start = _run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(directory / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "120",
                "start",
            ]
        )
        if start.returncode == 0:
            return port
        log = directory / "server.log"
        last_error = log.read_text()[-2000:] if log.exists() else start.stderr[-2000:]
    raise RuntimeError(f"PostgreSQL did not start: {last_error}")


def start_postgres_server() -> PostgresServer:
    """Create and start a cluster (module doc); stopped with its watchdog."""
    bindir = find_bindir()
    directory = Path(tempfile.mkdtemp(prefix="raydelta-pg-"))
    password = secrets.token_urlsafe(18)
    try:
        port = _start_cluster(bindir, directory, password)
    except BaseException:
        _stop_cluster(bindir, directory)
        raise
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "tests.postgres_server", "--watch", str(directory)],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C of the test run reaches us through the pipe only
    )
    return PostgresServer(
        host="127.0.0.1", port=port, password=password, directory=directory, watchdog=watchdog
    )


def _stop_cluster(bindir: Path, directory: Path) -> None:
    data = directory / "data"
    if (data / "postmaster.pid").exists():
        _run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"])
    shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watch", required=True, help="stop this cluster when stdin closes")
    args = parser.parse_args(argv)
    try:
        sys.stdin.buffer.read()
    finally:
        _stop_cluster(find_bindir(), Path(args.watch))


if __name__ == "__main__":
    main()
