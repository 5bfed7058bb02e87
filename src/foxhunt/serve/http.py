"""The HTTP interface of ``foxhunt serve --port P [--host H]``: FastAPI on uvicorn, in a daemon thread.

``GET /health`` (ok and the rows served), ``GET /state`` (position, equity, net PnL, decisions, the
last decision, record-in to decision-out latency of the last row close, feed lag, faulted),
``GET /decisions?since=ROW`` (the ledger's decision lines after ROW: the ``decisions.csv`` fields,
an unfilled price as null, plus the row's net PnL, the equity after it and what forced it),
``GET /metrics`` (Prometheus text: :mod:`foxhunt.serve.metrics`) and ``GET /``, a live page that
polls ``/state`` and ``/decisions`` every second (inline HTML, CSS, JS and SVG: it loads nothing else).

``POST /flatten`` (the next decision is a market order to flat, whatever ``serve.on_fault`` says) and
``POST /stop`` (the service ends after the record in hand, as a replay's end does) need
``Authorization: Bearer $FOXHUNT_SERVE_TOKEN``; without that variable set they are refused. The GETs
are open to whoever reaches the port, so the server binds 127.0.0.1 unless ``--host`` says otherwise,
and a bind beyond the loopback interface is refused before anything starts when no token is set.

The service's loop runs in the main thread and never waits on the server: each request opens its own
SQLite connection to the ledger (WAL lets readers run beside the writer) and reads a few attributes.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import FastAPI, Header, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from foxhunt.domain.actions import Direction, OrderType, Urgency
from foxhunt.errors import FoxhuntError
from foxhunt.serve.ledger import Ledger

TOKEN_ENV = "FOXHUNT_SERVE_TOKEN"
DEFAULT_HOST = "127.0.0.1"
_START_TIMEOUT_S = 10.0


# --- binding and the token ----------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def check_bind(host: str) -> None:
    """Refuse (one line, exit 2) to bind beyond the loopback interface when no token is set: anyone
    on the network could then read the state, and nobody could flatten or stop the service."""
    if not is_loopback(host) and not os.environ.get(TOKEN_ENV):
        raise FoxhuntError(
            "--host",
            f"{host} is reachable from other machines and {TOKEN_ENV} is not set",
            f"set {TOKEN_ENV} to a secret in serve's environment (POST /flatten and /stop need it), "
            f"or bind {DEFAULT_HOST}",
        )


def authorised(authorization: str | None) -> bool:
    """Whether a request's Authorization header carries ``Bearer $FOXHUNT_SERVE_TOKEN`` (compared in
    constant time); always False while the variable is unset."""
    token = os.environ.get(TOKEN_ENV, "")
    if not token or authorization is None:
        return False
    return hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode())


# --- the application ------------------------------------------------------------------------------


@contextmanager
def _reading(service: Any) -> Iterator[Ledger]:
    """A connection of this request's own to the service's ledger, in one read transaction: its
    queries see one commit (WAL snapshot), not a row close that lands between two of them."""
    ledger = Ledger(service.ledger.path)
    try:
        ledger.db.execute("BEGIN")  # closed (rolled back, nothing to undo) with the connection
        yield ledger
    finally:
        ledger.close()


def _decision_rows(ledger: Ledger, since: int) -> list[dict[str, Any]]:
    """The decision lines after ``since`` as JSON objects: the ``decisions.csv`` fields (NaN, nothing
    filled, as null: JSON has no NaN) and the PnL columns the page's curve needs."""
    extra = {
        int(row): {"net": net, "equity": equity, "forced": forced}
        for row, net, equity, forced in ledger.db.execute(
            "SELECT row, net, equity, forced FROM decisions WHERE row > ?", (since,)
        )
    }
    out = []
    for d in ledger.decisions(since):
        line = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(d).items()}
        out.append({**line, **extra[d.row]})
    return out


def _enum_names() -> dict[str, dict[int, str]]:
    """The action branches' names by value, for the page (one source: foxhunt.domain.actions)."""
    return {
        branch: {int(m): m.name.lower() for m in enum}
        for branch, enum in (("direction", Direction), ("order_type", OrderType), ("urgency", Urgency))
    }


