"""The report in a real browser: headless Chromium (the distribution's package, driven by playwright
with its ``executable_path``; no browser download) opens report.html at 1400 and 800 px and finds no
console error, every image decoded, every table within 1,400 px, and, at 800 px, no horizontal scroll
of the page.

Built from the fabricated summary of ``test_html`` (one fold, alpha plots included, long file names
and a third baseline column), not a training run: the page's layout is the fact under test (laid
out as one plain wide table, the report is 1,203 px wide at 800 px). Skips,
saying why, only where no Chromium or no playwright can be found (``.ci/run`` installs Debian's
``chromium``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from foxhunt.report import write_report
from tests.report.test_html import full_summary, write_alpha_pngs

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WIDTHS = (1400, 800)
MAX_TABLE_PX = 1400


def chromium_path() -> str:
    """The system Chromium (FOXHUNT_CHROMIUM overrides); skip naming what is missing."""
    candidates = [os.environ.get("FOXHUNT_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    pytest.skip(
        "no Chromium found (/usr/bin/chromium or chromium on PATH; set FOXHUNT_CHROMIUM): "
        "install it with apt-get install chromium, as .ci/run does"
    )


@pytest.fixture(scope="module")
def browser() -> Any:
    exe = chromium_path()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (test extras)")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def report_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    run_dir = tmp_path_factory.mktemp("browser_run")
    write_alpha_pngs(run_dir)
    summary = full_summary()
    summary["folds"] = summary["folds"][:1]  # one fold's plots: the layout is the same for every fold
    # A real-data run's long file names and a third baseline: the widest page the report makes.
    summary["data"].update(
        synthetic=False,
        name="glbx-mdp3-20231218-20231225.mbo.dbn.zst",
        files=[f"/very/long/path/to/the/data/glbx-mdp3-2023121{d}.mbo.dbn.zst" for d in range(8)],
    )
    for fold in summary["folds"]:
        fold["baselines"]["reference"] = dict(fold["baselines"]["long"])
    return write_report(run_dir, summary).as_uri()


@pytest.mark.parametrize("width", WIDTHS)
def test_report_renders_cleanly_in_chromium(browser: Any, report_url: str, width: int) -> None:
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(report_url, wait_until="load")
    images = page.evaluate(
        "Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, w: i.naturalWidth}))"
    )
    scroll_width, client_width = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    if shots := os.environ.get("FOXHUNT_SHOTS"):  # screenshots for a person to look at
        page.screenshot(path=f"{shots}/report_{width}.png", full_page=True)
    tables = page.evaluate(
        "Array.from(document.querySelectorAll('table')).map(t => [t.closest('section').id, t.scrollWidth])"
    )
    page.close()
    # every table within 1,400 px, laid out at the wide window (the metrics table was 1,652 px)
    assert [(sec, w) for sec, w in tables if w > MAX_TABLE_PX] == []
    assert errors == []
    assert len(images) == 6  # 2 alpha plots + the fold's training, equity and actions + experts
    assert [i["alt"] for i in images if not (i["complete"] and i["w"] > 0)] == []
    if width <= 800:
        # the wide metrics table scrolls inside its own box, never the page
        assert scroll_width <= client_width, f"page scrolls sideways: {scroll_width} > {client_width} px"
