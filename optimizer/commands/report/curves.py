"""`fleetplan curves --plot`: throughput and decode step time against the decode batch, one
line per parallel degree of the operating table, its knee marked."""

from __future__ import annotations

from pathlib import Path

from optimizer.base.outputs import save_png


def plot_curves(out: dict, model, gpu, serving, isl: float, osl: float, itl_ms: float, dtype: str, kv_dtype: str,
                target: Path) -> None:
    """The curves of the operating table ``out`` of ``model`` on ``gpu``, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from optimizer.serving.table import batch_sweep

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for row in out["configs"]:
        sweep = batch_sweep(model, gpu, serving, row["tp"], isl, osl, dtype, kv_dtype)
        line = ax1.plot(sweep["batch"], sweep["tokens_per_s"], label=f"{row['tp']} GPUs")[0]
        ax2.plot(sweep["batch"], sweep["step_ms"], color=line.get_color())
        k = sweep["knee"]
        if k:
            ax1.plot([k], [sweep["tokens_per_s"][k - 1]], "o", color=line.get_color())
            ax2.plot([k], [sweep["step_ms"][k - 1]], "o", color=line.get_color())
    ax2.axhline(itl_ms / serving.itl_tail_factor, ls="--", color="0.4", lw=1, label="ITL objective / tail")
    ax1.set(xlabel="decode batch", ylabel="tokens/s per replica", title=f"{model.id} on {gpu.id}: throughput (● knee)")
    ax2.set(xlabel="decode batch", ylabel="step time (ms)", title="decode step time")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(fig, target)
