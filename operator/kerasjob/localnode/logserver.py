"""The sliver of the kubelet API that makes `kubectl logs` work: GET /containerLogs/...

The API server proxies `pods/log` to `https://<node InternalIP>:<kubeletEndpoint port>`.
Our control plane configures no kubelet client certificate or CA, so the API server neither
authenticates itself nor verifies us: a self-signed certificate does. The server listens on
the bridge address only (reachable from this machine and its Pods, not from elsewhere).
"""

from __future__ import annotations

import logging
import re
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

log = logging.getLogger(__name__)

MARKER = b"==== kerasjob-localnode "
_PATH = re.compile(r"^/containerLogs/([^/]+)/([^/]+)/([^/]+)$")


def ensure_certificate(directory: Path, name: str) -> tuple[Path, Path]:
    crt, key = directory / "serving.crt", directory / "serving.key"
    if not (crt.exists() and key.exists()):
        directory.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
             "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(crt)],
            check=True, capture_output=True,
        )  # fmt: skip
    return crt, key


def select_run(data: bytes, previous: bool) -> bytes:
    """The current container run's output (or the previous run's), without our marker lines:
    what the kubelet shows for `kubectl logs` (`--previous`)."""
    runs: list[list[bytes]] = [[]]
    for line in data.splitlines(keepends=True):
        if line.startswith(MARKER):
            if b": starting container " in line:
                runs.append([])
            continue
        runs[-1].append(line)
    if not runs[0] and len(runs) > 1:
        runs = runs[1:]
    if not previous:
        return b"".join(runs[-1])
    return b"".join(runs[-2]) if len(runs) >= 2 else b""


def tail_lines(data: bytes, n: int | None) -> bytes:
    if n is None:
        return data
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-n:]) if n > 0 else b""


class LogServer:
    def __init__(self, logs_dir: Path, cert_dir: Path, host: str, port: int, name: str) -> None:
        self.logs_dir = logs_dir
        self.stop_event = threading.Event()
        crt, key = ensure_certificate(cert_dir, name)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: object) -> None:
                log.debug("logserver: " + fmt, *args)

            def do_GET(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, name="logserver", daemon=True).start()

    def stop(self) -> None:
        self.stop_event.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlparse(req.path)
        m = _PATH.match(url.path)
        path = self.logs_dir / f"{m.group(1)}_{m.group(2)}_{m.group(3)}.log" if m else None
        if path is None or not path.exists():
            req.send_error(404, "no such container log on this node")
            return
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        previous = q.get("previous") == "true"
        raw = path.read_bytes()
        data = tail_lines(select_run(raw, previous), _int(q.get("tailLines")))
        # Follow until the container's run ends (our "exited with code" line), like kubelet.
        last_marker = raw.rfind(MARKER)
        finished = last_marker >= 0 and b" exited with code " in raw[last_marker:].split(b"\n")[0]
        follow = q.get("follow") == "true" and not previous and not finished
        req.send_response(200)
        req.send_header("Content-Type", "text/plain; charset=utf-8")
        if not follow:
            req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)
        if not follow:
            return
        offset = len(raw)
        try:
            while not self.stop_event.is_set():
                with path.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                chunk = chunk[: chunk.rfind(b"\n") + 1]  # whole lines only
                offset += len(chunk)
                for line in chunk.splitlines(keepends=True):
                    if line.startswith(MARKER):
                        if b" exited with code " in line:
                            return
                        continue
                    req.wfile.write(line)
                req.wfile.flush()
                time.sleep(0.3)
        except OSError:
            return  # the client went away


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
