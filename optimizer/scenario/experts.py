"""The ``serving.expert_parallel`` section: wide expert parallelism with attention
data-parallelism for mixture-of-experts models, and MTP speculative decoding on it (opt-in).

Sources and assumptions of the defaults (data/SOURCES.md, "Expert parallelism"):
- scaleup_latency_us 32.8: one all-to-all hop on the scale-up fabric (NVLink), fitted
  (`optimizer.commands.calibrate.alltoall`) to the 1,392 decode steps of EP replicas within their
  scale-up group (EP 8 on H100, H200, B200, B300 nodes; EP 8–32 in GB200/GB300 NVL72 racks;
  TensorRT-LLM, vLLM, SGLang) in the AIConfigurator 0.12 database,
  data/calibration/aiconfigurator_moe.csv: median error 12–38 % held out, bias ln −0.40 to +0.07
  (with each row's dense collective latency, 0–15 µs: 17–48 %, ln −0.19 to −0.65).
- scaleout_latency_us 177.7 and nic_efficiency 0.0975: the hop latency and the NIC's share of an
  all-to-all across nodes, fitted the same way to the 960 decode steps of EP 16 and 32 replicas
  over 8-GPU nodes (H100, H200, B200, B300): median error 5–19 % held out (60–78 % with the 10 µs
  and 0.7 assumed before). 0.0975 of a 400 Gb/s NIC is 4.9 GB/s a GPU; the
  hop sits with DeepEP's published low-latency dispatch of 128 tokens at EP 64–256 on 400 Gb/s CX7,
  173–194 µs (repo deepseek-ai/DeepEP README), while DeepEP's bulk kernels reach ~40 GB/s over RDMA
  there: these are the engines the database measured, not the fastest kernels published.
- mtp acceptance_rate 0.85: DeepSeek-V3 Technical Report (arXiv 2412.19437) §5.4.3, "the acceptance
  rate of the second token prediction ranges between 85% and 90%" (one MTP draft token, 1.8× TPS);
  draft_cost_ratio 0.05 assumed (the MTP module is one transformer block of the 61 plus the shared
  head and embedding: about 1/61 of a step's weights, with its own launch overheads).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from optimizer.scenario.fields import Strict, bounded, fraction_before


class Mtp(Strict):
    """Multi-token prediction: the model's own MTP module drafts ``draft_tokens`` tokens a step,
    each accepted with probability ``acceptance_rate`` given the ones before it."""

    enabled: bool = False
    draft_tokens: int = bounded(1, ge=1, le=4, description="tokens the MTP module drafts per step",
                                why="MTP modules are trained for one or two further tokens")
    acceptance_rate: float = bounded(0.85, ge=0, le=1, description="share of draft tokens accepted (each, given the last)")
    draft_cost_ratio: float = bounded(0.05, ge=0.001, lt=1, description="one MTP draft step / one target step",
                                      why="a draft costs something, and less than the target")

    _fractions = field_validator("acceptance_rate", "draft_cost_ratio", mode="before")(fraction_before)


class ExpertParallel(Strict):
    """Expert-parallel replicas of MoE models: experts sharded over ``gpus`` GPUs (EP degree),
    attention and the always-read weights replicated on each GPU (attention data-parallelism,
    each GPU holding its own sequences' KV); the all-to-all crosses the scale-up fabric while
    the replica fits one NVLink domain or node, else the scale-out NICs."""

    enabled: bool = False
    gpus: list[int] = bounded(default_factory=lambda: [8, 16, 32, 64, 72], ge=2, le=4096, each=True, unit="GPUs",
                              description="EP degrees offered (GPUs per replica); across nodes only whole nodes")
    scaleup_latency_us: float | None = bounded(32.8, ge=0, le=10_000, unit="µs",
                                               description="fixed latency of one all-to-all hop on the scale-up "
                                                           "fabric (none: the accelerator's calibrated collective "
                                                           "latency)", why="10 ms a hop is no NVLink")
    scaleout_latency_us: float = bounded(177.7, ge=0, le=10_000, unit="µs",
                                         description="fixed latency of one all-to-all hop over the scale-out NICs",
                                         why="10 ms a hop is no RDMA fabric")
    nic_efficiency: float = bounded(0.0975, ge=0.01, le=1,
                                    description="share of the scale-out NIC an all-to-all across nodes reaches")
    mtp: Mtp = Field(default_factory=Mtp)

    _fraction = field_validator("nic_efficiency", mode="before")(fraction_before)
