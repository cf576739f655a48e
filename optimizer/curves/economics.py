"""Money and megawatts: cost per million tokens, reserved vs on-demand, owned TCO, facility
yield (curves 11–12 and the one equation)."""

from __future__ import annotations

import numpy as np

from optimizer.base.units import HOURS_PER_YEAR, KW_PER_MW, SECONDS_PER_HOUR


def cost_per_million_tokens_usd(usd_per_hour, goodput_tokens_per_s):
    """All-in cost per hour over goodput tokens per hour, per million:
    usd_per_hour / (tokens_per_s · 3600) · 1e6.
    One 8-GPU node at $30/h: 10,000 tok/s → $0.83; 4,000 tok/s → $2.08."""
    tokens = np.asarray(goodput_tokens_per_s, dtype=float)
    with np.errstate(divide="ignore"):
        return np.asarray(usd_per_hour, dtype=float) / (tokens * SECONDS_PER_HOUR) * 1e6


def break_even_utilization(reserved_usd_per_hour, ondemand_usd_per_hour):
    """Reserved pays once a GPU is busy more than reserved / on-demand of the hours."""
    return np.asarray(reserved_usd_per_hour, dtype=float) / np.asarray(ondemand_usd_per_hour, dtype=float)


def owned_usd_per_node_hour(
    capex_usd_per_node: float,
    life_years: float,
    node_kw: float,
    pue: float,
    energy_usd_per_mwh: float,
    colo_usd_per_kw_month: float,
    power_fraction: float = 1.0,
) -> dict[str, float]:
    """Owned-hardware cost per node-hour, by component:

    capital = capex / (life · 8760)
    energy  = node_kW · f_power · PUE · $/MWh / 1000     (f_power: share of full power drawn)
    colo    = node_kW · $/kW-month · 12 / 8760           (space and power reserved at full kW)
    """
    return {
        "capital": capex_usd_per_node / (life_years * HOURS_PER_YEAR),
        "energy": node_kw * power_fraction * pue * energy_usd_per_mwh / KW_PER_MW,
        "colo": node_kw * colo_usd_per_kw_month * 12.0 / HOURS_PER_YEAR,
    }


def owned_tco_usd_per_gpu_hour(gpus_per_node: int, **node_terms) -> float:
    """Owned TCO per GPU-hour = (capital + energy + colo per node-hour) / GPUs per node."""
    return sum(owned_usd_per_node_hour(**node_terms).values()) / gpus_per_node


def idle_cost_share(utilization) -> np.ndarray:
    """Share of a committed GPU's cost spent idle, 1 − utilisation (the largest TCO term in
    most fleets; the report shows it)."""
    return 1.0 - np.clip(np.asarray(utilization, dtype=float), 0.0, 1.0)


def tokens_per_s_per_mw(goodput_tokens_per_s, it_kw, pue):
    """Facility yield: goodput tokens/s per MW of facility power, tokens / (kW_IT · PUE / 1000)."""
    return np.asarray(goodput_tokens_per_s, dtype=float) / (np.asarray(it_kw, dtype=float) * pue / KW_PER_MW)
