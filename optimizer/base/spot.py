"""How spot capacity is named in a plan.

A spot node is rented per hour like an on-demand node, cheaper, and may be taken back. The
plan treats the spot nodes of an accelerator as an accelerator of their own, ``<gpu>-spot``
(same hardware, its own price and supply), so that a pool runs either on spot nodes or not,
and every table that lists accelerators lists spot apart. A site's spot zone is a failure
domain: the contingency state that loses it is named ``spot@<site>`` in the plan tables'
``lost_site`` column (the site itself stays).
"""

from __future__ import annotations

SPOT_SUFFIX = "-spot"
SPOT_LOSS_PREFIX = "spot@"


def spot_id(gpu: str) -> str:
    """The accelerator id of ``gpu``'s spot nodes."""
    return f"{gpu}{SPOT_SUFFIX}"


def is_spot(gpu: str) -> bool:
    return gpu.endswith(SPOT_SUFFIX)


def base_gpu(gpu: str) -> str:
    """The hardware behind an accelerator id (itself where it is not spot)."""
    return gpu[: -len(SPOT_SUFFIX)] if is_spot(gpu) else gpu


def spot_loss(site: str) -> str:
    """The ``lost_site`` label of the state in which ``site``'s spot nodes are gone."""
    return f"{SPOT_LOSS_PREFIX}{site}"


def spot_lost_site(lost_site: str | None) -> str | None:
    """The site whose spot nodes a ``lost_site`` label loses (None: not a spot loss)."""
    if isinstance(lost_site, str) and lost_site.startswith(SPOT_LOSS_PREFIX):
        return lost_site[len(SPOT_LOSS_PREFIX):]
    return None
