"""CompCSE subsampling (Table 2): expand the training set with spans of each sentence.

A sentence's clause-level units ``C = [e1, ..., ec]`` come from :mod:`.spans`. Every original
sentence is kept; a strategy (``none``, ``adjacent``, ``overlapping``, ``subsuming``; see
:func:`subsamples`) adds extra samples, each an independent training example whose positive the
method builds from its own text. A sample is an exact character span of the sentence.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from cselab.errors import ConfigError, DataError
from cselab.data.spans import load_spans
from cselab.io import open_atomic

log = logging.getLogger(__name__)

STRATEGIES = ("none", "adjacent", "overlapping", "subsuming")


def _check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ConfigError(f"training.subsampling: unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")


def _groups(c: int, strategy: str) -> list[tuple[int, int]]:
    """Unit index ranges ``[i, j)`` a strategy takes from ``c`` units, in order."""
    if strategy == "adjacent":
        return [(i, i + 2) for i in range(0, c - 1, 2)]
    if strategy == "overlapping":
        return [(i, i + 2) for i in range(c - 1)]
    if strategy == "subsuming":
        out, queue = [], [(0, c)] if c else []
        while queue:
            i, j = queue.pop(0)
            out.append((i, j))
            if j - i > 1:
                mid = i + (j - i) // 2
                queue += [(i, mid), (mid, j)]
        return out
    return []


def subsamples(text: str, units: Sequence[Sequence[int]], strategy: str, min_words: int = 1) -> list[str]:
    """The extra samples ``strategy`` takes from ``text`` (not the sentence itself).

    Args:
        text: the sentence.
        units: ``[start, end)`` character offsets of its units, in order (from :mod:`cselab.data.spans`).
        strategy: one of :data:`STRATEGIES`.
        min_words: drop samples with fewer whitespace-separated words.

    Returns:
        The samples in strategy order, deduplicated, none equal to the stripped sentence.

    Strategies (``training.subsampling``), shown for ``c = 5``:

    ``none``
        Nothing added.
    ``adjacent``
        Neighbouring pairs that do not overlap: ``e1e2, e3e4``. With an odd ``c`` the last unit
        is left unpaired and adds nothing.
    ``overlapping``
        Neighbouring pairs with stride 1, consecutive samples sharing a unit:
        ``e1e2, e2e3, e3e4, e4e5`` (the paper's "overlapping and adjacent spans").
    ``subsuming``
        Every node of the recursive halving of ``C`` in breadth-first order: ``C``, its left half,
        its right half, their halves, ... down to single units. The left half is ``C[:c // 2]``
        (the smaller one when ``c`` is odd), the right half ``C[c // 2:]``. For ``c = 5``:
        ``C, e1e2, e3e4e5, e1, e2, e3, e4e5, e4, e5`` (``C`` itself is then dropped, see below).

    Dropped: samples equal to the (whitespace-stripped) sentence, repeats of an earlier sample of
    the same sentence, empty ones, and ones with fewer than ``min_words`` whitespace-separated
    words. Hence a 1-unit sentence adds nothing under any strategy, and a 2-unit sentence adds
    nothing under ``adjacent``/``overlapping`` (the only pair is the sentence) but ``e1, e2``
    under ``subsuming``.
    """
    _check_strategy(strategy)
    seen = {text.strip()}
    out = []
    for i, j in _groups(len(units), strategy):
        sample = text[units[i][0]:units[j - 1][1]].strip()
        if sample and sample not in seen and len(sample.split()) >= min_words:
            seen.add(sample)
            out.append(sample)
    return out


def expand_corpus(spans_jsonl: Path, strategy: str, out_txt: Path, min_words: int = 1) -> dict:
    """Write the training set: each sentence of ``spans_jsonl`` (in order) followed by its
    subsamples, one per line (the training loop shuffles). Returns statistics:
    ``n_original``, ``n_added``, ``n_total``, ``added_per_sentence_mean``, ``strategy``, ``min_words``.
    """
    _check_strategy(strategy)
    if not isinstance(min_words, int) or isinstance(min_words, bool) or min_words < 1:
        raise ConfigError(f"spans.min_words: must be a positive integer, got {min_words!r}")
    records = load_spans(Path(spans_jsonl))
    n_added = n_original = 0
    with open_atomic(out_txt) as f:
        for rec in records:
            text = rec["text"]
            if "\n" in text or "\r" in text or not text.strip():
                raise DataError(f"spans file {spans_jsonl}: sentence {rec['i']} is blank or contains a line "
                                f"break; re-run the segmentation step on a one-sentence-per-line corpus")
            f.write(text + "\n")
            n_original += 1
            for sample in subsamples(text, rec["units"], strategy, min_words):
                f.write(sample + "\n")  # a substring of a line-break-free sentence
                n_added += 1
    stats = {"n_original": n_original, "n_added": n_added, "n_total": n_original + n_added,
             "added_per_sentence_mean": n_added / n_original, "strategy": strategy, "min_words": min_words}
    log.info("subsampling %r: %d sentences + %d samples -> %s", strategy, n_original, n_added, out_txt)
    return stats
