"""The run report: :func:`write_report` turns a run summary (``metrics.json``) into one
self-contained ``report.html`` plus its PNGs in ``plots/``."""

from foxhunt.report.html import ReportInputError, write_report

__all__ = ["ReportInputError", "write_report"]
