"""The compiles' HTML reports over HTTP, so the link on `compile_report` opens from the UI.

A browser does not follow a `file://` link from a page served over http, so the asset's
`report_url` names this server instead (`$DEEP_PIPELINE_REPORT_URL`, default
http://127.0.0.1:3001/). It serves `<compile>/report.html` of the store and a list of
them, read-only and nothing else: a compile folder also holds traces and the calls log.
`make ui` starts it beside `dagster dev`; `deep-pipeline serve-reports` starts it alone.
"""

from __future__ import annotations

import html
import os
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

URL_VARIABLE = "DEEP_PIPELINE_REPORT_URL"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 3001
REPORT_NAME = "report.html"


def report_url(compile_key: str) -> str:
    """Where the compile's report is served: the deployment's base URL, else this machine's `make ui`."""
    base = os.environ.get(URL_VARIABLE) or f"http://{DEFAULT_HOST}:{DEFAULT_PORT}/"
    return f"{base.rstrip('/')}/{quote(compile_key)}/{REPORT_NAME}"


def local_address() -> tuple[str, int]:
    """Where this machine serves the reports: the base URL's port when it names this machine, else the default."""
    url = urlsplit(os.environ.get(URL_VARIABLE) or "")
    if url.hostname in ("127.0.0.1", "localhost") and url.port:
        return DEFAULT_HOST, url.port
    return DEFAULT_HOST, DEFAULT_PORT


def report_file(store: Path, path: str) -> Path | None:
    """The report a request path names, or None: only `/<compile>/report.html` of a compile in the store."""
    parts = unquote(path.split("?", 1)[0]).strip("/").split("/")
    if len(parts) != 2 or parts[1] != REPORT_NAME or parts[0] in ("", ".", "..") or "\\" in parts[0]:
        return None
    file = store / parts[0] / REPORT_NAME
    return file if file.is_file() and file.resolve().parent.parent == store.resolve() else None


def index_page(store: Path) -> str:
    keys = sorted(p.parent.name for p in store.glob(f"*/{REPORT_NAME}")) if store.is_dir() else []
    rows = "".join(f'<li><a href="/{quote(k)}/{REPORT_NAME}">{html.escape(k)}</a></li>' for k in keys)
    body = f"<ul>{rows}</ul>" if rows else "<p>No compile has a report yet.</p>"
    return f"<!doctype html><meta charset=utf-8><title>deep_pipeline reports</title><h1>Reports</h1>{body}"


class _Reports(BaseHTTPRequestHandler):
    def __init__(self, *args, store: Path, **kwargs):
        self.store = store
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.split("?", 1)[0] in ("/", ""):
            self._send(index_page(self.store).encode())
        elif (file := report_file(self.store, self.path)) is not None:
            self._send(file.read_bytes())
        else:
            self.send_error(HTTPStatus.NOT_FOUND, "only /<compile>/report.html is served")

    def _send(self, body: bytes) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's name)
        pass  # a request line per page view would drown `dagster dev`'s own output


def report_server(store: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """A server bound to (host, port) serving the store's reports; `serve_forever()` runs it."""
    return ThreadingHTTPServer((host, port), partial(_Reports, store=Path(store)))
