"""A real S3 API on this machine for tests and benchmarks: moto's server on loopback.

``start_s3_server()`` runs ``python -m tests.s3_server`` in a child process
(its own interpreter, so the server never competes for the test process's
GIL) on ``127.0.0.1`` and a free port, and returns an :class:`S3Server`: the
endpoint, the credentials moto accepts, a bucket factory, and the options in
both spellings users pass (s3fs's ``storage_options`` and deltalake's
``AWS_*`` keys). The session fixture ``s3_server`` (``tests/conftest.py``)
starts one per test session; use a fresh bucket per test.

Invariants:
- Conditional writes are atomic here, as on S3. moto 5.2.5 checks
  ``If-None-Match: *`` and then stores the object in two steps, and its
  threaded server runs requests at once: two racing conditional PUTs of one
  key can both succeed (measured: 6 of 200 keys raced by 8 threads had two
  winners once the server's thread switch interval was 1 us). The app is
  therefore wrapped so that requests that write (PUT, POST, DELETE) run one
  at a time under one lock; reads stay concurrent.
- S3 answers one of two racing conditional writes with ``409
  ConditionalRequestConflict``; moto never does. :meth:`S3Server.inject_conflicts`
  makes the server answer the next N conditional PUTs into a bucket that way
  (a fault injected into the real server, per bucket, so tests sharing the
  server do not see each other's faults).
- The server listens on loopback only and holds test data only; the
  credentials are moto's dummies, never real ones.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
REGION = "eu-west-1"
ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key"
_WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})
FAULT_PATH = "/_raydelta/faults/conflicts"


_CONFLICT_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ConditionalRequestConflict</Code>'
    b"<Message>A conflicting conditional operation is currently in progress against this "
    b"resource. Please try again.</Message></Error>"
)


class _SerializedWrites:
    """WSGI middleware: one writing request at a time (see the module docstring),
    and the conflict fault (:meth:`S3Server.inject_conflicts`)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.conflicts: dict[str, int] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "")
        if path == FAULT_PATH and method == "POST":
            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
            with self.lock:
                self.conflicts[query["bucket"][0]] = int(query["count"][0])
            start_response("204 No Content", [])
            return [b""]
        if method not in _WRITE_METHODS:
            return self.app(environ, start_response)
        with self.lock:
            bucket = path.lstrip("/").split("/", 1)[0]
            if (
                method == "PUT"
                and environ.get("HTTP_IF_NONE_MATCH") == "*"
                and self.conflicts.get(bucket, 0) > 0
            ):
                self.conflicts[bucket] -= 1
                environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                start_response(
                    "409 Conflict",
                    [
                        ("Content-Type", "application/xml"),
                        ("Content-Length", str(len(_CONFLICT_BODY))),
                    ],
                )
                return [_CONFLICT_BODY]
            # Flask builds the whole response inside the call; list() drains
            # any lazy body while the lock is still held.
            return list(self.app(environ, start_response))


def _exit_at_eof() -> None:
    sys.stdin.read()
    os._exit(0)


def serve(host: str = "127.0.0.1", port: int = 0, *, watch_stdin: bool = False) -> None:
    """Run moto's S3 server (writes serialised) in this process until killed;
    print the endpoint on the first line of stdout. With ``watch_stdin``, exit
    when stdin closes (the parent that started it is gone)."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = _SerializedWrites(DomainDispatcherApplication(create_backend_app))
    server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
    bound_host, bound_port = server.server_address[:2]
    print(f"http://{bound_host}:{bound_port}", flush=True)
    # Nothing else goes to the parent's pipe (a full pipe would block the server).
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    if watch_stdin:  # the parent holds our stdin open: when it dies, we stop
        threading.Thread(target=_exit_at_eof, daemon=True).start()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server.serve_forever()


@dataclass
class S3Server:
    """A running moto S3 server (see the module docstring)."""

    endpoint: str
    process: subprocess.Popen[str] | None = field(default=None, repr=False)
    _counter: itertools.count[int] = field(default_factory=itertools.count, repr=False)
    _fs: Any = field(default=None, repr=False)

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs keywords for this server."""
        return {
            "endpoint_url": self.endpoint,
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"region_name": REGION},
        }

    @property
    def aws_options(self) -> dict[str, str]:
        """The same, as the ``AWS_*`` keys deltalake (delta-rs) users pass."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def new_bucket(self, prefix: str = "raydelta") -> str:
        """Create a fresh, empty bucket and return its name."""
        name = f"{prefix}-{next(self._counter)}-{uuid.uuid4().hex[:8]}".lower()
        self.filesystem().mkdir(name)
        return name

    def filesystem(self) -> Any:
        """An s3fs filesystem of this server (no listing cache), for checks."""
        if self._fs is None:
            import s3fs

            self._fs = s3fs.S3FileSystem(
                skip_instance_cache=True, use_listings_cache=False, **self.storage_options
            )
        return self._fs

    def new_table_uri(self, name: str = "table") -> str:
        """``s3://<fresh bucket>/<name>``."""
        return f"s3://{self.new_bucket()}/{name}"

    def inject_conflicts(self, bucket: str, count: int) -> None:
        """Answer the next ``count`` conditional PUTs (``If-None-Match: *``) into
        ``bucket`` with S3's ``409 ConditionalRequestConflict`` (what S3 says to
        one of two racing conditional writes), storing nothing."""
        query = urllib.parse.urlencode({"bucket": bucket, "count": count})
        request = urllib.request.Request(f"{self.endpoint}{FAULT_PATH}?{query}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 204

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_s3_server() -> S3Server:
    """Start ``python -m tests.s3_server`` and wait for its endpoint."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.s3_server", "--watch-stdin"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("http://"):
        process.kill()
        raise RuntimeError(f"moto server did not start (exit code {process.poll()})")
    return S3Server(endpoint=line, process=process)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--watch-stdin", action="store_true", help="exit when stdin closes")
    args = parser.parse_args(argv)
    serve(args.host, args.port, watch_stdin=args.watch_stdin)


if __name__ == "__main__":
    main()
