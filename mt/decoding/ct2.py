"""Translate with a folder from `mt export` (CTranslate2): the runtime behind the
`ctranslate2` engine.

Decoding maps our options to CT2's: beam, n-best, `decode.alpha`, no-repeat n-grams,
batches of about `batch_tokens` source tokens, a forced target prefix (its `target_prefix`)
and sampling (`decode.sampling`, `temperature`, `top_k`, `top_p`: its `sampling_*`, n-best
samples as `num_hypotheses`). CT2 divides a hypothesis's log-probability by L ** alpha, ours
by GNMT's ((5 + L) / 6) ** alpha: its hypotheses are rescored with ours (greedy search is
unaffected; the beam search itself may rarely differ). With a prefix CT2's scores leave the
prefix's tokens out (ours count them; a text's hypotheses share it, so rank alike). PAD and
BOS (the model's own ids: a Marian model's are one token) are never generated, as in ours.
CT2 has neither ensembles nor lexical constraints. CT2 reads and writes token strings:
sources are cut by the run's tokenizers (ours, or a Marian model's SentencePiece ones,
mt.data.spm) and their ids looked up in the vocabulary.

CT2 seeds each worker thread's generator once, when the thread first samples, from the
process's seed (`set_random_seed`); so a sampling call runs on a translator opened after
seeding, and the same `decode.seed` gives the same samples, as the torch engine's does.

`ctranslate2` is an optional extra (pip install 'mt[export]'), imported only in here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from ..config import Config, DecodeConfig
from ..config_file import config_from_dict
from ..data import tokenizer as tok
from ..data.tokenizer import SPECIAL_TOKENS
from ..errors import ConfigError, InputError, MachineError

MANIFEST = "mt.json"
MANIFEST_FORMAT = "mt-ctranslate2-1"


def ctranslate2() -> Any:
    """The ctranslate2 module, or a one-line error saying how to install it."""
    try:
        import ctranslate2 as ct2
    except ImportError:
        raise MachineError("ctranslate2 is not installed: pip install 'mt[export]'") from None
    return ct2


def is_exported(path: str | Path) -> bool:
    """Whether `path` is a folder written by `export`."""
    return (Path(path) / MANIFEST).is_file()


def known_bleu(meta: dict[str, str]) -> float | None:
    """The validation BLEU the checkpoint recorded (None before any validation or averaged)."""
    if "averaged" in meta:
        return None
    bleu = json.loads(meta.get("best_bleu", "-1"))
    return bleu if bleu >= 0 else None


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The vocabulary as token strings, by id."""
    tokens = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    if None in tokens:
        raise ConfigError(f"the vocabulary has no token for id {tokens.index(None)}")
    return tokens


def unk_token(tokenizer: Tokenizer) -> str:
    """The tokenizer's unknown token: a Marian model's own (mt.data.spm), else mt's."""
    return getattr(tokenizer, "specials", {}).get("unk", SPECIAL_TOKENS[3])


@dataclass
class Exported:
    """An exported folder ready to translate."""

    translator: Any  # ctranslate2.Translator
    config: Config
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    path: Path
    manifest: dict[str, Any]
    device: str = "cpu"
    threads: int = 0

    def __post_init__(self) -> None:  # the lookups of every translation, made once
        self.src_tokens = vocabulary(self.src_tokenizer)  # CT2 reads tokens, not ids
        self.tgt_tokens = vocabulary(self.tgt_tokenizer)
        self.tgt_ids = self.tgt_tokenizer.get_vocab()

    def seeded(self, seed: int) -> Any:
        """A translator of the same model whose samples start from `seed` (see above)."""
        ctranslate2().set_random_seed(seed)
        return _translator(self.path, self.device, self.threads)


def read_config(path: str | Path) -> Config:
    """The config an exported folder was trained with."""
    manifest = _manifest(Path(path))
    return config_from_dict(manifest["config"], f"{Path(path) / MANIFEST} (config)")


def _manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path / MANIFEST}: not readable ({e})") from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise InputError(f"{path / MANIFEST}: not an mt export ('{MANIFEST_FORMAT}' expected)")
    return manifest


def load(path: str | Path, device: str = "cpu", threads: int = 0) -> Exported:
    """An exported folder's translator (`threads` 0: CT2's default) and tokenizers."""
    path = Path(path)
    manifest = _manifest(path)
    config = read_config(path)
    translator = _translator(path, str(device), threads)
    files = [path / manifest[f"{side}_tokenizer"] for side in ("src", "tgt")]
    src, tgt = tok.tokenizers_from_files(files)
    return Exported(translator, config, src, tgt, path, manifest, str(device), threads)


