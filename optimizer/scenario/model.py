"""The validated scenario: every table and section, checked."""

from __future__ import annotations

from pydantic import Field

from optimizer.scenario.catalogue import Accelerator, GridCarbon, Metro, Model, Owned, Price, Site, Supply, Workload
from optimizer.scenario.fields import Strict
from optimizer.scenario.fleet import Fleet, Years
from optimizer.scenario.kvcache import KvCache
from optimizer.scenario.sections import Carbon, Churn, Demand, Horizon, NetworkSpec, Policy, Robust, Serving
from optimizer.scenario.spot import Spot


class Scenario(Strict):
    name: str
    description: str = ""
    horizon: Horizon
    accelerators: dict[str, Accelerator]
    models: dict[str, Model]
    price_provider: str
    prices: dict[str, Price]
    owned: dict[str, Owned]
    metros: dict[str, Metro]
    sites: dict[str, Site]
    supply: dict[str, dict[str, Supply]]
    workloads: dict[str, Workload]
    diurnal: dict[str, list[float]]
    demand: Demand
    network: NetworkSpec
    serving: Serving
    policy: Policy
    robust: Robust = Field(default_factory=Robust)
    grid_carbon: dict[str, GridCarbon] = Field(default_factory=dict)
    carbon: Carbon = Field(default_factory=Carbon)
    fleet: Fleet = Field(default_factory=Fleet)
    years: Years = Field(default_factory=Years)
    churn: Churn = Field(default_factory=Churn)
    spot: Spot = Field(default_factory=Spot)
    kv_cache: KvCache = Field(default_factory=KvCache)

    def peak_to_mean(self, workload: str) -> float:
        """The intra-hour peak factor a workload's pools are sized for."""
        own = self.workloads[workload].peak_to_mean_intra_hour
        return own if own is not None else self.demand.peak_to_mean_intra_hour
