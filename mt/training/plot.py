"""`mt plot`: a run's training curves from metrics.jsonl, in one PNG (mt.figures)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..figures import figure, save_png
from ..run_folder import METRICS, PLOT
from .metrics import read_metrics


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Loss, validation BLEU, learning rate and throughput against updates, in one PNG.

    The top panels also carry the training time on a second x-axis.
    """
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    train = [r for r in records if r.get("kind") == "train"]
    valid = [r for r in records if r.get("kind") == "valid"]
    if not train and not valid:
        raise ConfigError(f"{run_dir / METRICS}: no metrics yet; try again in a moment")

    def xy(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
        rows = [r for r in rows if isinstance(r.get(key), (int, float))]
        return [r["step"] for r in rows], [r[key] for r in rows]

    fig = figure(figsize=(12, 8), dpi=100, layout="constrained")
    (loss, bleu), (lr, speed) = fig.subplots(2, 2, sharex=True)

    loss.plot(*xy(train, "loss"), color="tab:blue", lw=1, alpha=0.8, label="train")
    loss.plot(*xy(valid, "loss"), "o-", color="tab:orange", label="valid")
    loss.set(title="Loss (label-smoothed, per token)", ylabel="loss")
    loss.legend()

    best = _bleu_panel(bleu, *xy(valid, "bleu"))

    lr.plot(*xy(train, "lr"), color="tab:purple")
    fits = [r for r in records if r.get("kind") == "horizon"]
    if fits:  # the horizon fitted to the time budget, as last estimated
        budget = _duration(fits[-1]["budget_s"])
        lr.axvline(fits[-1]["horizon"], ls=":", color="tab:red", label=f"fits in {budget}")
        lr.legend()
    lr.set(title="Learning rate", ylabel="learning rate", xlabel="updates")
    lr.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))

    speed.plot(*xy(train, "tokens_per_s"), color="tab:gray")
    speed.set(title="Throughput (target tokens/s)", ylabel="tokens/s", xlabel="updates")
    speed.set_ylim(bottom=0)

    for ax in (loss, bleu, lr, speed):
        ax.grid(alpha=0.3)
    _time_axis([loss, bleu, lr], records)  # the rate against wall-clock time too

    last = max(records, key=lambda r: r.get("step", 0))
    title = f"{run_dir.resolve().name}: {last.get('step', 0):,} updates"
    if "elapsed_s" in last:
        title += f", {_duration(last['elapsed_s'])} of training"
    if best:
        title += f"; best valid BLEU {best[1]:.2f} at update {best[0]:,}"
    fig.suptitle(title)
    return save_png(fig, Path(out) if out else run_dir / PLOT)


def _bleu_panel(ax, steps: list[float], scores: list[float]) -> tuple[float, float] | None:
    """Validation BLEU against updates, its best starred: (step, BLEU) of the best, if any."""
    ax.plot(steps, scores, "o-", color="tab:green")
    ax.set(title="Validation BLEU", ylabel="BLEU")
    ax.margins(y=0.15)  # room for the best score's label
    if not scores:
        ax.text(0.5, 0.5, "no validation yet", ha="center", transform=ax.transAxes)
        return None
    best = max(range(len(scores)), key=scores.__getitem__)
    ax.plot(steps[best], scores[best], "*", ms=16, color="tab:red", label="best")
    label = f"{scores[best]:.2f}"
    ax.annotate(label, (steps[best], scores[best]), xytext=(8, 8), textcoords="offset points")
    ax.legend()
    return steps[best], scores[best]


def _time_axis(axes: list, records: list[dict]) -> None:
    """A top x-axis of elapsed training time, interpolated from the (update, elapsed) pairs."""
    import numpy as np

    pairs = sorted({(r["step"], r["elapsed_s"]) for r in records if "elapsed_s" in r})
    if len(pairs) < 2 or pairs[-1][0] <= pairs[0][0] or pairs[-1][1] <= pairs[0][1]:
        return  # too few points to map updates to time
    last = pairs[-1][1]
    unit, scale = (
        ("seconds", 1) if last < 120 else ("minutes", 60) if last < 7200 else ("hours", 3600)
    )
    steps, times = np.array(pairs, dtype=float).T
    times /= scale

    for ax in axes:
        top = ax.secondary_xaxis(
            "top",
            functions=(lambda x: _interp(x, steps, times), lambda t: _interp(t, times, steps)),
        )
        top.set_xlabel(f"training {unit}", fontsize="small")
        top.tick_params(labelsize="small")


def _interp(x, xp, fp):
    """np.interp, continued beyond the ends at the average slope: the axis margins need ticks."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    rate = (fp[-1] - fp[0]) / (xp[-1] - xp[0])
    y = np.interp(x, xp, fp)
    y = np.where(x < xp[0], fp[0] + (x - xp[0]) * rate, y)
    return np.where(x > xp[-1], fp[-1] + (x - xp[-1]) * rate, y)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
