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

from ..config import DecodeConfig, ModelConfig
from ..data import tokenizer as tok
from ..errors import ConfigError
from ..model import Transformer
from .beam import beam_search, best_extensions
from .search import NEG_INF, Hypothesis, Plan, length_penalty, max_output_lengths, search


@dataclass(frozen=True)
class TermProgress:
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

    def advance(self, progress: TermProgress, token: int) -> TermProgress:
        """The progress after `token`: a term under way goes on or is dropped; a token that
        starts (or is) a term not met yet starts (or meets) it."""
        if progress.phrase is not None:
            index, matched = progress.phrase
            term, phrase = self.phrases[index]
            if phrase[matched] == token:
                if matched + 1 == len(phrase):
                    return TermProgress(progress.met | {term}, None, progress.tokens + len(phrase))
                return TermProgress(progress.met, (index, matched + 1), progress.tokens)
        for index, (term, phrase) in enumerate(self.phrases):
            if term not in progress.met and phrase[0] == token:
                if len(phrase) == 1:
                    return TermProgress(progress.met | {term}, None, progress.tokens + 1)
                return TermProgress(progress.met, (index, 1), progress.tokens)
        return TermProgress(progress.met, None, progress.tokens)

    def next_tokens(self, progress: TermProgress, previous: int | None) -> set[int]:
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

    def bank(self, progress: TermProgress) -> int:
        return progress.tokens + (progress.phrase[1] if progress.phrase else 0)

    def done(self, progress: TermProgress) -> bool:
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
            glued, spaced = word.strip(), " " + word.strip()
            phrases = [
                p
                for p in tok.encode_going_on(tokenizer, [glued]) + tok.encode(tokenizer, [spaced])
                if p
            ]
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
    progress: TermProgress = field(default_factory=TermProgress)


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


class ConstrainedBeam:
    """Beam search with dynamic beam allocation (the module's docstring) as a strategy of the
    one search loop; the host keeps each sentence's hypotheses, so the host looks at every
    step (`Plan()`)."""

    log_probs = True

    def __init__(self, cfg: DecodeConfig, constraints: Sequence[Constraints | None]) -> None:
        self.cfg, self.rows = cfg, cfg.beam
        self.constraints = [c or Constraints([]) for c in constraints]

    def start(self, src: Tensor, limit: Tensor, steps: int, model: ModelConfig) -> None:
        beam, n = self.rows, src.size(0)
        self.limit, self.eos = limit, model.eos_id
        self.live = [[_Live([], 0.0), *[None] * (beam - 1)] for _ in range(n)]
        self.finished: list[list[Hypothesis]] = [[] for _ in range(n)]
        self.done = torch.zeros(n, dtype=torch.bool, device=src.device)

    def step(self, t: int, logprobs: Tensor, sent: Tensor, history: Tensor) -> tuple[Tensor, ...]:
        beam, eos, device = self.rows, self.eos, logprobs.device
        sents, constraints, live = sent.tolist(), self.constraints, self.live
        hyps = [h for s in sents for h in live[s]]
        unmet = [h is None or not constraints[s].done(h.progress) for s in sents for h in live[s]]
        logprobs[:, eos].masked_fill_(torch.tensor(unmet, device=device), NEG_INF)
        alive = torch.tensor([NEG_INF if h is None else h.logprob for h in hyps], device=device)
        top = best_extensions(logprobs, alive.view(len(sents), beam), 2 * beam)
        best_value, best_word = (x.tolist() for x in logprobs.max(-1))
        advancing = [
            (row, word)
            for row, h in enumerate(hyps)
            if h is not None
            for word in constraints[sents[row // beam]].next_tokens(
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
        done, origins, next_words = [], [], []
        for i, s in enumerate(sents):
            candidates = []
            for (b, word), score in extensions[i].items():
                h = live[s][b]
                if score == NEG_INF or h is None:
                    continue
                if word == eos:
                    penalty = length_penalty(len(h.tokens) + 1, self.cfg.alpha)
                    self.finished[s].append(Hypothesis(h.tokens, score / penalty, score))
                else:
                    candidates.append((score, b, word, constraints[s].advance(h.progress, word)))
            finished = sorted(self.finished[s], key=lambda h: -h.score)[: self.cfg.nbest]
            self.finished[s] = finished
            chosen = _allocate(candidates, beam, lambda c, s=s: constraints[s].bank(c[3]))
            live[s] = [_Live([*live[s][b].tokens, w], sc, p) for sc, b, w, p in chosen]
            live[s] += [None] * (beam - len(chosen))
            bound = max((h.logprob for h in live[s] if h), default=NEG_INF)
            bound /= length_penalty(int(self.limit[s]) + 1, self.cfg.alpha)
            full = len(finished) == self.cfg.nbest
            done.append(not chosen or (full and finished[-1].score >= bound))
            origins += [i * beam + b for _, b, _, _ in chosen]
            origins += [i * beam] * (beam - len(chosen))  # dead rows: any row will do
            next_words += [w for _, _, w, _ in chosen] + [eos] * (beam - len(chosen))
        self.done = torch.tensor(done, device=device)
        as_rows = (torch.tensor(x, device=device).view(-1, beam) for x in (next_words, origins))
        return tuple(as_rows)

    def keep(self, live: Tensor) -> None:
        pass  # its hypotheses are kept by sentence, not by row

    def finish(self) -> list[list[Hypothesis]]:
        return self.finished


def constrained_beam_search(
    model: Transformer,
    src: Tensor,
    cfg: DecodeConfig,
    constraints: Sequence[Constraints | None],
    prefix: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Beam search as `beam_search` (beam, alpha, nbest, lengths, prefix, no_repeat_ngram)
    whose outputs contain every sentence's constraints (None: none), under mt's rules (not
    decode.rules transformers, refused by translate_nbest). A sentence whose
    constraints no hypothesis met within its length limit gets the unconstrained search's
    output instead."""
    lengths = max_output_lengths(src, cfg.max_len_a, cfg.max_len_b, model.cfg.pad_id)
    strategy = ConstrainedBeam(cfg, constraints)
    finished = search(model, src, strategy, lengths, Plan(), prefix, cfg)
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
    from ..data.text_input import read_lines

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
    from ..data.text_input import read_lines

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
