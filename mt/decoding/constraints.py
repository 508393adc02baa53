"""Terminology constraints: target terms every translation must contain, by lexically
constrained beam search with dynamic beam allocation (Post and Vilar, 2018, "Fast Lexically
Constrained Decoding with Dynamic Beam Allocation for Neural Machine Translation"), the
algorithm of Sockeye and, vectorised (Hu et al., 2019), of fairseq.

Each step, a sentence's candidates are the beam's usual best extensions, each live
hypothesis's best next token, and every hypothesis extended by each token that advances a
constraint (the next token of a term it has begun, or the first of any term it has not met).
They are grouped into banks by progress (the constraint tokens met, those of a term under way
included) and the beam is filled from the banks in turn, the most advanced first, each bank's
best first, so hypotheses that met more constraints keep a share of the beam against likelier
ones that met fewer. EOS is allowed only once every term is met. A term is begun as written
at the start of the output or after a token that does not end a word, and after a space (as
a byte-level tokenizer writes a word inside a sentence) after one that does. The decoder
steps stay batched; the bookkeeping is per sentence on the host, as fairseq's
ConstraintState is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from tokenizers import Tokenizer
from torch import Tensor

from ..config import DecodeConfig
from ..data import tokenizer as tok
from ..errors import ConfigError
from ..model import Transformer
from .search import (
    NEG_INF,
    Hypothesis,
    Plan,
    _forbid,
    _force,
    _forced_at,
    _limits,
    _start,
    beam_search,
    best_extensions,
    length_penalty,
    max_output_lengths,
)


@dataclass(frozen=True)
class Progress:
    """How far a hypothesis is through its sentence's constraints."""

    met: frozenset[int] = frozenset()  # the terms met
    phrase: tuple[int, int] | None = None  # (phrase, its tokens matched so far) under way
    tokens: int = 0  # the tokens of the terms met


class Constraints:
    """One sentence's terms, each a list of alternative token sequences (phrases). A phrase
    whose first token is in `space_initial` is not begun at the start of the output, and one
    whose first token is not is not begun after a token in `word_final` (glued to a word)."""

    def __init__(
        self,
        terms: Sequence[Sequence[Sequence[int]]],
        word_final: frozenset[int] = frozenset(),
        space_initial: frozenset[int] = frozenset(),
    ) -> None:
        self.terms = len(terms)
        self.phrases = [(term, list(p)) for term, phrases in enumerate(terms) for p in phrases]
        self.word_final, self.space_initial = word_final, space_initial

    def advance(self, progress: Progress, token: int) -> Progress:
        """The progress after `token`: a term under way goes on or is dropped; a token that
        starts (or is) a term not met yet starts (or meets) it."""
        if progress.phrase is not None:
            index, matched = progress.phrase
            term, phrase = self.phrases[index]
            if phrase[matched] == token:
                if matched + 1 == len(phrase):
                    return Progress(progress.met | {term}, None, progress.tokens + len(phrase))
                return Progress(progress.met, (index, matched + 1), progress.tokens)
        for index, (term, phrase) in enumerate(self.phrases):
            if term not in progress.met and phrase[0] == token:
                if len(phrase) == 1:
                    return Progress(progress.met | {term}, None, progress.tokens + 1)
                return Progress(progress.met, (index, 1), progress.tokens)
        return Progress(progress.met, None, progress.tokens)

    def next_tokens(self, progress: Progress, previous: int | None) -> set[int]:
        """The tokens that advance a hypothesis whose last token is `previous` (None: empty)."""
        if progress.phrase is not None:
            index, matched = progress.phrase
            return {self.phrases[index][1][matched]}
        return {
            p[0]
            for term, p in self.phrases
            if term not in progress.met
            and (
                previous is not None
                if p[0] in self.space_initial
                else previous not in self.word_final
            )
        }

    def bank(self, progress: Progress) -> int:
        return progress.tokens + (progress.phrase[1] if progress.phrase else 0)

    def done(self, progress: Progress) -> bool:
        return len(progress.met) == self.terms


def encode_constraints(
    tokenizer: Tokenizer,
    terms: Sequence[Sequence[str]],
    limits: Sequence[int],
    numbers: Sequence[int] | None = None,
) -> list[Constraints | None]:
    """Each source's target terms (none: None) as Constraints, a term as written and after a
    space. Refused in one line naming the text (`numbers`: each source's, 1, 2 ... unless
    given): a term that tokenizes to nothing, and terms whose tokens cannot fit in the
    source's output limit (`limits`)."""
    found: list[Constraints | None] = []
    pieces = tokenizer.decode_batch([[i] for i in range(tokenizer.get_vocab_size())])
    word_final = frozenset(i for i, p in enumerate(pieces) if p[-1:].isalnum())
    space_initial = frozenset(
        i for i, p in enumerate(pieces) if p[:1].isspace() or tok.starts_word(tokenizer, i)
    )
    for number, words, limit in zip(numbers or range(1, len(terms) + 1), terms, limits):
        variants = []
        for word in dict.fromkeys(words):  # a term twice is one term
            phrases = [p for p in tok.encode(tokenizer, [word.strip(), " " + word.strip()]) if p]
            if not word.strip() or not phrases:
                raise ConfigError(f"text {number}: constraint {word!r} tokenizes to nothing")
            variants.append(list({tuple(p): p for p in phrases}.values()))
        need = sum(min(len(p) for p in phrases) for phrases in variants)
        if need > limit:
            raise ConfigError(
                f"text {number}: its constraints need {need} tokens, more than the {limit} "
                "its translation may have (decode.max_len_a, decode.max_len_b)"
            )
        found.append(Constraints(variants, word_final, space_initial) if variants else None)
    return found


