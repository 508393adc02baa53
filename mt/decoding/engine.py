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
from ..data import tokenizer as tok
from ..data.directions import oriented, turned
from ..errors import ConfigError
from . import ct2
from .constraints import Constraints, encode_constraints
from .coverage import Coverage, Translations
from .ensemble import load_ensemble
from .pieces import lead_ids, piece_limit, source_pieces
from .placeholders import carried_over, protect
from .trained import METADATA, Trained, carried_pieces
from .translate import output_limits, piece_prefixes

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
        log-probability, NaN for greedy search), whether it is short, and its spans placed.
        `decode`: this translator's own decode section unless given; `prefixes`: the target
        text each translation must start with ("": none), one per text; `constraints`: the
        target terms each must contain, a list per text.

        The one way every caller decodes, whatever the engine: a model with placeholders
        has each source's spans carried over (mt.decoding.placeholders); a source longer
        than the model carries is cut into pieces (mt.decoding.pieces), which the engine
        decodes as token ids; a translation the coverage guard finds short is translated
        again in smaller pieces (mt.decoding.coverage). Each source and translation is
        measured once, here, and what was done to one is said."""
        decode = self.decoding(decode)
        protected = protect(texts, self.config.tokenizer.placeholders)
        sources = [p.text for p in protected]

        def some(chosen: Sequence[int], decode: DecodeConfig, forced=None) -> list:
            """The n-best of the sources `chosen`, with their own prefixes and constraints,
            and the `forced` terms (one list each) besides."""
            steer = [None if x is None else [x[i] for i in chosen] for x in (prefixes, constraints)]
            if forced is not None:
                steer[1] = [[*f, *(steer[1][k] if steer[1] else [])] for k, f in enumerate(forced)]
            text = [sources[i] for i in chosen]
            return self._pieces_nbest(text, decode, progress and len(chosen) == len(texts), *steer)

        found, short, tokens = self.coverage.guarded(some, sources, decode)
        nbest, placed = carried_over(
            protected, found, some if self.forces(decode) else None, decode
        )
        return Translations(nbest, short, placed, tokens)

    def _pieces_nbest(
        self,
        texts: Sequence[str],
        decode: DecodeConfig,
        progress: bool,
        prefixes: Sequence[str] | None,
        constraints: Sequence[Sequence[str]] | None,
    ) -> list[list[tuple[str, float]]]:
        """Each text's n-best: cut into pieces that fit (`decode.piece_tokens`), the pieces
        decoded by the engine (`_decode`), their translations joined."""
        model = self.config.model
        pieces = source_pieces(
            self.src_tokenizer, texts, piece_limit(model, decode), decode.target_language
        )
        limits = output_limits(model, pieces.ids, decode)
        forced = piece_prefixes(self.tgt_tokenizer, pieces, prefixes, limits)
        terms = None
        if constraints is not None:
            if decode.sampling:
                raise ConfigError("constraints need beam search: decode.sampling samples")
            if decode.rules == "transformers":  # generate() has no constraints to follow
                raise ConfigError(
                    "constraints follow mt's beam search: not decode.rules transformers"
                )
            if len(constraints) != len(texts):
                raise ConfigError(f"{len(constraints)} lists of terms for {len(texts)} texts")
            first = pieces.first(constraints, [])
            terms = encode_constraints(self.tgt_tokenizer, first, limits, pieces.numbers)
        found = self._decode(pieces.ids, decode, progress, forced, terms, limits)
        flat = tok.detokenize(self.tgt_tokenizer, [ids for hyps in found for ids, _ in hyps])
        flat = [text.strip() for text in flat]  # a model may open or end one with a space
        out, start = [], 0
        for hyps in found:
            out.append(list(zip(flat[start : start + len(hyps)], (s for _, s in hyps))))
            start += len(hyps)
        return pieces.joined(out)

    @abstractmethod
    def _decode(
        self,
        ids: Sequence[Sequence[int]],
        decode: DecodeConfig,
        progress: bool,
        prefixes: Sequence[Sequence[int]] | None,
        constraints: Sequence[Constraints | None] | None,
        limits: Sequence[int],
    ) -> list[list[tuple[list[int], float]]]:
        """The engine's decoding of sources of token ids (each fits the model): up to
        `decode.nbest` (token ids, score) pairs each, best first, each starting with its
        `prefixes` and holding its `constraints` where given, at most its `limits` long."""

    def forces(self, decode: DecodeConfig) -> bool:
        """Whether this engine can force target terms (constraints) with `decode`."""
        return False

    @cached_property
    def trained(self) -> Trained:
        """The length the model carries and its length ratio, as its metadata says
        (mt.decoding.trained)."""
        return Trained.of(self._metadata().get(METADATA), self.config)

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
        return self._with(config)

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
    def _metadata(self) -> dict[str, Any]:
        """What the model's files say of it besides its config (the step, the measurements
        of mt.decoding.trained): the weights' metadata, or the export's manifest."""

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

    def _decode(self, ids, decode, progress, prefixes, constraints, limits):
        from .translate import translate_ids

        found = translate_ids(self.model, ids, decode, self.device, progress, prefixes, constraints)
        return [[(h.tokens, h.score) for h in hyps] or [([], float("nan"))] for hyps in found]

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

    def _metadata(self):
        return self.metadata

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

    def _decode(self, ids, decode, progress, prefixes, constraints, limits):
        if any(constraints or ()):
            raise ConfigError(
                f"{self.path}: CTranslate2 has no terminology constraints; decode the "
                "checkpoint it was exported from with the torch engine"
            )
        return ct2.decode_ids(self.exported, ids, decode, prefixes, limits)

    @property
    def run_dir(self) -> Path:  # the run the export was made from
        return ckpt.run_dir_of(Path(self.manifest.get("checkpoint", self.path)), self.config)

    def _metadata(self):
        return self.manifest

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
