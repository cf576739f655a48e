"""Page assembly shared by the plan, comparison and sweep reports: one offline HTML file.

Each chart is a <figure> holding its interactive Plotly version and its static PNG. Plotly's
JavaScript is embedded once per page (nothing is fetched: no CDN, no fonts, no map tiles).
On screen a figure shows the interactive version once it has drawn (the PNG until then, or
for good when scripts are off); in print the stylesheet hides the interactive versions and
shows the PNGs, so the page prints to PDF cleanly. When every figure has drawn and every
image decoded, the body gets data-rendered="ok" (a headless browser's cue)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import plotly.io as pio
from plotly.offline import get_plotlyjs

from optimizer.base.outputs import write_text_atomic
from optimizer.commands.report.drawing import Chart
from optimizer.commands.report.folder import MissingInput
from optimizer.commands.report.formatting import esc

STYLE = """
:root { --ink: #1d2330; --muted: #5b6475; --line: #d9dde5; --accent: #1f5fa8; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); margin: 0; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 32px 64px; }
h1 { font-size: 26px; margin: 0 0 2px; } .subtitle { color: var(--muted); margin: 0 0 10px; }
nav { position: sticky; top: 0; background: #fff; border-bottom: 1px solid var(--line); padding: 6px 0; z-index: 10;
      font-size: 13px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
section { margin: 26px 0 40px; }
h2 { font-size: 20px; border-bottom: 2px solid var(--ink); padding-bottom: 3px; margin: 0 0 10px; }
h3 { font-size: 16px; margin: 20px 0 6px; }
.lead { font-size: 17px; max-width: 72em; margin: 8px 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(165px, 1fr)); gap: 10px; margin: 14px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; background: #f7f8fa; }
.card .value { font-size: 24px; font-weight: 600; } .card .label { color: var(--muted); font-size: 13px; }
.table-wrap { overflow-x: auto; }
table.t { border-collapse: collapse; font-size: 13px; min-width: 60%; }
table.t th { text-align: left; font-weight: 600; border-bottom: 1.5px solid var(--ink); padding: 4px 10px;
             vertical-align: bottom; }
table.t td { padding: 3px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
table.t .num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.t td.total { font-weight: 600; border-top: 1.5px solid var(--ink); }
figure.chart { margin: 0 0 8px; }
figure.chart .static { max-width: 100%; display: block; }
figure.chart.live .static { display: none; }
.note { color: var(--muted); font-size: 13px; }
.missing { color: #7a4300; background: #fff5e2; padding: 8px 12px; border-radius: 4px; }
ul.risks li { margin: 4px 0; }
code { background: #f1f2f5; padding: 0 3px; border-radius: 3px; }
@media print {
  @page { size: A4; margin: 12mm; }
  body { font-size: 10pt; } main { max-width: none; padding: 0; }
  nav, .hint { display: none !important; }
  figure.chart .interactive { display: none !important; }
  figure.chart .static, figure.chart.live .static { display: block !important; width: 100%; }
  h2, h3 { break-after: avoid; } figure, .card, tr { break-inside: avoid; }
  .cards { grid-template-columns: repeat(3, 1fr); }
  table.t { font-size: 8pt; } .table-wrap { overflow: visible; }
}
"""

RENDER = """
(function () {
  var figures = Array.prototype.slice.call(document.querySelectorAll("figure.chart"));
  var drawn = figures.map(function (fig) {
    var spec = JSON.parse(fig.querySelector("script.plot-spec").textContent);
    return Plotly.newPlot(fig.querySelector(".interactive"), spec.data, spec.layout,
                          {responsive: true, displayModeBar: false}).then(function () { fig.classList.add("live"); });
  });
  function decoded() {
    return Array.prototype.every.call(document.images, function (i) { return i.complete && i.naturalWidth > 0; });
  }
  window.addEventListener("load", function () {
    Promise.all(drawn).then(function () {
      document.body.setAttribute("data-rendered", decoded() ? "ok" : "broken");
    }, function () { document.body.setAttribute("data-rendered", "broken"); });
  });
})();
"""


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    body: str  # HTML
    nav: str  # its name in the navigation bar


def section(section_id: str, title: str, build: Callable[[], str], nav: str = "") -> Section:
    """A section whose body ``build`` makes; when the folder lacks what it needs
    (`MissingInput`), the section says so instead."""
    try:
        body = build()
    except MissingInput as exc:
        body = f'<p class="missing">This section cannot be drawn: {esc(exc)}.</p>'
    return Section(section_id, title, body, nav or title)


def _json_for_script(fig) -> str:
    """The figure as JSON safe inside <script>: no '<', '>' or '&' survives unescaped."""
    text = pio.to_json(fig, validate=False, engine="json")
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def chart_html(chart: Chart, alt: str) -> str:
    image = base64.b64encode(chart.png).decode()
    note = f'<p class="note">{esc(chart.note)}</p>' if chart.note else ""
    return (f'<figure class="chart"><div class="interactive"></div>'
            f'<script type="application/json" class="plot-spec">{_json_for_script(chart.figure)}</script>'
            f'<img class="static" alt="{esc(alt)}" src="data:image/png;base64,{image}">{note}</figure>')


def page(title: str, subtitle: str, sections: list[Section]) -> str:
    """The whole page; ``subtitle`` is HTML (callers escape what they put in it)."""
    nav = "".join(f'<a href="#{esc(s.id)}">{esc(s.nav)}</a>' for s in sections)
    body = "".join(f'<section id="{esc(s.id)}"><h2>{esc(s.title)}</h2>{s.body}</section>' for s in sections)
    plotly_js = get_plotlyjs().replace("</script", "<\\/script")
    hint = ('<p class="hint note">Charts: hover for values; click a legend entry to hide it, double-click to show '
            "it alone; a menu above a chart picks a workload. Printing shows static images.</p>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{STYLE}</style></head>
<body><main><header><h1>{esc(title)}</h1><p class="subtitle">{subtitle}</p></header>
<nav>{nav}</nav>{hint}
{body}
</main>
<script>{plotly_js}</script>
<script>{RENDER}</script>
</body></html>
"""


def write_page(path: str | Path, text: str) -> Path:
    """Write to a temporary name in the same folder, then rename: never a half-written page."""
    path = Path(path)
    write_text_atomic(path, text)
    return path
