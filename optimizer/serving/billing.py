"""Token billing vs GPU-seconds: the accounting view of a plan.

A per-token price list charges a request of isl prompt and osl output tokens

    charge = (isl · ((1 − h) · p_in + h · p_cached) + osl · p_out) / 1e6      [USD]

with h the workload's prompt-cache hit rate (p_cached = p_in where the list has no cached
rate). The plan pays for GPU-hours instead; its cost per million output tokens is the
workload's share of the fleet's cost (`plan._cost_by_workload`) over its served output tokens.
The two agree on the total only by accident, and they split it differently between input and
output: a list prices an input token at a fixed fraction of an output token, while the GPU
time of a prompt depends on the workload's shape — prefill is compute bound and batched over
the whole prompt (cheap per token), cached prefixes cost almost nothing, and output tokens are
dear when a tight ITL objective holds the decode batch small. So per workload:

* ``gpu_cost_usd_per_million_output_tokens`` vs ``list_usd_per_million_output_tokens``
  (the list charge of the same requests per million output tokens) and their ratio;
* ``input_share_of_charge`` = isl·p_in,eff / (isl·p_in,eff + osl·p_out) vs
  ``input_share_of_gpu_hours`` = prefill GPU-hours / all replica GPU-hours (disaggregated
  pools exactly; colocated pools by the estimated prompt share of their iterations,
  `ServingConfig.input_share`) — where these differ by more than `DIVERGENCE` the list
  misprices the shape, and ``diverges`` names the direction.

Prices come from ``data/token_prices.csv`` (one provider at a time,
`Policy.token_price_provider`); a model the list does not price gets ``None`` figures.
"""

from __future__ import annotations

from pydantic import Field

from optimizer.base.errors import Origin, ScenarioError, unknown_id_message
from optimizer.base.sources import read_csv
from optimizer.scenario import DATA_DIR, Catalogued, Scenario, validate_row

TOKEN_PRICES_FILE = DATA_DIR / "token_prices.csv"
# input shares of charge and GPU time further apart than this are reported as a divergence
DIVERGENCE = 0.15


class TokenPrice(Catalogued):
    provider: str
    model: str
    input_usd_per_million_tokens: float = Field(ge=0, le=1e3)
    cached_input_usd_per_million_tokens: float | None = Field(None, ge=0, le=1e3)
    output_usd_per_million_tokens: float = Field(ge=0, le=1e3)


def token_prices(provider: str, origin: Origin | None = None) -> dict[str, TokenPrice]:
    """The price list of ``provider``, by model. An unknown provider is an error naming the
    providers the file has."""
    fields = list(TokenPrice.model_fields)
    required = [n for n in fields if TokenPrice.model_fields[n].is_required()]
    table = read_csv(TOKEN_PRICES_FILE, required, [n for n in fields if n not in required])
    rows = [validate_row(TokenPrice, r.values, r.origin) for r in table.rows]
    providers = {r.provider for r in rows}
    if provider not in providers:
        raise ScenarioError(unknown_id_message("token price provider", provider, providers),
                            origin or Origin(str(TOKEN_PRICES_FILE)), field="token_price_provider")
    return {r.model: r for r in rows if r.provider == provider}


def list_charge_usd(price: TokenPrice, isl_tokens: float, osl_tokens: float, cache_hit_rate: float) -> tuple[float, float]:
    """(input, output) charge in USD of one request, per the formula above."""
    cached = price.cached_input_usd_per_million_tokens
    p_in = price.input_usd_per_million_tokens if cached is None else \
        (1 - cache_hit_rate) * price.input_usd_per_million_tokens + cache_hit_rate * cached
    return isl_tokens * p_in / 1e6, osl_tokens * price.output_usd_per_million_tokens / 1e6


def token_billing(s: Scenario, cost_usd: dict[str, float], output_tokens: dict[str, float],
                  input_gpu_hours: dict[str, float], gpu_hours: dict[str, float]) -> dict:
    """Per workload the figures of the module docstring, from the plan's cost, served output
    tokens and replica GPU-hours (all for the year)."""
    prices = token_prices(s.policy.token_price_provider)
    out = {}
    for k, w in sorted(s.workloads.items()):
        price = prices.get(w.model)
        gpu_per_m = cost_usd[k] / output_tokens[k] * 1e6 if output_tokens.get(k) else None
        gpu_input = input_gpu_hours[k] / gpu_hours[k] if gpu_hours.get(k) else None
        row = {"model": w.model, "gpu_cost_usd_per_million_output_tokens": gpu_per_m,
               "input_share_of_gpu_hours": gpu_input, "list_usd_per_million_output_tokens": None,
               "input_share_of_charge": None, "gpu_cost_over_list": None, "diverges": None,
               "price_source": None}
        if price is not None:
            c_in, c_out = list_charge_usd(price, w.isl_mean_tokens, w.osl_mean_tokens, w.prompt_cache_hit_rate)
            list_per_m = (c_in + c_out) / w.osl_mean_tokens * 1e6
            row.update(list_usd_per_million_output_tokens=list_per_m,
                       input_share_of_charge=c_in / (c_in + c_out) if c_in + c_out else None,
                       price_source=price.source)
            if gpu_per_m is not None and list_per_m:
                row["gpu_cost_over_list"] = gpu_per_m / list_per_m
            row["diverges"] = _divergence(row["input_share_of_charge"], gpu_input)
        out[k] = row
    return {"provider": s.policy.token_price_provider, "by_workload": out}


def _divergence(charge_share: float | None, gpu_share: float | None) -> str | None:
    if charge_share is None or gpu_share is None or abs(charge_share - gpu_share) <= DIVERGENCE:
        return None
    if charge_share > gpu_share:
        return (f"the list bills input at {charge_share:.0%} of the charge, prompts take {gpu_share:.0%} of the "
                "GPU time: input is overpriced, output underpriced for this shape")
    return (f"the list bills input at {charge_share:.0%} of the charge, prompts take {gpu_share:.0%} of the "
            "GPU time: input is underpriced, output overpriced for this shape")
