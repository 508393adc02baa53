"""Score translations with sacreBLEU (BLEU and chrF), and read the sets to score."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sacrebleu.metrics import BLEU, CHRF

from ..config import Config
from ..data.corpus import normalize, read_pairs
from ..data.encode import read_held_out
from ..data.text_input import read_lines
from ..errors import ConfigError
from ..run_folder import data_dir, held_out_text

if TYPE_CHECKING:
    from .engine import Translator


def bleu_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | str]:
    """Corpus BLEU (13a tokenisation) and chrF on detokenised text, with signatures."""
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": b.score,
        "chrf": c.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def evaluation_set(
    run_dir: Path, cfg: Config, split: str, pairs: str | None, src: str | None, ref: str | None
) -> tuple[str, list[str], list[str]]:
    """(name, sources, references): pairs in any corpus format, a source and a reference
    file, or the run's own `split` (test or valid) as `mt prepare` cut it; all in the
    direction of `cfg` (oriented, mt.data.directions)."""
    if split not in ("test", "valid"):
        raise ConfigError(f"--split {split}: must be test or valid")
    if (src is None) != (ref is None):
        raise ConfigError("--src and --ref go together")
    if pairs and src:
        raise ConfigError("give --pairs or --src/--ref, not both")
    if pairs:
        if not Path(pairs).is_file():
            raise ConfigError(f"--pairs {pairs}: no such file")
        found = read_pairs([pairs], cfg.data, "--pairs")
        name = pairs
    elif src and ref:
        sources = [normalize(x) for x in read_lines(src, "--src")]
        references = [normalize(x) for x in read_lines(ref, "--ref")]
        if len(sources) != len(references):
            raise ConfigError(
                f"--src {src} has {len(sources)} lines but --ref {ref} has {len(references)}"
            )
        found, name = list(zip(sources, references)), src
    else:
        cached = held_out_text(data_dir(run_dir), split)
        if not cached.is_file():
            raise ConfigError(
                f"{cached}: the run's {split} split is not there; pass --pairs "
                "FILE or --src FILE --ref FILE"
            )
        found, targets = read_held_out(cached)
        if cfg.data.both_directions:  # the pairs of the direction decoded
            found = [pair for pair, to in zip(found, targets) if to == cfg.decode.target_language]
        name = f"{split} split of {run_dir}"
    if not found:
        raise ConfigError(f"{name}: no sentences to evaluate")
    return name, [s for s, _ in found], [r for _, r in found]


def evaluate(
    translator: Translator,
    name: str,
    sources: list[str],
    references: list[str],
    translate: Callable[[list[str]], list[str]],
) -> tuple[dict[str, Any], list[str]]:
    """Translate `sources` by `translate` (mt.text's, with `translator`) and score them
    against `references`: (the result `mt evaluate` prints, the hypotheses)."""
    started = time.perf_counter()
    hypotheses = translate(sources)
    seconds = time.perf_counter() - started
    result = dict(
        bleu_chrf(hypotheses, references),
        sentences=len(sources),
        beam=translator.config.decode.beam,
        seconds=seconds,
        sentences_per_s=len(sources) / max(seconds, 1e-9),
        checkpoint=str(translator.path),
        data=name,
    )
    result["signature"] = result["bleu_signature"]
    return result, hypotheses
