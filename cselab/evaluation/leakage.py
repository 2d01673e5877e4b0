"""Leakage audit: how much of each evaluation set a training corpus already contains.

Unsupervised sentence-embedding methods train on raw sentences (wiki1m); if an evaluation
sentence, or a long stretch of one, is in the training file, a score partly measures
memorisation. For each evaluation set (the STS tasks' sentences, STS-B dev, the transfer tasks,
BEIR queries) this counts the share of its distinct sentences found in a corpus

- exactly: the whole sentence is a corpus line, after normalisation (lower case, words only:
  ``\\w+`` runs joined by one space);
- by n-gram overlap: the sentence shares at least one word n-gram (8 by default) with a corpus
  line; a sentence of fewer than n words has none, so only the exact test can find it (a short
  sentence's words occur in any large corpus; that is not leakage).

The evaluation sentences are indexed (at most a few hundred thousand); the corpus is streamed
once, line by line, so a corpus of any size needs only the index in memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

_WORD = re.compile(r"\w+")


def words(sentence: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(sentence.lower()))


def grams(tokens: tuple[str, ...], n: int) -> Iterable[tuple[str, ...]]:
    """The word n-grams of ``tokens`` (none for fewer than n words)."""
    return (tokens[i:i + n] for i in range(len(tokens) - n + 1))


@dataclass
class SetLeakage:
    """One evaluation set against one corpus."""

    name: str
    sentences: int     # distinct normalised sentences
    exact: int         # found as a whole corpus line
    ngram: int         # sharing at least one n-gram with a corpus line (includes exact ones)

    def row(self) -> dict:
        share = (lambda k: round(100 * k / self.sentences, 3) if self.sentences else 0.0)  # noqa: E731
        return {"set": self.name, "sentences": self.sentences, "exact": self.exact, "exact_pct": share(self.exact),
                "ngram": self.ngram, "ngram_pct": share(self.ngram)}


class Index:
    """The evaluation sentences of every set, by normalised sentence and by n-gram."""

    def __init__(self, sets: dict[str, list[str]], n: int = 8):
        self.n, self.names = n, list(sets)
        self.sentences: list[tuple[str, ...]] = []
        self.members: list[list[int]] = []  # per distinct sentence: the sets holding it
        self.index_of: dict[tuple[str, ...], int] = {}  # a normalised sentence's place in ``sentences``
        for k, name in enumerate(self.names):
            for sentence in sets[name]:
                tokens = words(sentence)
                if not tokens:
                    continue
                i = self.index_of.setdefault(tokens, len(self.sentences))
                if i == len(self.sentences):
                    self.sentences.append(tokens)
                    self.members.append([])
                if k not in self.members[i]:
                    self.members[i].append(k)
        self.by_gram: dict[tuple[str, ...], list[int]] = {}
        for i, tokens in enumerate(self.sentences):
            for g in set(grams(tokens, n)):
                self.by_gram.setdefault(g, []).append(i)

    def scan(self, lines: Iterable[str]) -> tuple[set[int], set[int]]:
        """The distinct evaluation sentences found exactly, and by n-gram, in ``lines``."""
        exact, overlap = set(), set()
        for line in lines:
            tokens = words(line)
            if tokens in self.index_of:
                exact.add(self.index_of[tokens])
            for g in grams(tokens, self.n):
                hits = self.by_gram.get(g)
                if hits:
                    overlap.update(hits)
        return exact, overlap | exact

    def leakage(self, lines: Iterable[str]) -> list[SetLeakage]:
        exact, overlap = self.scan(lines)
        out = []
        for k, name in enumerate(self.names):
            ids = [i for i, m in enumerate(self.members) if k in m]
            out.append(SetLeakage(name, len(ids), sum(i in exact for i in ids), sum(i in overlap for i in ids)))
        return out


def read_lines(path: Path) -> Iterable[str]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        yield from fh


def audit(corpora: dict[str, Path], sets: dict[str, list[str]], n: int = 8) -> list[dict]:
    """One row per (corpus, evaluation set): distinct sentences, found exactly, found by n-gram,
    and their shares in percent."""
    index = Index(sets, n)
    return [{"corpus": label, **s.row()} for label, path in corpora.items() for s in index.leakage(read_lines(path))]


def evaluation_sets(senteval_root: Path, beir_roots: dict[str, Path] | None = None) -> dict[str, list[str]]:
    """The sentences a score is computed on: each STS task (both sides), STS-B dev, each transfer
    task (every sentence its data holds) and each BEIR dataset's queries."""
    import json

    from cselab.data.senteval import STS_TASKS, TRANSFER_TASKS
    from cselab.data.tasks import load_sts_task, load_transfer_task, stsb_dev, task_sentences

    sets = {}
    for task in STS_TASKS:
        sets[task] = [s for sub in load_sts_task(senteval_root, task) for s in (*sub.sent1, *sub.sent2)]
    dev = stsb_dev(senteval_root)
    sets["STS-B dev"] = [*dev.sent1, *dev.sent2]
    for task in TRANSFER_TASKS:
        sets[task] = task_sentences(load_transfer_task(senteval_root, task))
    for name, root in (beir_roots or {}).items():
        for queries in sorted(Path(root).rglob("queries.jsonl")):
            with open(queries, encoding="utf-8") as fh:
                sets.setdefault(f"BEIR {name} queries", []).extend(json.loads(line)["text"] for line in fh if line.strip())
    return sets
