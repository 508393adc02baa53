"""One model for both directions (data.both_directions), as OPUS-MT's multilingual models:
trained on every pair both ways, each source led by the token of the language it is
translated into (>>es<< or >>en<<, Marian's convention, so that decode.target_language puts
it before a source for both kinds of model alike).

Such a model translates into decode.target_language, data.tgt_lang unless set; `oriented`
turns its config to that direction once, where it is opened, so that whatever reads
data.src_lang and data.tgt_lang after (the pairs `mt evaluate` reads, the server's pairs)
sees the direction decoded.
"""

from __future__ import annotations

import copy

from ..config import Config, DataConfig
from ..errors import ConfigError


def lead_token(language: str) -> str:
    """The token that leads a source to be translated into `language`."""
    return f">>{language}<<"


def lead_tokens(data: DataConfig) -> list[str]:
    """The tokens prepare reserves in the vocabulary: into the target, then into the source,
    for a model of both directions; none for a model of one."""
    return [lead_token(data.tgt_lang), lead_token(data.src_lang)] if data.both_directions else []


def oriented(config: Config) -> Config:
    """`config` to decode with: for a model of both directions, its languages in the order
    decode.target_language asks (set, data.tgt_lang by default); other configs as they are."""
    data, target = config.data, config.decode.target_language or config.data.tgt_lang
    if not data.both_directions:
        return config
    if target not in (data.src_lang, data.tgt_lang):
        raise ConfigError(
            f"decode.target_language: {target}: this model translates into "
            f"{data.tgt_lang} or {data.src_lang}"
        )
    out = copy.deepcopy(config)
    if target == data.src_lang:
        out.data.src_lang, out.data.tgt_lang = data.tgt_lang, data.src_lang
    out.decode.target_language = target
    return out


def turned(config: Config) -> Config | None:
    """A model of both directions decoding the other way than `config` (oriented): its
    config; None for a model of one direction."""
    if not config.data.both_directions:
        return None
    other = copy.deepcopy(config)
    other.decode.target_language = config.data.src_lang
    return oriented(other)
