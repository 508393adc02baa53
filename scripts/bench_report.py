"""docs/benchmarks.md from the results `make bench` saved (runs/bench/results.json): a
section for each step's record, each step script rendering its own, then the page's
hand-measured end, kept as it is; and docs/budget.png. Figures measured elsewhere (the peer
toolkit's) are read from that hand-kept end, never typed in here."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from bench_abuse import render as render_abuse
from bench_backtranslation import render as render_backtranslation
from bench_ensemble import render as render_ensemble
from bench_langid import render as render_langid
from bench_long import render as render_long
from bench_markup import render as render_markup
from bench_prepare import render as render_scale
from bench_serve import render as render_serve
from bench_splitter import render as render_splitter
from bench_text import render as render_text
from score_ranking import render as render_score

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
# what follows this line in DOC was measured by hand (one-off comparisons): kept as it is
KEPT = "<!-- measured by hand, below: make bench keeps it as it is -->"
# the section of DOC's hand-kept end whose table holds the peer toolkit's reported figures
PEER_SECTION = "## The better peer toolkit, as reported"
NUMBERS = {
    "bleu5", "bleu1", "chrf", "tokens_per_s", "peak_gib", "greedy_per_s", "beam5_per_s",
    "reference_tokens_per_s",
}  # fmt: skip


def kept() -> str:
    """The hand-measured end of DOC, from its marker on ("" if there is none)."""
    text = DOC.read_text(encoding="utf-8") if DOC.is_file() else ""
    return "\n" + KEPT + text.partition(KEPT)[2] if KEPT in text else ""


def peer_figures() -> dict[str, tuple[str, str, str]]:
    """The rows of the peer's table in DOC's hand-kept end, by their first cell: the figure
    as reported, what mt has instead and the verdict (those two for worded rows only)."""
    section = kept().partition(PEER_SECTION)[2].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and not re.fullmatch(r"-*:?", cells[1]):
            rows[cells[0]] = (cells[1], cells[2], cells[3])
    rows.pop("figure", None)  # the header
    return rows


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
    for key, section in SECTIONS.items():  # each step script's section of its own record
        if key in results:
            lines += section(results[key])
    lines += peer_comparison(results)
    return "\n".join(lines).rstrip() + "\n"


# the sections after decoding speed, in the page's order: a step's key and its renderer
SECTIONS: dict[str, Callable[[dict], list[str]]] = {
    "export": render_export,
    "hf": render_hf,
    "serve": render_serve,
    "text": render_text,
    "splitter": lambda s: ["## Sentence splitters", "", render_splitter(s["rows"]), ""],
    "langid": render_langid,
    "long": render_long,
    "markup": render_markup,
    "score": render_score,
    "abuse": render_abuse,
    "ensemble": render_ensemble,
    "backtranslation": render_backtranslation,
}


def peer_comparison(results: dict) -> list[str]:
    if not {"speed", "recipe", "quality", "decode"} <= results.keys():
        return []
    if not results["decode"].get("reference_tokens_per_s"):
        return []  # decoded before the machine's speed was measured alongside: rerun decode
    reported = peer_figures()
    if not reported:
        return []  # no table of the peer's figures in DOC's hand-kept part
    said = {key: float(value) for key, (value, _, _) in reported.items() if key in NUMBERS}
    reference_then = said.pop("reference_tokens_per_s")
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
    train_scale = speed["tokens_per_s"]["torch.nn.Transformer"] / reference_then
    decode_scale = statistics.mean(decode["reference_tokens_per_s"]) / reference_then
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
        f"this shape trained there at about {reference_then:,.0f} target tokens/s, here at "
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
        peer = said[key] * scale.get(key, 1.0)
        better = ours[key] > peer if higher else ours[key] < peer
        lines.append(
            f"| {label} | {said[key]:{fmt}} | {peer:{fmt}} | {ours[key]:{fmt}} | "
            f"{'better' if better else '**worse**'} |"
        )
    for label, (value, ours_said, verdict) in reported.items():
        if label not in NUMBERS:  # a row the hand-kept table words itself
            lines.append(f"| {label} | {value} | | {ours_said} | {verdict} |")
    return [*lines, ""]
