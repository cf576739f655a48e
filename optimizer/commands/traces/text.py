"""The text of the request logs: `demand_text` (what `fleetplan demand` derived from them) and
`side_by_side_text` (`verify --trace`: the Poisson run and the log's replay per workload)."""

from __future__ import annotations

from optimizer.results.text import text_table

DEMAND_COLUMNS = [
    ("metro", "metro", ""), ("workload", "workload", ""), ("requests", "requests", ",d"),
    ("rate_per_s_mean", "req/s", ".3g"), ("isl_mean_tokens", "prompt mean", ",.0f"),
    ("isl_p99_tokens", "prompt p99", ",.0f"), ("osl_mean_tokens", "output mean", ",.0f"),
    ("osl_p99_tokens", "output p99", ",.0f"), ("peak_to_mean_per_minute", "peak/mean 60 s", ".2f"),
    ("peak_to_mean_per_10s", "10 s", ".2f"), ("peak_to_mean_per_second", "1 s", ".1f"),
    ("dispersion_per_minute", "var/mean min", ".1f"),
]


def demand_text(derived, out) -> str:
    """Per (metro, workload) pair: its figures, then its notes; the files when written to ``out``."""
    lines = [text_table([p.as_dict() for p in derived.pairs], DEMAND_COLUMNS)]
    for p in derived.pairs:
        for note in p.notes:
            lines.append(f"  {p.metro or '-'} / {p.workload or '-'}: {note}")
    for r in derived.reuse:
        lines.append(f"  {r.workload}: {r.line()}")
    if out:
        lines.append(f"written: {out / 'demand.csv'}, workloads.csv, hours.csv, lengths.csv, scenario.yaml, "
                     "derived.json, report.html" + (", kv_reuse.csv" if derived.reuse else ""))
    return "\n".join(lines)


def side_by_side_text(table) -> str:
    """Per workload: Poisson / trace figures and the objective, one line each."""
    def pair(row, key, fmt):
        return " / ".join(format(row[f"{key}_{run}"], fmt) for run in ("poisson", "trace"))

    rows = [{"workload": r["workload"], "requests": pair(r, "requests", ",.0f"),
             "ttft": f"{pair(r, 'ttft_p99_ms', ',.0f')} / {r['ttft_p99_ms_objective']:g}",
             "itl": f"{pair(r, 'itl_p99_ms', '.1f')} / {r['itl_p99_ms_objective']:g}",
             "attainment": f"{pair(r, 'ttft_attainment', '.4f')} (≥ {r['slo_attainment']:g})",
             "passes": " / ".join("yes" if r[f"passes_{run}"] else "NO" for run in ("poisson", "trace"))}
            for r in table.to_dict("records")]
    return text_table(rows, [("workload", "workload", ""), ("requests", "requests P / T", ""),
                             ("ttft", "p99 TTFT ms P / T / objective", ""), ("itl", "p99 ITL ms P / T / objective", ""),
                             ("attainment", "TTFT attainment P / T", ""), ("passes", "passes P / T", "")])
