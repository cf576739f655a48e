"""Pools by prompt length: a workload split at a prompt length into two workloads of its own.

A workload with ``prompt_split_candidates_tokens`` may be served as two parts: its requests
with prompts below a threshold T and those at or above it, each with pools of its own — so
short prompts no longer queue behind long ones, and each pool's batch and tail are set by its
own lengths. With the prompt length X lognormal (`optimizer.curves.lengths`), the short part
carries F(T) of the requests and the long part 1 − F(T), F(T) = Φ((ln T − μ)/σ); each part's
prompt mean is that of X conditioned on its range, its output lengths, objectives, cache and
diurnal profile the parent's, its demand the parent's × its share (per metro and hour: a
router that sends a request by its prompt length thins the parent's arrivals). The parent's
attainment holds over both parts together (`part_attainments`): the short part meets the
objectives a little more often, the long part less, as the parent's own tail did.

Part ids are ``{parent}-lt{T}`` and ``{parent}-ge{T}`` (kept DNS-safe for the manifests).
Which threshold, if any, the plan takes is the program's choice (`optimizer.solve.prompt_split`);
this module only writes the scenarios it chooses among and the one it chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.curves.lengths import LengthDistribution
from optimizer.scenario.catalogue import PromptPart, Workload
from optimizer.scenario.model import Scenario

MIN_PROMPT_PART_SHARE = 0.005  # a part with fewer requests than this cannot keep pools of its own busy
# the short part's misses per request over the parent's: its tail is short prompts, cheap to hold,
# so nearly all of the parent's misses stay with the long prompts, where they were whole
SHORT_MISS_SHARE = 0.1


@dataclass(frozen=True)
class SplitOption:
    """One way to serve a parent: ``threshold_tokens`` None is the parent whole; else its two parts
    as (workload id, share of the parent's requests)."""

    threshold_tokens: float | None
    parts: tuple[tuple[str, float], ...]


def part_ids(parent: str, threshold_tokens: float) -> tuple[str, str]:
    """(short part, long part) ids of ``parent`` split at ``threshold_tokens``."""
    t = f"{threshold_tokens:g}".replace("+", "")
    return f"{parent}-lt{t}", f"{parent}-ge{t}"


def candidates(s: Scenario) -> dict[str, list[float]]:
    """Per workload with candidate thresholds, the thresholds (ascending)."""
    return {k: list(w.prompt_split_candidates_tokens) for k, w in s.workloads.items()
            if w.prompt_split_candidates_tokens}


def program_options(offered: dict[str, list[SplitOption]]) -> dict[str, list[tuple[str, ...]]]:
    """`with_every_option`'s options as the instance holds them (`Instance.prompt_options`):
    per parent, each option's workloads."""
    return {p: [tuple(w for w, _ in o.parts) for o in opts] for p, opts in offered.items()}


def part_attainments(attainment: float, short_share: float) -> tuple[float, float]:
    """(short, long) parts' attainments that keep the parent's over all its requests: the short
    part misses at `SHORT_MISS_SHARE` of the parent's rate, a_s = 1 − ε·(1 − a), and the long part
    takes the rest, a_l = 1 − (1 − a)·(1 − ε·f_s) / (1 − f_s) (at least 1/2, the field's floor),
    so f_s·a_s + (1 − f_s)·a_l = a. Whole, the parent's misses are its longest prompts; split
    so, the long part's tail prompt stays about the parent's p99 (which sits at the long part's
    (a − f_s)/(1 − f_s) quantile) while the short part's tail is its own, far shorter."""
    miss = 1.0 - attainment
    short = 1.0 - SHORT_MISS_SHARE * miss
    long = 1.0 - miss * (1.0 - SHORT_MISS_SHARE * short_share) / (1.0 - short_share)
    return short, min(max(long, 0.5), short)


def _parts(k: str, w: Workload, threshold_tokens: float, max_tokens: float) -> dict[str, Workload]:
    """The two parts; each one's ``isl_p99_tokens`` is its prompt at its own attainment (the tail
    its TTFT objective covers, as the p99 prompt is for a workload at 0.99)."""
    whole = LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, max_tokens)
    attainments = part_attainments(w.slo_attainment, whole.cdf(threshold_tokens))
    out = {}
    for wid, (lo, hi), q in zip(part_ids(k, threshold_tokens), ((0.0, threshold_tokens), (threshold_tokens, None)),
                                attainments):
        lengths = whole.part(lo, float("inf") if hi is None else hi)
        mean, tail = lengths.conditional_mean_tokens, lengths.quantile(q)
        out[wid] = w.model_copy(update={
            "id": wid, "isl_mean_tokens": mean, "isl_p99_tokens": max(tail, mean), "slo_attainment": q,
            "peak_requests_per_s_per_million_people": w.peak_requests_per_s_per_million_people * lengths.share,
            "prompt_split_candidates_tokens": None,
            "prompt_part": PromptPart(parent=k, from_tokens=lo, below_tokens=hi, share=lengths.share,
                                      parent_isl_mean_tokens=w.isl_mean_tokens, parent_isl_p99_tokens=w.isl_p99_tokens),
            "rationale": f"{k}'s prompts {'below' if hi is not None else 'of at least'} {threshold_tokens:,.0f} tokens "
                         f"({100 * lengths.share:.1f} % of its requests)"})
    return out


