"""Number formats of weights and KV cache: bytes per value with their block scales, and the
matmul rate a format runs at on a part.

Bytes per value of a block-scaled format (b-bit elements, one s-bit scale per block of k):

    β = (b + s/k) / 8

    bf16   16 bits                                      β = 2
    fp8    8 bits, one FP32 scale per tensor (≈ 0)      β = 1
    nvfp4  E2M1 + one FP8 E4M3 scale per 16 values      (4 + 8/16)/8  = 0.5625   (4.5 bits)
    mxfp4  E2M1 + one E8M0 scale per 32 values (OCP MX) (4 + 8/32)/8  = 0.53125  (4.25 bits)
    int4   AWQ/GPTQ, one FP16 scale per 128 values      (4 + 16/128)/8 = 0.515625 (4.125 bits)

NVFP4's extra FP32 scale per tensor (4 bytes) is left out. Every parameter is taken at the
chosen format (real checkpoints often keep attention and embeddings in bf16: a planner who
wants that exactly can state it through ``total_params_b`` of a model row).

Matmul rate: bf16 at the part's bf16 rate, fp8 at its fp8 rate; a 4-bit float format on a part
with FP4 tensor cores (``fp4_flops`` given) at the FP4 rate — activations quantised as well, as
the NVFP4/MXFP4 recipes of TensorRT-LLM and the MX kernels of ROCm do; anywhere else a 4-bit
format is weight-only: the weights are read at 4 bits and dequantised, the matmuls run at the
bf16 rate (Hopper's W4A16 path for gpt-oss, Marlin). int4 is weight-only on every part.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """A number format: ``bits`` per element, one ``scale_bits`` scale per ``block`` elements."""

    bits: int
    scale_bits: int = 0
    block: int = 1
    fp4: bool = False  # a 4-bit float format FP4 tensor cores run natively

    @property
    def bytes_per_value(self) -> float:
        """β = (b + s/k) / 8."""
        return (self.bits + self.scale_bits / self.block) / 8.0


FORMATS: dict[str, Format] = {
    "bf16": Format(16),
    "fp8": Format(8),
    "nvfp4": Format(4, scale_bits=8, block=16, fp4=True),
    "mxfp4": Format(4, scale_bits=8, block=32, fp4=True),
    "int4": Format(4, scale_bits=16, block=128),
}
WEIGHT_FORMATS = tuple(FORMATS)
KV_FORMATS = ("bf16", "fp8", "nvfp4")  # NVFP4 KV: TensorRT-LLM on Blackwell


def default_kv(weight: str) -> str:
    """The KV format served beside weights in ``weight`` when none is named: the same for
    bf16 and fp8, fp8 beside 4-bit weights (the common deployment; NVFP4 KV needs a
    calibrated checkpoint)."""
    return weight if weight in ("bf16", "fp8") else "fp8"


def bytes_per_value(name: str) -> float:
    return FORMATS[name].bytes_per_value


def matmul_flops(name: str, bf16_flops: float, fp8_flops: float | None, fp4_flops: float | None) -> float | None:
    """Dense FLOP/s the matmuls of weights in format ``name`` run at; None where the part
    cannot run them (fp8 without FP8 tensor cores)."""
    f = FORMATS[name]
    if name == "fp8":
        return fp8_flops
    if f.fp4 and fp4_flops is not None:
        return fp4_flops
    return bf16_flops


def runs_natively(name: str, fp4_flops: float | None) -> bool:
    """Whether the matmuls run in the format itself (else the weights are dequantised to bf16)."""
    return name in ("bf16", "fp8") or (FORMATS[name].fp4 and fp4_flops is not None)
