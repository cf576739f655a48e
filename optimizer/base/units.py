"""Units and enumerations: one source for each number and each name the whole code base
shares. A leaf module (it imports nothing of fleetplan), so that every layer — the MIP's
`formulations` included — can use it.

The enumerations are `StrEnum`s: a member equals its text, so plan folders (CSV, JSON) carry
the plain words and compare equal to the members when read back.
"""

from __future__ import annotations

from enum import StrEnum

SECONDS_PER_HOUR = 3600.0
HOURS_PER_DAY = 24
DAYS_PER_YEAR = 365
HOURS_PER_YEAR = 8760.0  # DAYS_PER_YEAR · HOURS_PER_DAY: the planning year
MS_PER_S = 1000.0
US_PER_S = 1e6
GRAMS_PER_KG = 1000.0
KG_PER_TONNE = 1000.0
KW_PER_MW = 1000.0


class Role(StrEnum):
    """What a pool's replicas do."""

    PREFILL = "prefill"  # prompts only, handing the KV cache to a decode pool (disaggregated serving)
    DECODE = "decode"  # output tokens only
    COLOCATED = "colocated"  # both: prompts in chunks inside the decode iterations


class Regime(StrEnum):
    """The latency objectives a state is planned for."""

    NOMINAL = "nominal"
    RELAXED = "relaxed"  # a site-loss contingency: TTFT objectives × the policy's resilience factor


class ServingMode(StrEnum):
    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"