def build_app(service: Any) -> FastAPI:
    """The endpoints (module docs) over one :class:`~foxhunt.serve.service.Service`."""
    app = FastAPI(title="foxhunt serve", docs_url=None, redoc_url=None)  # the docs pages load a CDN
    page = PAGE.replace("__NAMES__", json.dumps(_enum_names()))

    def refused() -> JSONResponse:
        why = f"needs Authorization: Bearer ${TOKEN_ENV} (set in the service's environment)"
        return JSONResponse({"error": why}, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.get("/", response_class=HTMLResponse)
    def live_page() -> str:
        return page

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "rows": service.rows_done}

    @app.get("/state")
    def state() -> dict[str, Any]:
        with _reading(service) as ledger:
            summary = ledger.summary()
            last = summary["last_row"]
            lines = [] if last is None else _decision_rows(ledger, last - 1)
        return {**summary, **service.live_status(), "last_decision": lines[0] if lines else None}

    @app.get("/decisions")
    def decisions(since: int = -1) -> list[dict[str, Any]]:
        with _reading(service) as ledger:
            return _decision_rows(ledger, since)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/flatten", response_model=None)
    def flatten(authorization: Annotated[str | None, Header()] = None) -> dict[str, str] | JSONResponse:
        if not authorised(authorization):
            return refused()
        service.flatten()
        return {"flatten": "at the next decision"}

    @app.post("/stop", response_model=None)
    def stop(authorization: Annotated[str | None, Header()] = None) -> dict[str, str] | JSONResponse:
        if not authorised(authorization):
            return refused()
        service.stop()
        return {"stop": "after the current record"}

    return app


# --- the server -----------------------------------------------------------------------------------


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound here so that a taken port fails in the caller's
    thread (one line) rather than in the server's."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        why = f"cannot listen on {host}:{port} ({exc.strerror})"
        raise FoxhuntError("--port", why, "pick a free port, or 0 for any") from None
    sock.listen(128)
    return sock


class StatusServer:
    """uvicorn serving :func:`build_app` from a daemon thread until :meth:`close`."""

    def __init__(self, service: Any, host: str = DEFAULT_HOST, port: int = 0) -> None:
        import uvicorn

        check_bind(host)
        self.sock = _bind(host, port)
        self.host, self.port = host, int(self.sock.getsockname()[1])
        config = uvicorn.Config(
            build_app(service),
            log_config=None,  # leave the process's logging as the CLI set it
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        # Not the main thread: uvicorn installs no signal handlers, so Ctrl-C still reaches serve.
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True, name="foxhunt-serve-http"
        )
        self.thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the HTTP server on {host}:{self.port} did not start")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop accepting, finish the requests in flight (at most 2 s) and end the thread."""
        self.server.should_exit = True
        self.thread.join(timeout=5.0)
        self.sock.close()


def start_status_server(service: Any, port: int, host: str = DEFAULT_HOST) -> StatusServer:
    """Serve ``service``'s HTTP interface on ``host:port`` (0: a free port, see ``.port``)."""
    return StatusServer(service, host, port)