@dataclass
class _Live:
    tokens: list[int]
    logprob: float
    progress: Progress = field(default_factory=Progress)


def _allocate(candidates: list[tuple], beam: int, bank) -> list[tuple]:
    """Dynamic beam allocation: `beam` of the candidates (score, ...), taken from the banks in
    turn, the most advanced bank first and each bank's best first."""
    banks: dict[int, list[tuple]] = {}
    for candidate in sorted(candidates, key=lambda c: -c[0]):
        banks.setdefault(bank(candidate), []).append(candidate)
    order = sorted(banks, reverse=True)
    chosen, depth = [], 0
    while len(chosen) < beam and any(depth < len(banks[b]) for b in order):
        chosen += [banks[b][depth] for b in order if depth < len(banks[b])]
        depth += 1
    return sorted(chosen[:beam], key=lambda c: -c[0])


@torch.inference_mode()
def constrained_beam_search(
    model: Transformer,
    src: Tensor,
    cfg: DecodeConfig,
    constraints: Sequence[Constraints | None],
    prefix: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Beam search as `beam_search` (beam, alpha, nbest, lengths, prefix) whose outputs contain
    every sentence's constraints (None: none); no_repeat_ngram is not applied. A sentence whose
    constraints no hypothesis met within its length limit gets the unconstrained search's
    output instead."""
    beam, nbest, alpha = cfg.beam, cfg.nbest, cfg.alpha
    n_src, device = src.size(0), src.device
    pad, bos, eos = model.cfg.pad_id, model.cfg.bos_id, model.cfg.eos_id
    limit = _limits(model, src, max_output_lengths(src, cfg.max_len_a, cfg.max_len_b, pad))
    steps = int(limit.max()) + 1
    state, decode_step = _start(model, *model.encode(src), steps, beam, Plan())
    rules = [c or Constraints([]) for c in constraints]
    live = [[_Live([], 0.0), *[None] * (beam - 1)] for _ in range(n_src)]
    finished: list[list[Hypothesis]] = [[] for _ in range(n_src)]
    sents = list(range(n_src))  # the sentences still searched, in the order of their rows
    tokens = src.new_full((n_src * beam,), bos)
    for t in range(steps):
        row_sent = torch.tensor(sents, device=device).repeat_interleave(beam)
        logprobs = decode_step(tokens).float().log_softmax(-1)  # (N * k, V)
        _forbid(logprobs, t >= limit[row_sent], model.cfg)
        if (forced := _forced_at(prefix, t, row_sent)) is not None:
            _force(logprobs, forced)
        hyps = [h for s in sents for h in live[s]]
        unmet = [h is None or not rules[s].done(h.progress) for s in sents for h in live[s]]
        logprobs[:, eos].masked_fill_(torch.tensor(unmet, device=device), NEG_INF)
        alive = torch.tensor([NEG_INF if h is None else h.logprob for h in hyps], device=device)
        top = best_extensions(logprobs, alive.view(len(sents), beam), 2 * beam)
        best_value, best_word = (x.tolist() for x in logprobs.max(-1))
        advancing = [
            (row, word)
            for row, h in enumerate(hyps)
            if h is not None
            for word in rules[sents[row // beam]].next_tokens(
                h.progress, h.tokens[-1] if h.tokens else None
            )
        ]
        rows, words = zip(*advancing) if advancing else ((), ())
        values = logprobs[list(rows), list(words)].tolist() if advancing else []
        extensions: dict[int, dict[tuple[int, int], float]] = {i: {} for i in range(len(sents))}
        for i, (scores, origins, ws) in enumerate(zip(*(x.tolist() for x in top))):
            extensions[i].update({(b, w): s for s, b, w in zip(scores, origins, ws)})
        for row, (value, word) in enumerate(zip(best_value, best_word)):
            if hyps[row] is not None:
                extensions[row // beam][(row % beam, word)] = hyps[row].logprob + value
        for (row, word), value in zip(advancing, values):
            extensions[row // beam][(row % beam, word)] = hyps[row].logprob + value
        keep, chosen_rows, next_words = [], [], []
        for i, s in enumerate(sents):
            candidates = []
            for (b, word), score in extensions[i].items():
                h = live[s][b]
                if score == NEG_INF or h is None:
                    continue
                if word == eos:
                    penalty = length_penalty(len(h.tokens) + 1, alpha)
                    finished[s].append(Hypothesis(h.tokens, score / penalty, score))
                else:
                    candidates.append((score, b, word, rules[s].advance(h.progress, word)))
            finished[s] = sorted(finished[s], key=lambda h: -h.score)[:nbest]
            chosen = _allocate(candidates, beam, lambda c, s=s: rules[s].bank(c[3]))
            live[s] = [_Live([*live[s][b].tokens, w], sc, p) for sc, b, w, p in chosen]
            live[s] += [None] * (beam - len(chosen))
            bound = max((h.logprob for h in live[s] if h), default=NEG_INF)
            bound /= length_penalty(int(limit[s]) + 1, alpha)
            if not chosen or (len(finished[s]) == nbest and finished[s][-1].score >= bound):
                continue  # done: its rows leave the cache
            keep.append(i)
            chosen_rows += [i * beam + b for _, b, _, _ in chosen]
            chosen_rows += [i * beam] * (beam - len(chosen))  # dead rows: any row will do
            next_words += [w for _, _, w, _ in chosen] + [eos] * (beam - len(chosen))
        if not keep:
            break
        index = torch.tensor(keep, device=device)
        state.select(torch.tensor(chosen_rows, device=device), index)
        sents = [sents[i] for i in keep]
        tokens = torch.tensor(next_words, device=device)
    return _with_fallback(model, src, cfg, finished, prefix)


def _with_fallback(model, src, cfg, finished: list[list[Hypothesis]], prefix) -> list:
    """The finished hypotheses, a sentence with none replaced by unconstrained beam search's."""
    missing = [i for i, hyps in enumerate(finished) if not hyps]
    if missing:
        rows = torch.tensor(missing, device=src.device)
        sub_prefix = None if prefix is None else prefix[rows]
        for i, hyps in zip(missing, beam_search(model, src[rows], cfg, Plan(), sub_prefix)):
            finished[i] = hyps
    return finished


def read_glossary(path: str) -> dict[str, str]:
    """A glossary file: a source term and its target term a line, tab-separated (blank lines
    skipped). Refused in one line: a line not of two non-empty columns, a source term given two
    target terms."""
    from ..data.corpus import read_lines

    glossary: dict[str, str] = {}
    for number, line in enumerate(read_lines(path, "--glossary"), start=1):
        if not line.strip():
            continue
        columns = [c.strip() for c in line.split("\t")]
        if len(columns) != 2 or not all(columns):
            raise ConfigError(
                f"--glossary {path}: line {number}: expected a source term and a target term "
                f"separated by a tab, got {len(columns)} column(s)"
            )
        source, target = columns
        if glossary.get(source.lower(), target) != target:
            raise ConfigError(
                f"--glossary {path}: line {number}: conflicting constraints: {source!r} is "
                f"{glossary[source.lower()]!r} earlier and {target!r} here"
            )
        glossary[source.lower()] = target
    return glossary


def glossary_terms(glossary: dict[str, str], texts: Sequence[str]) -> list[list[str]]:
    """For each text, the target terms of the glossary's source terms it contains (as whole
    words, whatever the case), in the glossary's order. Texts and terms are cut alike into
    tokens (a run of word characters, or any other character), the terms put in a trie of
    their tokens, and the trie walked from each token of a text that may start a term: the
    work is a text's tokens times the longest term's, whatever the glossary's size (a regex a
    term, searched in every text, took seconds for 20,000 terms)."""
    import re

    tokens = re.compile(r"(\w+)|\W").finditer
    trie: dict = {}
    for number, source in enumerate(glossary):
        node = trie
        for token in tokens(source.lower()):
            node = node.setdefault(token[0], {})
        node.setdefault(None, []).append(number)  # None: a term ends here
    targets = list(glossary.values())
    found = []
    for text in texts:
        words = [(token[0], token[1] is not None) for token in tokens(text.lower())]
        hits: set[int] = set()
        for start, (_, word) in enumerate(words):
            if start and words[start - 1][1] and not word:
                continue  # as (?<!\w): not right after a word
            node, at = trie, start
            while at < len(words) and (node := node.get(words[at][0])) is not None:
                at += 1
                if None in node and (at == len(words) or not words[at][1]):  # as (?!\w)
                    hits.update(node[None])
        found.append([targets[number] for number in sorted(hits)])
    return found


def read_constraints(path: str, count: int) -> list[list[str]]:
    """A constraints file: a line per text, its target terms tab-separated (a blank line:
    none), `count` lines."""
    from ..data.corpus import read_lines

    lines = read_lines(path, "--constraints")
    if len(lines) != count:
        raise ConfigError(f"--constraints {path}: {len(lines)} lines for {count} texts")
    return [line.split("\t") if line.strip() else [] for line in lines]


def terms_of(
    texts: Sequence[str], constraints: str | None, glossary: str | None
) -> list[list[str]] | None:
    """The target terms of each text from a --constraints file and a --glossary (None when
    neither is given)."""
    if constraints is None and glossary is None:
        return None
    terms = read_constraints(constraints, len(texts)) if constraints else [[] for _ in texts]
    if glossary:
        terms = [a + b for a, b in zip(terms, glossary_terms(read_glossary(glossary), texts))]
    return terms