def _translator(path: Path, device: str, threads: int) -> Any:
    kind = "cuda" if device.startswith("cuda") else "cpu"
    index = int(device.partition(":")[2] or 0)
    try:
        return ctranslate2().Translator(
            str(path), device=kind, device_index=index, intra_threads=threads
        )
    except (RuntimeError, ValueError) as e:
        raise InputError(f"{path}: CTranslate2 cannot load it ({e})") from None


def decode_ids(
    exported: Exported,
    ids: Sequence[Sequence[int]],
    cfg: DecodeConfig,
    prefixes: Sequence[Sequence[int]] | None,
    limits: Sequence[int],
) -> list[list[tuple[list[int], float]]]:
    """As the torch engine's `mt.decoding.translate.translate_ids`: up to `cfg.nbest` (token
    ids, score) pairs per source of `ids` (each fits the model), best first; the score is the
    length-normalised log-probability (NaN for greedy search). `prefixes`: the target ids
    each translation starts with ([]: none), one per source.

    Output lengths: ours stop each sentence at its own of `limits`; CT2 has one limit per
    call, so each output is cut to its own limit afterwards (exact for greedy).
    """
    from .search import least_tokens
    from .translate import translation_batch_tokens

    scored = cfg.sampling or not cfg.greedy
    out: list[list[tuple[list[int], float]]] = [[([], float("nan"))] for _ in ids]
    todo = [i for i, x in enumerate(ids) if x]
    if not todo:
        return out
    pad, bos = (
        exported.tgt_tokens[i] for i in (exported.config.model.pad_id, exported.config.model.bos_id)
    )
    vocab_size = exported.tgt_tokenizer.get_vocab_size()
    budget = translation_batch_tokens(cfg, exported.config.model, vocab_size, exported.device)
    rows = cfg.nbest if cfg.sampling else cfg.beam  # decoded per source
    if cfg.sampling:
        translator = exported.seeded(cfg.seed or 0)
        search = dict(beam_size=1, num_hypotheses=cfg.nbest, sampling_topk=cfg.top_k)
        search.update(sampling_topp=cfg.top_p, sampling_temperature=cfg.temperature)
    else:
        translator = exported.translator
        hypotheses = cfg.nbest if cfg.greedy else max(cfg.nbest, cfg.beam)
        search = dict(beam_size=cfg.beam, num_hypotheses=hypotheses)
    target_prefix = None
    if prefixes is not None:
        target_prefix = [[exported.tgt_tokens[t] for t in prefixes[i]] or None for i in todo]
    results = translator.translate_batch(
        [[exported.src_tokens[t] for t in ids[i]] for i in todo],
        target_prefix,
        max_batch_size=max(1, budget // rows),  # ours counts a source token a row
        batch_type="tokens",
        **search,
        length_penalty=cfg.alpha,
        no_repeat_ngram_size=cfg.no_repeat_ngram,
        max_decoding_length=max(limits[i] for i in todo) + 1,  # room for EOS
        max_input_length=0,  # the pieces fit already
        min_decoding_length=least_tokens(cfg),
        return_scores=scored,
        suppress_sequences=[[pad], [bos]],
    )
    for i, result in zip(todo, results):
        out[i] = _ranked(result, exported, limits[i], cfg, scored)
    return out


def _ranked(
    result: Any, exported: Exported, limit: int, cfg: DecodeConfig, scored: bool
) -> list[tuple[list[int], float]]:
    """One source's CT2 result as up to `cfg.nbest` (token ids, score) pairs, best first,
    each output cut to its own length limit."""
    from .search import length_penalty

    hyps = [[exported.tgt_ids[t] for t in h[:limit]] for h in result.hypotheses]
    if not scored:
        return [(h, float("nan")) for h in hyps]
    # CT2 ranks by logprob / L ** alpha, L counting EOS: rescored by ours, GNMT's
    lengths = [len(h) + 1 for h in result.hypotheses]
    scores = [
        s * n**cfg.alpha / length_penalty(n, cfg.alpha) for n, s in zip(lengths, result.scores)
    ]
    return sorted(zip(hyps, scores), key=lambda p: -p[1])[: cfg.nbest]