# --- the live page ----------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>foxhunt serve</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.2em; color: #1d2330; background: #fafbfc; }
  h1 { font-size: 1.25em; margin: 0 0 .6em; }
  #status { font-size: .8em; font-weight: normal; margin-left: .6em; color: #667; }
  #status.live { color: #15803d; } #status.down { color: #b91c1c; }
  .cards { display: flex; flex-wrap: wrap; gap: .6em; margin-bottom: 1em; }
  .card { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; padding: .5em .8em;
          min-width: 8em; }
  .card b { display: block; font-size: 1.3em; font-variant-numeric: tabular-nums; }
  .card span { font-size: .8em; color: #667; }
  svg { width: 100%; max-width: 900px; height: auto; background: #fff; border: 1px solid #dde1e7;
        border-radius: 6px; display: block; margin-bottom: 1em; }
  .wrap { overflow-x: auto; }
  table { border-collapse: collapse; font-variant-numeric: tabular-nums;
          display: block; max-width: 100%; overflow-x: auto; }
  th, td { padding: .25em .6em; text-align: right; border-bottom: 1px solid #e6e9ee; white-space: nowrap; }
  th { background: #eef1f5; } td.forced { color: #b91c1c; text-align: left; }
</style>
</head>
<body>
<h1>foxhunt serve <span id="status">connecting</span></h1>
<div class="cards">
  <div class="card"><span>position</span><b id="position">-</b></div>
  <div class="card"><span>net PnL</span><b id="net">-</b></div>
  <div class="card"><span>equity</span><b id="equity">-</b></div>
  <div class="card"><span>decisions</span><b id="decisions">-</b></div>
  <div class="card"><span>feed lag</span><b id="lag">-</b></div>
  <div class="card"><span>last row close</span><b id="latency">-</b></div>
  <div class="card"><span>faults</span><b id="faults">-</b></div>
</div>
<svg id="curve" viewBox="0 0 900 230" role="img" aria-label="cumulative net PnL ($) by decision">
  <!-- plot area x 80..890, y 10..170 (X0, X1, Y0, Y1 below); the axes' words never stretch -->
  <line x1="80" x2="80" y1="10" y2="170" stroke="#1d2330"/>
  <line x1="80" x2="890" y1="170" y2="170" stroke="#1d2330"/>
  <line id="zero" x1="80" x2="890" y1="90" y2="90" stroke="#c5cbd3" stroke-dasharray="4 4"/>
  <polyline id="pnl" fill="none" stroke="#0072B2" stroke-width="1.5"/>
  <g font-size="11" fill="#445">
    <text id="y-hi" x="74" y="14" text-anchor="end">-</text>
    <text id="y-zero" x="74" y="94" text-anchor="end">0</text>
    <text id="y-lo" x="74" y="174" text-anchor="end">-</text>
    <text id="x-first" x="80" y="186" text-anchor="start">-</text>
    <text id="x-last" x="890" y="186" text-anchor="end">-</text>
    <text x="485" y="210" text-anchor="middle">decision (its row; time UTC), oldest kept to latest</text>
    <text x="14" y="90" text-anchor="middle" transform="rotate(-90 14 90)">cumulative net PnL ($)</text>
  </g>
</svg>
<div class="wrap"><table id="recent">
  <thead><tr><th>row</th><th>time (UTC)</th><th>direction</th><th>magnitude</th><th>order</th>
  <th>urgency</th><th>position after</th><th>fill</th><th>price</th><th>net</th><th></th></tr></thead>
  <tbody></tbody>
</table></div>
<script>
"use strict";
const NAMES = __NAMES__;
const KEEP_POINTS = 5000, SHOW_ROWS = 25;
let since = -1, cumulative = 0;
const points = [], labels = [], recent = [];
const X0 = 80, X1 = 890, Y0 = 10, Y1 = 170;  // the plot area inside the axes (the svg's viewBox)

const $ = (id) => document.getElementById(id);
const num = (v, digits) => (v === null || v === undefined) ? "-" :  // + 0: -0 reads as 0
  (Number(v) + 0).toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
const dollars = (v) => (v < 0 ? "-$" : "$") + num(Math.abs(v), 0);
const name = (branch, v) => (NAMES[branch] || {})[v] || String(v);

async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  if (!r.ok) throw new Error(url + " answered " + r.status);
  return r.json();
}

function drawCurve() {
  if (points.length === 0) return;
  let lo = Math.min(0, ...points), hi = Math.max(0, ...points);
  if (hi === lo) { lo -= 1; hi += 1; }  // no PnL yet: the zero line in the middle
  const span = hi - lo;
  const n = Math.max(points.length - 1, 1), y = (v) => Y1 - (Y1 - Y0) * (v - lo) / span;
  const xy = points.map((v, i) => (X0 + (X1 - X0) * i / n).toFixed(1) + "," + y(v).toFixed(1));
  $("pnl").setAttribute("points", xy.join(" "));
  $("zero").setAttribute("y1", y(0).toFixed(1));
  $("zero").setAttribute("y2", y(0).toFixed(1));
  $("y-hi").textContent = dollars(hi);
  $("y-lo").textContent = dollars(lo);
  $("y-zero").setAttribute("y", (y(0) + 4).toFixed(1));
  $("y-zero").textContent = (y(0) > Y0 + 12 && y(0) < Y1 - 12) ? "$0" : "";  // apart from hi and lo
  $("x-first").textContent = labels[0];
  $("x-last").textContent = labels[labels.length - 1];
}

const when = (d) => new Date(d.ts_event / 1e6).toISOString().replace("T", " ").slice(0, 19);

function drawTable() {
  const body = document.querySelector("#recent tbody");
  body.replaceChildren(...recent.map((d) => {
    const tr = document.createElement("tr");
    const cells = [d.row, when(d),
      name("direction", d.direction), d.magnitude, name("order_type", d.order_type),
      name("urgency", d.urgency), num(d.position_after, 0), num(d.fill_contracts, 0),
      num(d.fill_price, 2), num(d.net, 2), d.forced || ""];
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.textContent = c;
      if (i === cells.length - 1) td.className = "forced";
      tr.appendChild(td);
    });
    return tr;
  }));
}

async function tick() {
  try {
    const [state, rows] = await Promise.all([getJSON("/state"), getJSON("/decisions?since=" + since)]);
    for (const d of rows) {
      cumulative += d.net;
      points.push(cumulative);
      labels.push("row " + d.row + ", " + when(d));
      recent.unshift(d);
      since = d.row;
    }
    points.splice(0, Math.max(points.length - KEEP_POINTS, 0));
    labels.splice(0, Math.max(labels.length - KEEP_POINTS, 0));
    recent.splice(SHOW_ROWS);
    $("position").textContent = num(state.position, 0);
    $("net").textContent = num(state.net_pnl, 2);
    $("equity").textContent = num(state.equity, 2);
    $("decisions").textContent = num(state.decisions, 0);
    $("lag").textContent = num(state.feed_lag_s, 1) + " s";
    $("latency").textContent = num(state.latency_us / 1000, 1) + " ms";
    $("faults").textContent = num(state.faults, 0) + (state.faulted ? " (fail-safe)" : "");
    if (rows.length) { drawCurve(); drawTable(); }
    $("status").textContent = "live, row " + state.rows;
    $("status").className = "live";
  } catch (err) {
    $("status").textContent = "no answer (" + err.message + ")";
    $("status").className = "down";
  }
  setTimeout(tick, 1000);
}
tick();
</script>
</body>
</html>
"""
