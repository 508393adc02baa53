"""One way to decode, whatever holds the model: a `Translator` opened from a run folder, a
checkpoint or a folder from `mt export`, for every caller (the CLI, `mt serve`, the scripts).

Two engines: torch (our model: mt.decoding.translate, mt.decoding.scoring) and ctranslate2 (an
exported folder: mt.decoding.ct2). Which one a path needs is decided here and nowhere else;
callers ask the translator (`translate_nbest`, `score`, `info`, `run_dir`) and never look at
its type.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from .. import checkpoint as ckpt
from ..config import Config, DecodeConfig
from ..config_file import decoding_config
from ..data.directions import oriented, turned
from ..data.spans import placeholder
from ..errors import ConfigError
from ..messages import say
from . import ct2
from .coverage import Coverage, Translations
from .ensemble import load_ensemble
from .pieces import lead_ids
from .placeholders import protect
from .trained import Trained, carried_pieces

ENGINES = ("auto", "torch", "ctranslate2")


class Translator(ABC):
    """A model ready to decode: `config` is the config to decode with (the model's own, its
    decode section overridden as asked), `device` where it runs, `path` what was opened."""

    engine: str

    def __init__(self, config: Config, device: Any, path: Path, tokenizers: tuple) -> None:
        self.config, self.device, self.path = config, device, path
        self.src_tokenizer, self.tgt_tokenizer = tokenizers

    def translate_nbest(
        self,
        texts: Sequence[str],
        decode: DecodeConfig | None = None,
        progress: bool = False,
        prefixes: Sequence[str] | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
    ) -> Translations:
        """Each text's translations, in input order: up to `decode.nbest` (text, score)
        pairs, best first (`Translations.nbest`; the score is the length-normalised
        log-probability, NaN for greedy search), and whether it is short. `decode`: this
        translator's own decode section unless given; `prefixes`: the target text each
        translation must start with ("": none), one per text; `constraints`: the target terms
        each must contain, a list per text. A translation the coverage guard finds short is
        translated again in smaller pieces (mt.decoding.coverage), which is said; one still
        short after that is `Translations.short`, the verdict every caller takes: each source
        and each translation is measured once, here. A model with placeholders has each
        source's spans carried over (mt.decoding.placeholders): those it loses are decoded
        again forced where the engine can, else put back by their neighbours
        (`Translations.placed`), which is said."""
        decode = self.decoding(decode)
        protected = protect(texts, self.config.tokenizer.placeholders)
        sources = [p.text for p in protected]
        found, short = self._guarded(sources, decode, progress, prefixes, constraints)
        lost = [i for i, p in enumerate(protected) if p.lost(found[i][0][0])]
        if lost and self.forces(decode):  # decoded again with the lost ones forced
            given = constraints or [[] for _ in texts]
            terms = [
                [*map(placeholder, protected[i].lost(found[i][0][0])), *given[i]] for i in lost
            ]
            steer = None if prefixes is None else [prefixes[i] for i in lost]
            again = self._translate_nbest([sources[i] for i in lost], decode, False, steer, terms)
            for i, hyps in zip(lost, again):
                found[i] = hyps
        nbest, placed = [], []
        for p, hyps in zip(protected, found):
            restored = [(*p.restore(text), score) for text, score in hyps]
            nbest.append([(text, score) for text, _, score in restored])
            placed.append(restored[0][1])
        if any(placed):
            say(
                f"warning: {sum(placed)} span(s) (numbers, URLs, placeholders) the model did not "
                f"carry over exactly, in {sum(map(bool, placed))} text(s): put back where "
                "their neighbours are"
            )
        return Translations(nbest, short, placed)

    def forces(self, decode: DecodeConfig) -> bool:
        """Whether this engine can force target terms (constraints) with `decode`."""
        return False

    def _guarded(
        self,
        texts: Sequence[str],
        decode: DecodeConfig,
        progress: bool,
        prefixes: Sequence[str] | None,
        constraints: Sequence[Sequence[str]] | None,
    ) -> tuple[list[list[tuple[str, float]]], list[bool]]:
        """Each text's n-best and whether it is short, under the coverage guard."""
        found = self._translate_nbest(texts, decode, progress, prefixes, constraints)
        sources = self.coverage.source_lengths(texts)
        short = self.coverage.short(sources, [hyps[0][0] for hyps in found], decode.coverage)
        retry = [i for i, flag in enumerate(short) if flag]
        if not retry:
            return found, short
        by_piece: dict[int, list[int]] = {}  # half a first piece: every retried text is cut
        for i in retry:
            by_piece.setdefault(max(1, min(sources[i], decode.piece_tokens) // 2), []).append(i)
        longer = []  # the retried whose second try is kept: the others are still short
        for piece, group in by_piece.items():
            smaller = dataclasses.replace(decode, piece_tokens=piece)
            steer = [None if x is None else [x[i] for i in group] for x in (prefixes, constraints)]
            again = self._translate_nbest([texts[i] for i in group], smaller, False, *steer)
            for i, hyps in zip(group, again):
                if len(hyps[0][0]) > len(found[i][0][0]):
                    found[i] = hyps
                    longer.append(i)
        kept = [found[i][0][0] for i in longer]
        still = self.coverage.short([sources[i] for i in longer], kept, decode.coverage)
        for i, flag in zip(longer, still):
            short[i] = flag
        say(
            f"warning: {len(retry)} translation(s) much shorter than their source predicts: "
            f"translated again in smaller pieces; {sum(short)} still short"
        )
        return found, short

    @abstractmethod
    def _translate_nbest(
        self,
        texts: Sequence[str],
        decode: DecodeConfig,
        progress: bool,
        prefixes: Sequence[str] | None,
        constraints: Sequence[Sequence[str]] | None,
    ) -> list[list[tuple[str, float]]]:
        """translate_nbest without the guard, `decode` complete (`decoding`)."""

    @cached_property
    def trained(self) -> Trained:
        """The length the model carries, its length ratio and its connectives
        (mt.decoding.trained)."""
        return Trained.of(self.run_dir, self.config, (self.src_tokenizer, self.tgt_tokenizer))

    @cached_property
    def coverage(self) -> Coverage:
        """The coverage guard's measure of a translation's length."""
        return Coverage(self.trained.ratio, self.src_tokenizer, self.tgt_tokenizer)

    def translate(self, texts: Sequence[str], *args: Any, **options: Any) -> list[str]:
        """The best translation of each text, in input order; an empty text gives "". The
        other arguments are translate_nbest's."""
        return [hyps[0][0] for hyps in self.translate_nbest(texts, *args, **options).nbest]

    def decoding(self, decode: DecodeConfig | None) -> DecodeConfig:
        """`decode` (None: the translator's own), its sampling seed run.seed and its pieces
        the length the model carries (mt.decoding.trained) unless set."""
        decode = carried_pieces(decode or self.config.decode, self.trained.carried)
        if decode.seed is None:
            decode = dataclasses.replace(decode, seed=self.config.run.seed)
        return decode

    def turned(self) -> Translator | None:
        """A model of both directions: the same weights translating the other way
        (mt.data.directions), memory shared; None for a model of one direction."""
        config = turned(self.config)
        if config is None:
            return None
        other = self._with(config)
        other.trained = self.trained  # the same training data: measured once
        return other

    @abstractmethod
    def _with(self, config: Config) -> Translator:
        """This translator's model, decoded with `config`."""

    def score(self, pairs: Sequence[tuple[str, str]], decode: DecodeConfig | None = None) -> list:
        """The model's log-probability of each pair's target given its source (`score.Scored`),
        where the engine computes it."""
        raise ConfigError(f"{self.path}: the {self.engine} engine cannot score pairs")

    @property
    @abstractmethod
    def run_dir(self) -> Path:
        """The run folder the model was trained in (its data cache holds the test split)."""

    @abstractmethod
    def _described(self) -> tuple[str, dict[str, Any], float | None]:
        """(name, metadata with the step, validation BLEU or None)."""

    def info(self) -> dict[str, Any]:
        """What the model is, as `mt serve`'s /info shows anyone: name, step, validation BLEU,
        engine, device, languages, and the model's and decoding's config. No path: where the
        model and its data lie is the server's business."""
        name, meta, bleu = self._described()
        config = self.config.to_dict()
        if config["decode"]["ensemble"]:  # checkpoints' paths: their names only
            config["decode"]["ensemble"] = [Path(p).name for p in config["decode"]["ensemble"]]
        return {
            "model": name,
            "step": int(meta.get("step", 0)),
            "valid_bleu": bleu,
            "engine": self.engine,
            "device": str(self.device),
            "source": self.config.data.src_lang,
            "target": self.config.data.tgt_lang,
            "config": {"model": config["model"], "decode": config["decode"]},
        }


class TorchTranslator(Translator):
    """A checkpoint decoded by mt.decoding.translate; `model` is the Transformer."""

    engine = "torch"

    def __init__(self, loaded: ckpt.Loaded, config: Config, device: Any) -> None:
        super().__init__(config, device, loaded.path, (loaded.src_tokenizer, loaded.tgt_tokenizer))
        self.loaded, self.model, self.metadata = loaded, loaded.model, loaded.metadata

    def _with(self, config):
        return TorchTranslator(self.loaded, config, self.device)

    def _translate_nbest(self, texts, decode, progress, prefixes, constraints):
        from .translate import translate_nbest

        tokenizers = (self.src_tokenizer, self.tgt_tokenizer)
        return translate_nbest(
            self.model,
            *tokenizers,
            texts,
            decode,
            self.device,
            progress,
            prefixes,
            constraints,
            self.trained.connectives,
        )

    def forces(self, decode):
        return not decode.sampling and decode.rules == "mt"  # constrained beam search's

    def score(self, pairs, decode=None):
        from .scoring import score_pairs

        tokenizers = (self.src_tokenizer, self.tgt_tokenizer)
        decode = decode or self.config.decode
        return score_pairs(self.model, *tokenizers, pairs, decode, self.device)

    @property
    def run_dir(self) -> Path:
        return ckpt.run_dir_of(self.path, self.config)

    def _described(self):
        return self.run_dir.name, self.metadata, ct2.known_bleu(self.metadata)


class CT2Translator(Translator):
    """A folder from `mt export` decoded by CTranslate2 (mt.decoding.ct2)."""

    engine = "ctranslate2"

    def __init__(self, exported: ct2.Exported, config: Config, device: Any) -> None:
        tokenizers = (exported.src_tokenizer, exported.tgt_tokenizer)
        super().__init__(config, device, exported.path, tokenizers)
        self.exported, self.manifest = exported, exported.manifest

    def _with(self, config):
        return CT2Translator(self.exported, config, self.device)

    def _translate_nbest(self, texts, decode, progress, prefixes, constraints):
        if any(constraints or ()):
            raise ConfigError(
                f"{self.path}: CTranslate2 has no terminology constraints; decode the "
                "checkpoint it was exported from with the torch engine"
            )
        return ct2.translate_nbest(self.exported, texts, decode, prefixes, self.trained.connectives)

    @property
    def run_dir(self) -> Path:  # the run the export was made from
        return ckpt.run_dir_of(Path(self.manifest.get("checkpoint", self.path)), self.config)

    def _described(self):
        return self.path.name, self.manifest, self.manifest.get("bleu")


def open_translator(
    path: str | Path | None = None,
    engine: str = "auto",
    device: str = "auto",
    threads: int = 0,
    decode: Sequence[str] = (),
    config: str | Path | None = None,
    ensemble: Sequence[str | Path] = (),
) -> Translator:
    """The translator of `path` (a run folder, a checkpoint folder or file, or a folder from
    mt export; None: the newest run under ./runs) with `engine` (auto: ctranslate2 for an
    exported folder, else torch) on `device`. The decode section is the model's own, then
    `config`'s, then `decode` ("decode.key=value" overrides, as --set takes them): one rule
    checks them all before the model is loaded. `threads`: CPU threads of ctranslate2 (0:
    its default). `ensemble` (and decode.ensemble): more checkpoints decoded with `path`'s
    model as one (mt.decoding.ensemble)."""
    from ..device import pick_device

    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine}: unknown (known: {', '.join(ENGINES)})")
    path = Path(path) if path is not None else ckpt.newest_run()
    exported = ct2.is_exported(path)
    if engine == "auto":
        engine = "ctranslate2" if exported else "torch"
    if (engine == "ctranslate2") != exported:
        raise ConfigError(
            f"{path}: --engine {engine} needs "
            + ("a checkpoint, not an exported folder" if exported else "a folder from mt export")
        )
    trained = ct2.read_config(path) if exported else ckpt.read_config(path)  # cheap
    cfg = oriented(decoding_config(trained, config, list(decode), device))
    dev = pick_device(cfg.run.device)
    members = [*ensemble, *(cfg.decode.ensemble or [])]
    if exported:
        if members:
            raise ConfigError(
                f"{path}: CTranslate2 has no ensembles; decode the checkpoints it was "
                "exported from with the torch engine"
            )
        translator: Translator = CT2Translator(ct2.load(path, str(dev), threads), cfg, dev)
    else:
        translator = TorchTranslator(load_ensemble([path, *members], dev), cfg, dev)
    lead_ids(translator.src_tokenizer, cfg.decode.target_language)  # refused up front
    return translator


def decode_options(**options: Any) -> list[str]:
    """A command's own decoding options (--beam 5 ...) as overrides; None: not given."""
    return [f"decode.{key}={value}" for key, value in options.items() if value is not None]
