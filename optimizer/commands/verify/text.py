"""The text `fleetplan verify` prints: `verify_text` (measured against predicted p99s per
workload, token billing, the attainments) and `trace_runs_text` (`verify --trace`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from optimizer.commands.traces.text import side_by_side_text


def _numbers(x) -> str:
    return f"{x:,.4g}"


def verify_text(result, plan_dir) -> str:
    """A verification ``result`` of the plan in ``plan_dir``, as `fleetplan verify` prints it."""
    sm = result.summary
    lines = [result.side_by_side().to_string(index=False, float_format=_numbers)]
    if sm.get("token_billing"):
        billing = pd.DataFrame(sm["token_billing"]["by_workload"]).T.rename_axis("workload")
        lines.append(f"\ntoken billing vs GPU-seconds (price list: {sm['token_billing']['provider']}; USD per million "
                     "output tokens):")
        lines.append(billing.to_string(float_format=lambda x: f"{x:,.3g}"))
    state = sm.get("state")
    if state:
        lines.append(f"replayed: {state.replace('@', ' at ')} taken at the peak — after its notice, before replacements "
                     "finish their cold start; the routes of that state are the slice's, scaled to its flows")
    for parent, b in (sm.get("prompt_split") or {}).items():
        lines.append(f"{parent}, split by prompt length into {' and '.join(b['parts'])}: over both parts TTFT "
                     f"attainment {b['ttft_attainment']:.4f}, ITL {b['itl_attainment']:.4f} "
                     f"(required {b['required']:.4f}) → " + ("met" if b["passes"] else "MISSED"))
    lines.append(_attainment(sm, f", goodput {sm['goodput_fraction']:.4f}"))
    lines.append(f"written: {Path(plan_dir) / ('verify_spot_loss.csv' if state else 'verify.csv')}")
    return "\n".join(lines)


def _attainment(sm: dict, goodput: str = "") -> str:
    """One run's line: requests simulated, the attainments, and whether every objective held."""
    return (f"{sm['requests_simulated']:,} requests simulated in {sm['seconds']:.0f} s; TTFT attainment ≥ "
            f"{sm['ttft_attainment_min']:.4f}, ITL attainment ≥ {sm['itl_attainment_min']:.4f}{goodput} → "
            + ("every objective met" if sm["all_objectives_met"] else "OBJECTIVES MISSED"))


def trace_runs_text(runs: dict, table, plan_dir) -> str:
    """The Poisson and trace ``runs`` of one plan and their side-by-side ``table``."""
    lines = [side_by_side_text(table)]
    for r in runs.values():
        sm = r.summary
        lines.append(f"{sm['arrivals']}: " + _attainment(sm))
    lines.append(f"written: {Path(plan_dir) / 'verify.csv'}, verify_trace.csv, verify_compare.csv")
    return "\n".join(lines)
