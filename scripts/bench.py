"""`make bench`: run every benchmark and rewrite docs/benchmarks.md.

Steps (each saves its result in runs/bench/results.json, so a step can be re-run alone with
--only and the page rebuilt from what is there):

  prepare  `mt prepare --rebuild` on the Tatoeba files: wall time and the data summary
  scale    `mt prepare` on 1M, 5M and 20M aligned pairs and 20 updates of `mt train` on each
           store: time, peak RSS and anonymous memory, bytes a pair (scripts/bench_prepare.py)
  speed    ours vs torch.nn.Transformer, training tokens/s on identical batches (one process)
  recipe   the 20-minute CPU recipe (configs/tatoeba_cpu.yaml) trained from scratch: the
           budget is its horizon, fitted on this machine as it runs
  fitted   the same recipe with its horizon fitted by hand: train.max_steps = the updates the
           recipe made, no time limit; test BLEU of both, side by side
  budget   BLEU against budget: the recipe with 5, 10 and 40 minutes (20 is `recipe`)
  quality  BLEU/chrF, greedy and beam 5, Tatoeba test and FLORES-200 devtest, peak memory
  decode   decoding speed, batched vs one sentence at a time, greedy and beam 5
  export   mt (PyTorch) vs its CTranslate2 export, float32 and int8: speed, BLEU, memory, size
  hf       mt vs its --format hf export in transformers and its CT2 export: BLEU, sentences/s
           and outputs equal to mt's, greedy and beam 5 (scripts/bench_hf.py)
  serve    mt serve under 64 concurrent clients for 60 s against mt translate in one batch
  text     paragraphs of 4 Tatoeba test sentences against the sentences one a line: BLEU and
           time (scripts/bench_text.py), and the sentence splitters (scripts/bench_splitter.py)
  langid   language identifiers on Tatoeba and FLORES (those installed), and
           data.filter_language on a corrupted Tatoeba train file (scripts/bench_langid.py)
  markup   inline tags carried into translations: per text node, placeholders, alignment,
           anchors (scripts/bench_markup.py)
  ensemble two recipe runs of other seeds: BLEU of each, of their ensemble and of mt average
           (scripts/bench_ensemble.py; two 20-minute trainings: not in the default steps)
  backtranslation  half of Tatoeba parallel, the other half's Spanish back-translated by
           beam and by sampling (tagged): three forward runs, Tatoeba and FLORES BLEU
           (scripts/bench_backtranslation.py; four trainings: not in the default steps)

    python scripts/bench.py --data ../shared/data [--only speed,decode] [--minutes 20]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from bench_backtranslation import render as render_backtranslation
from bench_ensemble import render as render_ensemble
from bench_langid import render as render_langid
from bench_markup import render as render_markup
from bench_prepare import render as render_scale
from bench_prepare import run as run_scale
from bench_serve import render as render_serve
from bench_splitter import render as render_splitter
from bench_text import render as render_text
from bench_train_speed import REFERENCE_THEN

from mt.training.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "runs" / "bench" / "results.json"
RUN = ROOT / "runs" / "bench" / "tatoeba_cpu"
DOC = ROOT / "docs" / "benchmarks.md"
# what follows this line in DOC was measured by hand (one-off comparisons): kept as it is
KEPT = "<!-- measured by hand, below: make bench keeps it as it is -->"
PY = sys.executable
MT = str(Path(sys.executable).parent / "mt")


def run(args: list[str], log: Path | None = None) -> tuple[str, float]:
    """Run a command; return its stdout and its peak resident memory in GiB."""
    print("$", shlex.join(args), file=sys.stderr, flush=True)
    with open(log, "w") if log else open(os.devnull, "w") as err:
        process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
        out = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(
            f"failed ({os.waitstatus_to_exitcode(status)}): {shlex.join(args)}"
            + (f"; see {log}" if log else "")
        )
    return out, usage.ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def data_overrides(data: Path) -> list[str]:
    return [
        arg
        for split in ("train", "valid", "test")
        for arg in ("--set", f"data.files.{split}={data / f'tatoeba_en_es.{split}.jsonl.gz'}")
    ]


def step_prepare(data: Path, results: dict) -> None:
    args = [
        MT,
        "prepare",
        "--config",
        "tatoeba_cpu.yaml",
        *data_overrides(data),
        "--set",
        f"run.dir={RUN.parent / 'prepare'}",
        "--rebuild",
        "--json",
    ]
    started = time.perf_counter()
    out, peak = run(args)
    stats = last_json(out)
    results["prepare"] = {
        "seconds": time.perf_counter() - started,
        "peak_gib": peak,
        "pairs": stats["pairs"],
        "dropped": stats["dropped"],
        "round_trip": stats["round_trip"],
    }


def step_scale(data: Path, results: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="mt-bench-prepare-") as work:  # never the repo
        results["scale"] = run_scale(data, [1_000_000, 5_000_000, 20_000_000], 20, Path(work))


def step_speed(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_train_speed.py", "--data", str(data)])
    # one line per precision: float32 first, then bf16 (or fp16) where it pays on this machine
    fp32, *reduced = [json.loads(line) for line in out.strip().splitlines()]
    results["speed"] = {**fp32, "matmul_gflops": matmul_gflops(), "reduced": reduced}


def matmul_gflops() -> float:
    """fp32 GFLOP/s of a (2048 x 1024) @ (1024 x 1024) product: the machine's raw speed."""
    import torch

    a, b = torch.randn(2048, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    started = time.perf_counter()
    for _ in range(30):
        a @ b
    return 30 * 2 * 2048 * 1024 * 1024 / (time.perf_counter() - started) / 1e9


def train_recipe(data: Path, run_dir: Path, *overrides: str) -> dict:
    """Train the CPU recipe into `run_dir` from scratch; what it did and what it scores."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    common = [*data_overrides(data), "--set", f"run.dir={run_dir}"]
    run([MT, "prepare", "--config", "tatoeba_cpu.yaml", *common])  # not part of the budget
    args = [MT, "train", "--config", "tatoeba_cpu.yaml", *common, *overrides, "--restart"]
    started = time.perf_counter()
    _, peak = run(args, log=run_dir.parent / f"{run_dir.name}.log")
    wall = time.perf_counter() - started
    metrics = read_metrics(run_dir)
    train = [m for m in metrics if m["kind"] == "train"]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())["train"]
    test, _ = run([MT, "evaluate", str(run_dir), "--pairs",
                   str(data / "tatoeba_en_es.test.jsonl.gz"), "--beam", "5", "--json"])  # fmt: skip
    return {
        "command": shlex.join(["mt", *args[1:]])
        .replace(str(data), "$DATA")
        .replace(str(ROOT) + "/", ""),
        "wall_s": wall,
        "train_s": max(m["elapsed_s"] for m in metrics),
        "budget_s": config["max_minutes"] * 60,
        "peak_gib": peak,
        "valid": [
            {k: m[k] for k in ("step", "elapsed_s", "bleu", "loss")}
            for m in metrics
            if m["kind"] == "valid"
        ],
        "horizons": [(m["step"], m["horizon"]) for m in metrics if m["kind"] == "horizon"],
        "steps": max((m["step"] for m in metrics), default=0),
        "last_lr": train[-1]["lr"] if train else None,
        "min_lr": config["min_lr"],
        "tokens_per_s": sum(m["tokens_per_s"] for m in train[1:]) / max(len(train) - 1, 1),
        "padding": sum(m["padding"] for m in train) / max(len(train), 1),
        "test_bleu5": last_json(test)["bleu"],
    }


def step_recipe(data: Path, results: dict, minutes: float) -> None:
    # log a line an update: the last update's rate is then in the metrics
    results["recipe"] = train_recipe(
        data, RUN, "--set", f"train.max_minutes={minutes}", "--set", "train.log_every=1"
    )


def step_fitted(data: Path, results: dict) -> None:
    steps = results["recipe"]["steps"]
    results["fitted"] = train_recipe(
        data, RUN.parent / "fitted", "--set", f"train.max_steps={steps}",
        "--set", "train.max_minutes=0", "--set", "train.log_every=1",
    )  # fmt: skip


def step_budget(data: Path, results: dict) -> None:
    budget = results.setdefault("budget", {})
    for minutes in (5, 10, 40):
        budget[str(minutes)] = train_recipe(
            data, RUN.parent / f"budget-{minutes}", "--set", f"train.max_minutes={minutes}",
            "--set", "train.log_every=1",
        )  # fmt: skip
        RESULTS.write_text(json.dumps(results, indent=2))


def plot_budget(results: dict) -> Path | None:
    """docs/budget.png: Tatoeba test BLEU against the training budget."""
    runs = budget_runs(results)
    if len(runs) < 2:
        return None
    from mt.figures import figure, save_png

    fig = figure(figsize=(6, 4), dpi=100, layout="constrained")
    ax = fig.subplots()
    minutes = [r["budget_s"] / 60 for r in runs]
    ax.plot(minutes, [r["test_bleu5"] for r in runs], "o-", color="tab:green")
    for m, r in zip(minutes, runs):
        ax.annotate(f"{r['test_bleu5']:.1f}", (m, r["test_bleu5"]), xytext=(4, -12),
                    textcoords="offset points")  # fmt: skip
    ax.set(xscale="log", xticks=minutes, xticklabels=[f"{m:g}" for m in minutes],
           xlabel="training budget, minutes (train.max_minutes)",
           ylabel="Tatoeba test BLEU, beam 5", title="What each extra minute buys")  # fmt: skip
    ax.grid(alpha=0.3)
    return save_png(fig, ROOT / "docs" / "budget.png")


def budget_runs(results: dict) -> list[dict]:
    runs = [*results.get("budget", {}).values()]
    if "recipe" in results and "test_bleu5" in results["recipe"]:
        runs.append(results["recipe"])
    return sorted(runs, key=lambda r: r["budget_s"])


def step_quality(data: Path, results: dict) -> None:
    rows = []
    for name, file in (
        ("Tatoeba test", "tatoeba_en_es.test.jsonl.gz"),
        ("FLORES-200 devtest", "flores200_devtest_en_es.jsonl.gz"),
    ):
        for beam in (1, 5):
            out, peak = run(
                [
                    MT,
                    "evaluate",
                    str(RUN),
                    "--pairs",
                    str(data / file),
                    "--beam",
                    str(beam),
                    "--json",
                    "--device",
                    "cpu",
                ]
            )
            result = last_json(out)
            rows.append(
                {
                    "set": name,
                    "beam": beam,
                    "peak_gib": peak,
                    **{
                        k: result[k]
                        for k in (
                            "bleu",
                            "chrf",
                            "bleu_signature",
                            "chrf_signature",
                            "sentences",
                            "seconds",
                        )
                    },
                }
            )
    results["quality"] = rows


def step_decode(data: Path, results: dict) -> None:
    out, _ = run(
        [
            PY,
            "scripts/bench_decode.py",
            str(RUN),
            "--pairs",
            str(data / "tatoeba_en_es.test.jsonl.gz"),
            "--data",
            str(data),
        ]
    )
    results["decode"] = last_json(out)


def step_export(data: Path, results: dict) -> None:
    out, _ = run(
        [
            PY,
            "scripts/bench_export.py",
            str(RUN),
            "--pairs",
            str(data / "tatoeba_en_es.test.jsonl.gz"),
        ]
    )
    results["export"] = last_json(out)


def on_test_pairs(data: Path, script: str, *extra: str) -> dict:
    """The JSON line of `script` run on the recipe model and the Tatoeba test pairs."""
    pairs = str(data / "tatoeba_en_es.test.jsonl.gz")
    out, _ = run([PY, script, str(RUN), "--pairs", pairs, *extra])
    return last_json(out)


def step_langid(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_langid.py", "--data", str(data)])
    results["langid"] = last_json(out)


def step_hf(data: Path, results: dict) -> None:
    results["hf"] = on_test_pairs(data, "scripts/bench_hf.py", "--repeats", "3")


def step_serve(data: Path, results: dict) -> None:
    results["serve"] = on_test_pairs(data, "scripts/bench_serve.py")


def step_text(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_text.py", str(RUN), "--data", str(data)])
    results["text"] = last_json(out)
    out, _ = run([PY, "scripts/bench_splitter.py", "--data", str(data), "--json"])
    results["splitter"] = last_json(out)


def step_markup(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_markup.py", "--checkpoint", str(RUN), "--data", str(data)])
    results["markup"] = last_json(out)


def step_script(data: Path, results: dict, name: str, minutes: float) -> None:
    """scripts/bench_NAME.py at `minutes` a training, in runs/bench/NAME: its JSON record."""
    out, _ = run([PY, f"scripts/bench_{name}.py", "--data", str(data),
                  "--minutes", str(minutes), "--out", str(RUN.parent / name)])  # fmt: skip
    results[name] = last_json(out)


def render_export(e: dict) -> list[str]:
    lines = [
        "## CTranslate2 export",
        "",
        f"`mt export` to CTranslate2 {e['ctranslate2']} against mt's own PyTorch decoding, "
        f"{e['threads']} thread(s), each engine in a process of its own (peak resident memory "
        f"is that process's), on {e['cpu']}. The trained model decodes the first "
        f"{e['trained']['sentences']} Tatoeba test sentences; a base.yaml-sized model (d_model "
        f"512, 6+6) as initialised decodes {e['base']['sentences']} (speed only: untrained, "
        "its outputs have no meaning). Command: `python scripts/bench_export.py "
        "runs/bench/tatoeba_cpu --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz`.",
        "",
        "| model | engine | size MiB | greedy sent/s | BLEU | same as mt | beam 5 sent/s | BLEU "
        "| same as mt | peak MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model in ("trained", "base"):
        for engine in ("torch", "ct2-float32", "ct2-int8"):
            r = e[model][engine]
            cells = [f"{r['size_mib']:.1f}"]
            for b in (r["beam1"], r["beam5"]):
                same = f"{b['same_as_torch']:.1%}" if "same_as_torch" in b else "-"
                bleu = f"{b['bleu']:.2f}" if model == "trained" else "-"
                cells += [f"{b['sentences_per_s']:.1f}", bleu, same]
            peak = max(r["beam1"]["peak_mib"], r["beam5"]["peak_mib"])
            lines.append(f"| {model} | {engine} | {' | '.join(cells)} | {peak:.0f} |")

    def speedup(model: str, engine: str, beam: str) -> float:
        return (
            e[model][engine][beam]["sentences_per_s"] / e[model]["torch"][beam]["sentences_per_s"]
        )

    speedups = [
        f"{model} {search}: CT2 float32 {speedup(model, 'ct2-float32', beam):.2f}x, "
        f"int8 {speedup(model, 'ct2-int8', beam):.2f}x"
        for model in ("trained", "base")
        for search, beam in (("greedy", "beam1"), ("beam 5", "beam5"))
    ]
    return [
        *lines,
        "",
        "Sentences/s against mt's: " + "; ".join(speedups) + '. "same as mt": the share of '
        "sentences translated exactly as mt translates them (beam search may differ: CT2 ranks "
        "hypotheses by log-probability / L^alpha during the search, mt by GNMT's penalty). CT2 "
        "runs the whole search in C++ with fused attention kernels, where mt's loop is Python "
        "over PyTorch operators; int8 adds quantized matrix products (AVX-512 VNNI) and a "
        "quarter of the weight traffic.",
        "",
    ]


def render_hf(h: dict) -> list[str]:
    intro = (
        f"The recipe model exported with `mt export --format hf`, decoded by transformers' "
        f"`generate()` ({h['versions']['transformers']}) beside mt (float32) and its CT2 export "
        f"on {h['sentences']} Tatoeba test sentences, {h['threads']} thread, engines in turns "
        "(medians). mt and CT2 search with the run's rules, transformers with the export's "
        f"generation_config.json ({json.dumps(h['generation_config'])}); greedy also as mt "
        "with the export's single length limit. Command: `python scripts/bench_hf.py "
        "runs/bench/tatoeba_cpu --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz "
        "--repeats 3`."
    )
    lines = [
        "## transformers: the `--format hf` export",
        "",
        intro,
        "",
        "| search | engine | BLEU | sentences/s | same output as mt | as transformers |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for search in (k for k in h if k.startswith(("greedy", "beam"))):
        for engine, r in h[search].items():
            same = {"mt": 1.0, "transformers": 1.0, **r["same_as"]} | {engine: 1.0}
            lines.append(
                f"| {search} | {engine} | {r['bleu']:.2f} | {r['sentences_per_s']:.1f} | "
                f"{same['mt']:.1%} | {same['transformers']:.1%} |"
            )
    return [*lines, ""]


def kept() -> str:
    """The hand-measured end of DOC, from its marker on ("" if there is none)."""
    text = DOC.read_text(encoding="utf-8") if DOC.is_file() else ""
    return "\n" + KEPT + text.partition(KEPT)[2] if KEPT in text else ""


def machine() -> str:
    import torch

    from mt.device import cpu_description

    return (
        f"{cpu_description()}, Linux {platform.release()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}"
    )


def render_budget(results: dict) -> list[str]:
    lines = []
    if "fitted" in results and "test_bleu5" in results.get("recipe", {}):
        auto, hand = results["recipe"], results["fitted"]
        lines += [
            "## The budget as the horizon, against a horizon fitted by hand",
            "",
            "The recipe as shipped (no step count: the horizon is what fits in 20 minutes, "
            "measured as it runs) next to the same config with `train.max_steps` set by hand "
            "to the updates the first one made and no time limit, run right after it on "
            "the same machine.",
            "",
            "| run | updates | training minutes | command minutes | last lr | "
            "Tatoeba test BLEU, beam 5 |",
            "|---|---:|---:|---:|---:|---:|",
            *(
                f"| {name} | {r['steps']} | {r['train_s'] / 60:.2f} | {r['wall_s'] / 60:.2f} | "
                f"{r['last_lr']:.2e} | {r['test_bleu5']:.2f} |"
                for name, r in (("budget = horizon (shipped)", auto), ("fitted by hand", hand))
            ),
            "",
            f"Command of the second: `{hand['command']}`",
            "",
        ]
    runs = budget_runs(results)
    if len(runs) >= 2:
        lines += [
            "## BLEU against budget",
            "",
            "The recipe with `--set train.max_minutes=M`, nothing else changed: the schedule "
            "fits itself to each budget.",
            "",
            "| budget, minutes | updates | training minutes | Tatoeba test BLEU, beam 5 |",
            "|---:|---:|---:|---:|",
            *(
                f"| {r['budget_s'] / 60:g} | {r['steps']} | {r['train_s'] / 60:.2f} | "
                f"{r['test_bleu5']:.2f} |"
                for r in runs
            ),
            "",
            "![BLEU against budget](budget.png)",
            "",
        ]
    return lines


def render(results: dict) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench` (`scripts/bench.py`) on {results.get('date', '?')}.",
        f"Machine: {results.get('machine', '?')}.",
        "",
    ]
    if "prepare" in results:
        p = results["prepare"]
        rt = p["round_trip"]
        lines += [
            "## Data preparation",
            "",
            f"`mt prepare --config tatoeba_cpu.yaml --rebuild` on the Tatoeba files "
            f"({sum(p['pairs'].values()):,} pairs after cleaning): **{p['seconds']:.1f} s** "
            f"wall time from a fresh process, peak memory {p['peak_gib']:.2f} GiB. Pairs: "
            f"{', '.join(f'{k} {v:,}' for k, v in p['pairs'].items())}; dropped: "
            f"{', '.join(f'{k} {v:,}' for k, v in p['dropped'].items())}; round trip "
            "decode(encode(s)) == s on "
            f"{rt['src']:.2%} (en) and {rt['tgt']:.2%} (es) of {rt['sentences']:,} held-out "
            "sentences.",
            "",
        ]
    lines += render_scale(results.get("scale", {}))
    if "speed" in results:
        s = results["speed"]
        rows = [s, *s.get("reduced", [])]  # no "reduced" in results from before it was measured
        lines += [
            "## Training speed: ours against torch.nn.Transformer",
            "",
            f"Same shape ({', '.join(f'{k} {v}' for k, v in s['shape'].items())}), same "
            f"Tatoeba batches of {s['max_tokens']} tokens (padding {s['padding']:.1%}), "
            f"{s['updates_per_model']} updates each, the models alternating batch by "
            f"batch in one process, {s['device']}, {s['threads']} threads; "
            "`mt, SDPA attention` is mt with SDPA's fused attention in every precision "
            "(see `mt.model.explicit_attention`). Float32, and bf16 (fp16 on older GPUs) "
            "where `precision: auto` picks it: "
            + ("here too." if len(rows) > 1 else "not here (no AMX bf16 units, no GPU).")
            + " Command: `python scripts/bench_train_speed.py --data ../shared/data`.",
            "",
            "| precision | mt | mt, SDPA attention | torch.nn.Transformer | mt / reference |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in rows:
            speed = r["tokens_per_s"]
            sdpa = speed.get("ours, SDPA attention")  # not measured before explicit attention
            lines.append(
                f"| {r['precision']} | {speed['ours']:,.0f} | "
                + (f"{sdpa:,.0f}" if sdpa else "-")
                + f" | {speed['torch.nn.Transformer']:,.0f} | "
                f"**{r['ratio_ours_over_reference']:.2f}** |"
            )
        lines.append("")
        if "matmul_gflops" in s:  # not in results from before it was measured
            lines += [
                f"The same run measured fp32 matrix products at {s['matmul_gflops']:.0f} "
                "GFLOP/s ((2048 x 1024) @ (1024 x 1024)).",
                "",
            ]
    if "recipe" in results:
        r = results["recipe"]
        used = (
            f" It trained {r['train_s'] / 60:.2f} of its {r['budget_s'] / 60:g} minutes "
            f"({r['train_s'] / r['budget_s']:.1%}; the command took {r['wall_s'] / 60:.2f} "
            f"minutes, {r['wall_s'] / r['budget_s']:.1%}, loading the prepared data and the "
            f"model included), and its last update ran at lr {r['last_lr']:.2e} (floor "
            f"{r['min_lr']:.0e}). Horizon estimates (update: horizon): "
            + ", ".join(f"{s}: {h}" for s, h in r["horizons"][:8])
            + (f", ... {r['horizons'][-1][0]}: {r['horizons'][-1][1]}" if r["horizons"] else "")
            + "."
            if "train_s" in r
            else ""
        )
        lines += [
            "## The 20-minute CPU recipe on Tatoeba",
            "",
            f"Command: `{r['command']}`",
            "",
            f"{r['steps']} updates, {r['tokens_per_s']:,.0f} target tokens/s on average, "
            f"padding {r['padding']:.1%} of batch cells, peak memory {r['peak_gib']:.2f} GiB."
            + used,
            "",
            "Validation BLEU (greedy, fixed subset) over time:",
            "",
            "| update | minutes | valid loss | valid BLEU |",
            "|---:|---:|---:|---:|",
            *(
                f"| {v['step']} | {v['elapsed_s'] / 60:.1f} | {v['loss']:.3f} | {v['bleu']:.2f} |"
                for v in r["valid"]
            ),
            "",
        ]
    lines += render_budget(results)
    if "quality" in results:
        lines += [
            "## Test quality (best checkpoint)",
            "",
            "| test set | search | BLEU | chrF | sentences | seconds | peak GiB |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for q in results["quality"]:
            search = "greedy" if q["beam"] == 1 else f"beam {q['beam']}"
            lines.append(
                f"| {q['set']} | {search} | {q['bleu']:.2f} | {q['chrf']:.2f} | "
                f"{q['sentences']} | {q['seconds']:.1f} | {q['peak_gib']:.2f} |"
            )
        signatures = sorted(
            {q["bleu_signature"] for q in results["quality"]}
            | {q["chrf_signature"] for q in results["quality"]}
        )
        lines += [
            "",
            "FLORES-200 is far out of domain for this model: Tatoeba is 113k short everyday "
            "sentences (8.6 tokens on average), FLORES long Wikipedia-style sentences with "
            "words the corpus never shows, so a 20-minute Tatoeba model scores near zero "
            "there. The rows are kept as the out-of-domain reference.",
            "",
            "sacreBLEU signatures: " + "; ".join(f"`{s}`" for s in signatures),
            "",
            "Command: `mt evaluate runs/bench/tatoeba_cpu --pairs FILE --beam N --json`",
            "",
        ]
    if "decode" in results:
        d = results["decode"]
        lines += [
            "## Decoding speed",
            "",
            f"Tatoeba test: {d['sentences']} sentences sorted by length and batched "
            f"{d['batch_sentences']} at a time, as `mt evaluate` does, and "
            f"{d['single_sentences']} of them (every n-th by length) one at a time; same "
            f"model, one process, {d['threads']} threads. torch.nn.Transformer trained at "
            f"{' and '.join(f'{r:,.0f}' for r in d.get('reference_tokens_per_s', []))} "
            "target tokens/s just before and after, in the same process. Command: `python "
            "scripts/bench_decode.py runs/bench/tatoeba_cpu --pairs "
            "../shared/data/tatoeba_en_es.test.jsonl.gz --data ../shared/data`.",
            "",
            "| search | batched sentences/s | one at a time | speed-up |",
            "|---|---:|---:|---:|",
        ]
        for beam in (1, 5):
            b = d[f"beam{beam}"]
            lines.append(
                f"| {'greedy' if beam == 1 else 'beam 5'} | "
                f"{b['batched_sentences_per_s']:.1f} | {b['single_sentences_per_s']:.1f}"
                f" | {b['speedup']:.1f}x |"
            )
        lines.append("")
    if "export" in results:
        lines += render_export(results["export"])
    if "hf" in results:
        lines += render_hf(results["hf"])
    if "serve" in results:
        lines += render_serve(results["serve"])
    if "text" in results:
        lines += render_text(results["text"])
    if "splitter" in results:
        lines += ["## Sentence splitters", "", render_splitter(results["splitter"]["rows"]), ""]
    if "langid" in results:
        lines += render_langid(results["langid"])
    if "markup" in results:
        lines += render_markup(results["markup"])
    if "ensemble" in results:
        lines += render_ensemble(results["ensemble"])
    if "backtranslation" in results:
        lines += render_backtranslation(results["backtranslation"])
    lines += peer_comparison(results)
    lines += render_gpu()
    return "\n".join(lines).rstrip() + "\n"


def render_gpu() -> list[str]:
    """Packed, compiled training (issue 18): what its CPU check measured, and the commands
    whose figures wait for a GPU (make bench runs on this one, which has none)."""
    return [
        "## Training on a GPU: packed rows, compiled once",
        "",
        "Not measured yet: no GPU at hand. On one, with the Tatoeba files: `python "
        "scripts/gpu_check.py --config base.yaml --steps 200 --set data.source=files --set "
        "data.files.train=../shared/data/tatoeba_en_es.train.jsonl.gz --set "
        "data.files.valid=../shared/data/tatoeba_en_es.valid.jsonl.gz --set "
        "data.files.test=../shared/data/tatoeba_en_es.test.jsonl.gz` prints the steady target "
        "tokens/s and MFU (the FLOP count of before, per sentence pair: no credit for padding), "
        "the seconds compiling took, the seconds from the first update to steady speed, the "
        "first 100 updates' speed against the steady one, host syncs per update and peak "
        "memory. Add `--set train.max_tokens=N` (8192, 32768, 65536) and `--set "
        "train.precision=fp32` for tokens/s and MFU against the batch and bf16 against fp32, "
        "`--set train.pack=false` for padded batches; `python scripts/bench_train_speed.py "
        "--device cuda` for ours against torch.nn.Transformer.",
        "",
        "What the CPU checked of the change (padded batches and no compiling, as `auto` keeps "
        "them on a CPU): training computes bitwise what it did (the weights of a 60-update tiny "
        "run are equal before and after), and as fast. Before (main at c2a551f, loaded as a "
        "second package) and after, our model and loss trained on the same Tatoeba batches of "
        "the CPU recipe (2048 tokens), alternating batch by batch in one process, the order "
        "reversed every batch (the loop of `scripts/bench_train_speed.py`), 30 updates each, "
        "2 threads, on a 2-core Intel Xeon (avx2 avx512f avx512_bf16 avx512_fp16 amx_tile "
        "amx_bf16) shared with five other jobs (load ~10: speeds a tenth of the table above), "
        "2026-11-23. Timed alone the same way, 40 times each, bf16's forward and backward "
        "passes took 242 ms after against 241 before (1.00) and its loss 137 against 139 ms: "
        "the gap in the table is the noise of the loaded machine.",
        "",
        "| precision | before, tokens/s | after | after / before |",
        "|---|---:|---:|---:|",
        "| float32 | 190 | 191 | 1.01 |",
        "| bf16 | 194 | 182 | 0.94 |",
        "",
    ]


# The better of two peer toolkits, trained with the same shape, data, 8k joint vocabulary and
# a schedule fitted to 20 minutes, on the machine where torch.nn.Transformer of that shape
# trained at REFERENCE_THEN tokens/s (figures from the project's issue tracker).
PEER = {
    "bleu5": 25.1,
    "bleu1": 24.7,
    "chrf": 44.9,
    "tokens_per_s": 3000,
    "peak_gib": 2.8,
    "greedy_per_s": 550,
    "beam5_per_s": 180,
}


def peer_comparison(results: dict) -> list[str]:
    if not {"speed", "recipe", "quality", "decode"} <= results.keys():
        return []
    if not results["decode"].get("reference_tokens_per_s"):
        return []  # decoded before the machine's speed was measured alongside: rerun decode
    tatoeba = {q["beam"]: q for q in results["quality"] if q["set"] == "Tatoeba test"}
    speed, decode = results["speed"], results["decode"]
    ours = {
        "bleu5": tatoeba[5]["bleu"],
        "bleu1": tatoeba[1]["bleu"],
        "chrf": tatoeba[5]["chrf"],
        "tokens_per_s": speed["tokens_per_s"]["ours"],
        "peak_gib": results["recipe"]["peak_gib"],
        "greedy_per_s": decode["beam1"]["batched_sentences_per_s"],
        "beam5_per_s": decode["beam5"]["batched_sentences_per_s"],
    }
    # how fast this machine was against the peers' one, in the run that measured each speed
    train_scale = speed["tokens_per_s"]["torch.nn.Transformer"] / REFERENCE_THEN
    decode_scale = statistics.mean(decode["reference_tokens_per_s"]) / REFERENCE_THEN
    scale = {"tokens_per_s": train_scale, "greedy_per_s": decode_scale}
    scale["beam5_per_s"] = decode_scale
    rows = [
        ("Tatoeba test BLEU, beam 5", "bleu5", True, ".1f"),
        ("Tatoeba test BLEU, greedy", "bleu1", True, ".1f"),
        ("Tatoeba test chrF, beam 5", "chrf", True, ".1f"),
        ("training target tokens/s", "tokens_per_s", True, ",.0f"),
        ("training peak memory, GiB", "peak_gib", False, ".2f"),
        ("decoding sentences/s, greedy, batches of 64", "greedy_per_s", True, ",.0f"),
        ("decoding sentences/s, beam 5, batches of 64", "beam5_per_s", True, ",.0f"),
    ]
    lines = [
        "## Against the better peer toolkit",
        "",
        "Same model shape, data and 20 minutes; the peer's figures as reported in the "
        "project's issue. They were measured on a faster machine: torch.nn.Transformer of "
        f"this shape trained there at about {REFERENCE_THEN:,.0f} target tokens/s, here at "
        f"{speed['tokens_per_s']['torch.nn.Transformer']:,.0f} next to our training speed "
        f"({train_scale:.2f} times as fast) and at "
        f"{statistics.mean(decode['reference_tokens_per_s']):,.0f} around our decoding "
        f"({decode_scale:.2f}). The peer's speeds are scaled by those factors to this "
        "machine; quality and memory need no scaling. Our training speed is the one measured "
        "next to the reference; the 20-minute run itself averaged "
        f"{results['recipe']['tokens_per_s']:,.0f} tokens/s, validation excluded.",
        "",
        "| | better peer, as reported | better peer, at this machine's speed | mt | |",
        "|---|---:|---:|---:|---|",
    ]
    for label, key, higher, fmt in rows:
        peer = PEER[key] * scale.get(key, 1.0)
        better = ours[key] > peer if higher else ours[key] < peer
        lines.append(
            f"| {label} | {PEER[key]:{fmt}} | {peer:{fmt}} | {ours[key]:{fmt}} | "
            f"{'better' if better else '**worse**'} |"
        )
    lines += [
        "| final checkpoint when stopped | lost (signal during save) | | kept (atomic "
        "save, signal handled after the update) | better |",
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument(
        "--only",
        default="prepare,scale,speed,recipe,fitted,quality,decode,budget,export,serve,langid,markup,hf",
    )
    parser.add_argument("--minutes", type=float, default=20.0)
    args = parser.parse_args()
    data = args.data.resolve()
    if not (data / "tatoeba_en_es.train.jsonl.gz").is_file():
        raise SystemExit(f"{data}: the Tatoeba files are not there (set DATA=...)")
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    steps = {
        "prepare": lambda: step_prepare(data, results),
        "scale": lambda: step_scale(data, results),
        "speed": lambda: step_speed(data, results),
        "recipe": lambda: step_recipe(data, results, args.minutes),
        "fitted": lambda: step_fitted(data, results),
        "budget": lambda: step_budget(data, results),
        "quality": lambda: step_quality(data, results),
        "decode": lambda: step_decode(data, results),
        "export": lambda: step_export(data, results),
        "hf": lambda: step_hf(data, results),
        "serve": lambda: step_serve(data, results),
        "text": lambda: step_text(data, results),
        "langid": lambda: step_langid(data, results),
        "markup": lambda: step_markup(data, results),
        "ensemble": lambda: step_script(data, results, "ensemble", args.minutes),
        "backtranslation": lambda: step_script(data, results, "backtranslation", args.minutes),
    }
    for name in filter(None, args.only.split(",")):  # --only "" re-renders the page
        steps[name]()
        results["date"] = datetime.date.today().isoformat()
        results["machine"] = machine()
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2))
        DOC.write_text(render(results) + kept())
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(render(results) + kept())
    plot_budget(results)
    print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
