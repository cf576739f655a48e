"""The text of the serving look-ups: `curves_text` (`fleetplan curves`, a model's operating
table on an accelerator) and `budget_text` (`fleetplan budget`, a TTFT budget waterfall)."""

from __future__ import annotations

from optimizer.results.text import text_table

CURVE_COLUMNS = [
    ("tp", "GPUs", "d"), ("weights_gb_per_gpu", "weights GB/GPU", ".1f"), ("kv_budget_gb", "KV GB", ".1f"),
    ("max_concurrency", "max conc.", "d"), ("prefill_ms", "prefill ms", ".1f"), ("decode_batch", "batch", "d"),
    ("decode_step_ms", "step ms", ".1f"), ("decode_tokens_per_s", "tok/s", ",.0f"),
    ("usd_per_million_output_tokens", "$/M out", ".3f"), ("knee_batch", "knee", "d"),
    ("floor_usd_per_million_output_tokens", "floor $/M", ".3f"),
    ("colocated_tokens_per_s", "coloc tok/s", ",.0f"), ("colocated_usd_per_million_output_tokens", "coloc $/M", ".3f"),
]

BUDGET_STEPS = (("rtt_ms", "network round trip"), ("overhead_ms", "tokenise + safety + admission"),
                ("prefill_ms", "prefill"), ("kv_transfer_ms", "KV transfer"),
                ("first_token_ms", "first token (join + step)"))


def curves_text(out: dict, model_id: str, gpu_id: str, *, dtype: str, kv_dtype: str, isl: float, osl: float,
                itl_ms: float, price: float) -> str:
    """The operating table ``out`` of ``model_id`` on ``gpu_id``, under a line of its inputs."""
    lines = [f"{model_id} on {gpu_id} ({dtype} weights, {kv_dtype} KV): "
             f"KV {out['kv_bytes_per_token']:,.0f} B/token; prompt {isl:g}, output {osl:g} tokens; "
             f"ITL objective {itl_ms:g} ms; ${price:g}/GPU-h"]
    if not out["configs"]:
        lines.append(f"the weights of {model_id} do not fit {gpu_id} at any allowed parallel degree")
    else:
        ep = any(row.get("ep") for row in out["configs"])  # layout and fabric columns where EP is offered
        columns = CURVE_COLUMNS[:1] + [("layout", "layout", "s"), ("fabric", "fabric", "s")] + CURVE_COLUMNS[1:]
        rows = [{**row, "layout": "EP" if row.get("ep") else "TP"} for row in out["configs"]]
        lines.append(text_table(rows, columns if ep else CURVE_COLUMNS))
        lines.append("tok/s: decode alone at its operating batch; coloc: the same replica also prefilling each "
                     "request's prompt (chunked), as the plan's colocated pools see it")
    return "\n".join(lines)


def budget_text(out: dict, best, workload: str, metro: str, ttft_p99_ms: float) -> str:
    """The waterfall ``out`` (`best`'s figures) of ``workload`` from ``metro`` at ``out['site']``."""
    lines = [f"TTFT budget, {workload} from {metro} at {out['site']} ({best.mode}: {best.prefill_config}"
             + (f" → {best.decode_config}" if best.mode == "disaggregated" else "") + ")"]
    spent = 0.0
    for key, label in BUDGET_STEPS:
        spent += out[key]
        lines.append(f"  {label:32s} {out[key]:8.1f} ms   (cumulative {spent:7.1f})")
    lines.append(f"  {'left for queueing':32s} {out['queue_budget_ms']:8.1f} ms   of a {ttft_p99_ms:g} ms p99 "
                 "objective" + ("" if best.feasible else "  → INFEASIBLE"))
    return "\n".join(lines)
