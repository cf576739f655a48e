"""HTML reports, each one offline file: a plan folder's report.html (`plan_page`), and the
pages `fleetplan compare --out` and `fleetplan sweep` write beside their tables."""

from optimizer.commands.report.plan_page import SECTIONS, render, write_report

__all__ = ["SECTIONS", "render", "write_report"]