def _with_workloads(s: Scenario, replaced: dict[str, dict[str, Workload]]) -> Scenario:
    """``s`` with each workload of ``replaced`` in place of its key (its mix and demand-table
    rows copied to each, a table's rates × the part's share)."""
    if not replaced:
        return s
    workloads = {}
    for k, w in s.workloads.items():
        workloads.update(replaced.get(k, {k: w}))
    share = {wid: 1.0 if w.prompt_part is None else w.prompt_part.share
             for ws in replaced.values() for wid, w in ws.items()}

    def copies(rows, scaled: bool):
        out = []
        for r in rows:
            if r.workload not in replaced:
                out.append(r)
                continue
            for wid in replaced[r.workload]:
                update = {"workload": wid}
                if scaled:
                    update["requests_per_s"] = r.requests_per_s * share[wid]
                out.append(r.model_copy(update=update))
        return out

    demand = s.demand.model_copy(update={
        "mix": copies(s.demand.mix, False),
        "table": None if s.demand.table is None else copies(s.demand.table, True)})
    return s.model_copy(update={"workloads": workloads, "demand": demand})


def with_split(s: Scenario, chosen: dict[str, float | None]) -> Scenario:
    """``s`` with each workload of ``chosen`` split at its threshold (None: kept whole); the
    candidates are dropped either way, so the result plans as written."""
    replaced = {}
    for k, t in chosen.items():
        w = s.workloads[k]
        if t is None:
            replaced[k] = {k: w.model_copy(update={"prompt_split_candidates_tokens": None})}
        else:
            replaced[k] = _parts(k, w, t, s.models[w.model].max_context)
    return _with_workloads(s, replaced)


def with_every_option(s: Scenario) -> tuple[Scenario, dict[str, list[SplitOption]]]:
    """``s`` with every candidate's parts beside each parent (the parent kept whole as the
    first option), and per parent its options. Each part's demand is as if its option took
    all of the parent's: the program that chooses scales it by the option's weight."""
    replaced, options = {}, {}
    for k, thresholds in candidates(s).items():
        w = s.workloads[k]
        ws = {k: w.model_copy(update={"prompt_split_candidates_tokens": None})}
        options[k] = [SplitOption(None, ((k, 1.0),))]
        for t in thresholds:
            parts = _parts(k, w, t, s.models[w.model].max_context)
            ws.update(parts)
            options[k].append(SplitOption(t, tuple((wid, p.prompt_part.share) for wid, p in parts.items())))
        replaced[k] = ws
    return _with_workloads(s, replaced), options
