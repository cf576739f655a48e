"""The summary's ``prompt_split`` block and its lines in the plan text: per workload with
candidate thresholds, the split the plan kept (or none), the program's option weights, each
part's share and prompt lengths, and the whole plans with and without the split."""

from __future__ import annotations

from optimizer.curves.lengths import prompt_lengths
from optimizer.instance.prompt_split import part_ids, with_split


def split_summary(s, kept: dict, chosen: dict, weights, whole_usd: float, split_usd: float | None,
                  refused: dict) -> dict:
    """``s`` as written (with candidates); ``kept`` / ``chosen``: per parent the threshold the
    plan kept / the program chose (None: whole); ``weights``: per parent the master LP's weight
    of each option it offered, keyed "whole" and by threshold (None: no candidate was servable)."""
    workloads = {}
    for k, w in s.workloads.items():
        if not w.prompt_split_candidates_tokens:
            continue
        block = {"threshold_tokens": kept[k], "program_choice_tokens": chosen[k],
                 "candidates_tokens": list(w.prompt_split_candidates_tokens),
                 "option_weights": {o: round(max(z, 0.0), 6) + 0.0 for o, z in (weights or {}).get(k, {}).items()},
                 "parts": {}}
        if chosen[k] is not None:
            split = with_split(s, {k: chosen[k]})
            for wid in part_ids(k, chosen[k]):
                part = split.workloads[wid]
                lengths = prompt_lengths(part, s.models[part.model].max_context)
                block["parts"][wid] = {"share": part.prompt_part.share, "slo_attainment": part.slo_attainment,
                                       "isl_mean_tokens": part.isl_mean_tokens,
                                       "isl_median_tokens": lengths.quantile(0.5),
                                       "isl_tail_tokens": part.isl_p99_tokens}
        workloads[k] = block
    return {"choice": "the master LP's option weights; the whole plan made with and without the chosen split, the "
                      "cheaper kept", "whole_plan_usd": whole_usd, "split_plan_usd": split_usd,
            "workloads": workloads, "refused": refused}


def prompt_split_lines(block: dict | None) -> list[str]:
    """The plan text's lines on prompt-length splits (none without candidates)."""
    if not block:
        return []
    whole, split = block["whole_plan_usd"], block["split_plan_usd"]
    if split is None:
        lines = [f"  prompt-length split: no split chosen (whole ${whole:,.0f}/year)"]
    else:
        lines = [f"  prompt-length split: whole ${whole:,.0f}/year, split ${split:,.0f}/year "
                 f"({100 * (split / whole - 1):+.1f} %)"]
    for k, b in block["workloads"].items():
        weights = ", ".join(f"{o} {z:.2f}" for o, z in b["option_weights"].items())
        if b["threshold_tokens"] is None:
            lines.append(f"    {k:20s} whole (program's weights: {weights or 'none servable'})")
            continue
        parts = "; ".join(f"{wid} {100 * p['share']:.1f} % of requests, prompt mean {p['isl_mean_tokens']:,.0f}, "
                          f"{100 * p['slo_attainment']:.1f} % within the objectives up to {p['isl_tail_tokens']:,.0f}"
                          for wid, p in b["parts"].items())
        lines.append(f"    {k:20s} split at {b['threshold_tokens']:,.0f} tokens: {parts} (weights: {weights})")
    for what, why in block["refused"].items():
        lines.append(f"    not offered: {what}: {why}")
    return lines
