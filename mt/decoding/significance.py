"""Whether one system beats another on one test set: sacreBLEU's own paired tests (its
`PairedTest`, what `sacrebleu REF -i BASE SYS --paired-bs` / `--paired-ar` run), BLEU and chrF,
each system against the first (the baseline). Paired bootstrap resampling (Koehn, 2004) gives a
p-value and each system's mean and 95% confidence interval over 1,000 resamples; approximate
randomization (Riezler and Maxwell, 2005) a p-value over 10,000 trials. sacreBLEU seeds both
with SACREBLEU_SEED (12345 unless set), so a run here equals one of its command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError

TESTS = {"bs": "paired bootstrap resampling", "ar": "approximate randomization"}
METRICS = ("BLEU", "chrF")


def paired_tests(
    systems: Sequence[tuple[str, Sequence[str]]],
    references: Sequence[str],
    tests: Sequence[str] = ("bs", "ar"),
) -> list[dict[str, Any]]:
    """One row per system (the baseline first): its name and, per metric (bleu, chrf), its
    score, the bootstrap mean and 95% interval half-width (`bs`), and the p-value of each
    test against the baseline (none for the baseline itself)."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    for name, hypotheses in systems:
        if len(hypotheses) != len(references):
            raise ConfigError(
                f"{name}: {len(hypotheses)} hypotheses for {len(references)} references"
            )
    rows: list[dict[str, Any]] = [{"system": name} for name, _ in systems]
    # stripped at the end, as sacrebleu's command line reads files
    systems = [(name, [h.rstrip() for h in hyps]) for name, hyps in systems]
    references = [r.rstrip() for r in references]
    for test in tests:
        metrics = {"BLEU": BLEU(references=[references]), "chrF": CHRF(references=[references])}
        _, scores = PairedTest(systems, metrics, None, test_type=test)()
        for metric in METRICS:
            (column,) = (key for key in scores if key.startswith(metric))  # "chrF2" for chrF
            key = metric.lower()
            for row, result in zip(rows, scores[column]):
                row[key] = float(result.score)  # numpy's floats are not JSON's
                if test == "bs":
                    row[f"{key}_mean"], row[f"{key}_ci"] = float(result.mean), float(result.ci)
                if result.p_value is not None:
                    row[f"{key}_p_{test}"] = float(result.p_value)
    return rows


def table(rows: list[dict[str, Any]], tests: Sequence[str]) -> str:
    """The rows as text: per metric, score (bootstrap mean ± 95% interval) and p-values."""
    lines = []
    for metric in METRICS:
        key = metric.lower()
        header = [f"{metric:>6}", f"{'mean ± 95% CI':>15}", *(f"{'p ' + t:>7}" for t in tests)]
        lines.append("  ".join([*header, "system"]))
        for i, row in enumerate(rows):
            interval = (
                f"{row[f'{key}_mean']:6.2f} ± {row[f'{key}_ci']:5.2f}" if "bs" in tests else ""
            )
            p_values = [f"{row[f'{key}_p_{t}']:7.4f}" if i else f"{'':>7}" for t in tests]
            name = ("baseline: " if i == 0 else "") + row["system"]
            lines.append("  ".join([f"{row[key]:6.2f}", f"{interval:>15}", *p_values, name]))
    lines.append(
        "p: the chance of a difference this large between the baseline and the system if "
        f"neither were better ({', '.join(TESTS[t] for t in tests)}; sacreBLEU)"
    )
    return "\n".join(lines)


def read_hypotheses(paths: Sequence[str], count: int) -> list[tuple[str, list[str]]]:
    """Systems' outputs given as files (--hyp), one line a sentence: (path, lines), each
    refused unless it has `count` lines."""
    from ..data.text_input import read_lines

    systems = []
    for path in paths:
        lines = [line.rstrip() for line in read_lines(path, "--hyp")]  # as sacrebleu reads
        if len(lines) != count:
            raise ConfigError(f"--hyp {path}: {len(lines)} lines for {count} test sentences")
        systems.append((path, lines))
    return systems


def parse_tests(paired: str) -> tuple[str, ...]:
    """--paired: bs, ar or both."""
    if paired not in ("bs", "ar", "both"):
        raise ConfigError(f"--paired {paired}: expected bs, ar or both")
    return ("bs", "ar") if paired == "both" else (paired,)
