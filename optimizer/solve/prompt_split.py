"""Which prompt-length split the program takes (`optimizer.instance.prompt_split`).

The instance holds every candidate: each parent whole and each of its thresholds' two parts,
with the option weights of `formulations.routing` (Σ_o z[p,o] = 1, each option's demand × its
weight). The master LP — the plan's program with continuous replicas, each pool priced at its
largest size's capacity, the same program the default mode bounds with — chooses the weights
with the fleet, the routing and every other decision; the option of largest weight is the one
the whole plan is then made with (the pipeline also plans the parent whole and keeps the
cheaper whole plan, because a relaxation does not see the nodes that rounding more, smaller
pools costs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from formulations import prompt_option_columns
from formulations.modes import Mode
from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import Instance, build_instance
from optimizer.instance.prompt_split import SplitOption, program_options, with_every_option
from optimizer.scenario import Scenario
from optimizer.solve.cache import ModelCache
from optimizer.solve.pricing import at_sizes, pool_sizes


@dataclass(frozen=True)
class OptionWeights:
    """The master LP's weight of each option per parent (options in `Instance.prompt_options`
    order) and its objective ($ a year)."""

    weights: dict[str, list[float]]
    objective_usd: float

    def chosen(self) -> dict[str, int]:
        """Per parent the option of largest weight (ties: the earlier option — the parent whole)."""
        return {p: int(np.argmax(np.round(w, 9))) for p, w in self.weights.items()}


def option_weights(inst: Instance, seconds: float, threads: int | None, backend: str = "highs") -> OptionWeights:
    """Solve the master LP of ``inst`` (which has `Instance.prompt_options`) and read its option
    weights."""
    largest, _ = pool_sizes(inst)
    coefficients = at_sizes(inst, largest)
    cache = ModelCache()
    cache.prepare(inst, Mode.plan_master(gpus_per_rps=coefficients), backend)
    cache.price_pools(coefficients)
    out = cache.run(seconds, 1e-6, threads, "prompt-split choice")
    cols = prompt_option_columns(cache.lp)
    weights = {p: [float(out.x[cols[(p, i)]]) for i in range(len(o))] for p, o in inst.prompt_options.items()}
    return OptionWeights(weights, float(out.objective))


def weigh_options(s: Scenario, base_dir: Path, seconds: float, threads: int | None,
                  backend: str = "highs") -> tuple[OptionWeights, dict[str, list[SplitOption]]]:
    """The master LP of ``s`` with every candidate option of its workloads
    (`prompt_split.with_every_option`; ``base_dir``: where its network graph's paths start):
    its weights, and per parent the options they weigh. Without candidates, the scenario's
    master LP alone."""
    every, offered = with_every_option(s)
    inst = build_instance(every, rtt_matrix(build_graph(every, base_dir), every))
    return option_weights(replace(inst, prompt_options=program_options(offered)), seconds, threads, backend), offered
