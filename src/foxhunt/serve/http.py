"""A small status endpoint for ``foxhunt serve --port P`` (standard library only, read-mostly).

``GET /health`` (ok and the rows served), ``GET /state`` (position, equity, net PnL, last decision,
record-in to decision-out latency, feed lag, faulted), ``GET /decisions?since=ROW`` (the ledger's
decision lines after ROW). ``POST /flatten`` (the next decision is the fail-safe one) and
``POST /stop`` need ``Authorization: Bearer $FOXHUNT_SERVE_TOKEN``; without that variable set they
are refused. It binds 127.0.0.1 only. Each request reads its own SQLite connection (WAL lets
readers run beside the service's writer).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from foxhunt.serve.ledger import Ledger

TOKEN_ENV = "FOXHUNT_SERVE_TOKEN"


def start_status_server(service: Any, port: int) -> ThreadingHTTPServer:
    """Serve ``service``'s status on 127.0.0.1:``port`` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            return None

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body, default=float).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlparse(self.path)
            if url.path == "/health":
                self._send(200, {"ok": True, "rows": service.rows_done})
                return
            ledger = Ledger(service.ledger.path)
            try:
                if url.path == "/state":
                    self._send(200, {**ledger.summary(), **service.live_status()})
                elif url.path == "/decisions":
                    since = int(parse_qs(url.query).get("since", ["-1"])[0])
                    self._send(200, [asdict(d) for d in ledger.decisions(since)])
                else:
                    self._send(404, {"error": f"no {url.path}; try /health, /state, /decisions?since=ROW"})
            finally:
                ledger.close()

        def do_POST(self) -> None:  # noqa: N802
            token = os.environ.get(TOKEN_ENV, "")
            if not token or self.headers.get("Authorization", "") != f"Bearer {token}":
                why = f"needs Authorization: Bearer ${TOKEN_ENV} (set in the service's environment)"
                self._send(401, {"error": why})
                return
            path = urlparse(self.path).path
            if path == "/flatten":
                service.flatten_now = True
                self._send(200, {"flatten": "at the next decision"})
            elif path == "/stop":
                service.stopped = True
                self._send(200, {"stop": "after the current record"})
            else:
                self._send(404, {"error": f"no {path}; try /flatten or /stop"})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="foxhunt-serve-http").start()
    return server
