"""``pylog status --serve HOST:PORT``: the status page over HTTP, built afresh per request.

``/`` is the page (reloading itself every ``refresh_seconds``), ``/status.json`` the JSON
report; the HTTP status is 200 either way (the exit status of the report is in both).
Requests are served one at a time: a status report is a few small reads.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Callable

from pylog.errors import ConfigError


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` listens on 127.0.0.1); ConfigError naming --serve otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError("--serve", f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def make_server(host: str, port: int, build_report: Callable, refresh_seconds: int) -> HTTPServer:
    """An HTTP server (not yet serving) answering with fresh reports."""
    from pylog.warehouse.page import status_html
    from pylog.warehouse.report import report_json

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 -- http.server's naming
            path = self.path.split("?", 1)[0]
            if path not in ("/", "/index.html", "/status.json"):
                self._send(404, "text/plain; charset=utf-8", b"not found: try / or /status.json\n")
                return
            report = build_report()
            if path == "/status.json":
                body = json.dumps(report_json(report), indent=1).encode()
                self._send(200, "application/json", body)
            else:
                self._send(200, "text/html; charset=utf-8", status_html(report, refresh_seconds).encode())

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 -- the base class's name
            pass

    try:
        return HTTPServer((host, port), Handler)
    except OSError as exc:
        raise ConfigError("--serve", f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve(host: str, port: int, build_report: Callable, refresh_seconds: int) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM ends the process)."""
    server = make_server(host, port, build_report, refresh_seconds)
    bound_host, bound_port = server.server_address[:2]
    print(f"pylog status: serving http://{bound_host}:{bound_port}/ (refreshing every "
          f"{refresh_seconds}s); Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
