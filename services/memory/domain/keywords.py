"""CJK-aware keyword (sparse) vectors for the memory index.

Pure domain code: no I/O; the one dependency is the pure-Python Snowball stemmer.

A text is turned into *terms*:

* it is NFKC-normalised (full-width Latin and half-width katakana fold to their
  canonical forms) and case-folded;
* runs of CJK characters (Han, Hiragana, Katakana, Hangul) yield every
  character as a unigram *and* every overlapping pair as a bigram, so a query
  for ``绿茶`` shares the terms ``绿``, ``茶`` and ``绿茶`` with a memory
  ``我最喜欢喝绿茶`` although neither text has spaces;
* other letters and digits form words (split on anything that is not
  alphanumeric, including ``_``). One-character words are dropped unless they
  are digits, a small English stop-word list is dropped, and ASCII words are
  reduced to their English (Snowball) stem, which conflates inflections and
  common derivations (``cats``/``cat``, ``hiking``/``hiked``/``hike``,
  ``adoption``/``adopt``). Words containing a digit, and words in other
  alphabets, are kept verbatim.

Terms are mapped to sparse-vector indices with a stable hash (BLAKE2b, 31
bits), identical across processes, machines and Python versions, so vectors
written today still match queries made after a restart.

Weights: documents carry the BM25 term-frequency component (saturation and
length normalisation, see :func:`document_vector`); queries carry 1.0 per
distinct term. The vector index applies the IDF factor (Qdrant's ``idf``
modifier), so the dot product of the two is a BM25 score.

:func:`expand_query` adds pseudo-relevance feedback: the terms that
characterise the best first-round hits join the query with a lower weight.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
import threading
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import snowballstemmer

__all__ = [
    "SparseVector",
    "document_vector",
    "expand_query",
    "keyword_terms",
    "query_vector",
    "term_index",
]


@dataclass(frozen=True)
class SparseVector:
    """A sparse vector: strictly increasing ``indices`` and matching ``values``."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError("indices and values must have the same length")

    @property
    def is_empty(self) -> bool:
        """True when the vector has no non-zero dimension."""
        return not self.indices


# --- tokenisation -----------------------------------------------------------

# Han (CJK unified ideographs, extension A, compatibility ideographs, the
# supplementary-plane extensions B..H), ideographic iteration/closing marks,
# Hiragana, Katakana (+ phonetic extensions), Hangul syllables and jamo.
_CJK_CHARS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005-\u3007"  # iteration mark, closing mark, ideographic zero
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana (incl. ー)
    "\u3130-\u318f"  # Hangul compatibility jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended-A
    "\uac00-\ud7af"  # Hangul syllables
    "\ud7b0-\ud7ff"  # Hangul Jamo extended-B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003ffff"  # CJK extensions B..H, compatibility supplement
)
# a word: letters and digits, no underscore, no CJK character (a negated class holding \W)
_TOKEN_RE = re.compile(rf"(?P<cjk>[{_CJK_CHARS}]+)|(?P<word>[^\W_{_CJK_CHARS}]+)")

_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be been before
    being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself
    his how i if in into is it its itself just me more most my myself no nor not
    of off on once only or other our ours ourselves out over own same she should
    so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_STOPWORDS = STOPWORDS

_STEM_LOCK = threading.Lock()
_ENGLISH = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """English stem of an ASCII-alphabetic word (Snowball's English stemmer, "Porter2"); any
    other word is returned as it is.

    The goal is that inflections and derivations of a word map to one term (``cats``/``cat``,
    ``hiking``/``hiked``/``hike``, ``adoption``/``adopt``), not that the result is a word
    (``stories`` -> ``stori``). The pure-Python stemmer takes ~60 µs a word, hence the cache;
    its instance keeps state while stemming, hence the lock.
    """
    if not word.isascii() or not word.isalpha():
        return word
    with _STEM_LOCK:
        stem: str = _ENGLISH.stemWord(word)
    return stem


def keyword_terms(text: str) -> list[str]:
    """The keyword terms of ``text``, in order of appearance, with repeats.

    CJK runs contribute, in order, each character followed by the bigram it
    starts (``绿茶`` -> ``绿``, ``绿茶``, ``茶``). Empty or whitespace-only text
    gives an empty list.
    """
    normalised = unicodedata.normalize("NFKC", text).casefold()
    terms: list[str] = []
    for match in _TOKEN_RE.finditer(normalised):
        cjk = match.group("cjk")
        if cjk is not None:
            for i, ch in enumerate(cjk):
                terms.append(ch)
                if i + 1 < len(cjk):
                    terms.append(cjk[i : i + 2])
            continue
        word = match.group("word")
        if len(word) == 1 and not word.isdigit():
            continue
        if word in _STOPWORDS:
            continue
        # an all-letter word is stemmed; one with a digit anywhere is kept as it is
        if word.isalpha() or not any(ch.isdigit() for ch in word):
            terms.append(_stem(word))
        else:
            terms.append(word)
    return terms


# --- hashing and weighting --------------------------------------------------

_INDEX_MASK = 0x7FFF_FFFF

#: BM25 parameters for the document-side term weights.
BM25_K1 = 1.2
BM25_B = 0.75
#: Assumed average memory length, in terms (memories are a sentence or two).
BM25_AVG_TERMS = 32.0


def term_index(term: str) -> int:
    """Stable, non-negative 31-bit index of ``term`` (BLAKE2b of its UTF-8 bytes).

    Never Python's ``hash()``, which is salted per process.
    """
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") & _INDEX_MASK


def _counts_by_index(terms: list[str]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for term, tf in Counter(terms).items():
        idx = term_index(term)
        counts[idx] = counts.get(idx, 0) + tf  # hash collisions merge
    return counts


def document_vector(text: str) -> SparseVector:
    """Sparse vector to store for a memory's ``text``.

    Each term carries the BM25 term-frequency component
    ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` with ``k1=1.2``,
    ``b=0.75``, ``dl`` the number of terms in the text and ``avgdl`` the fixed
    :data:`BM25_AVG_TERMS`. Repeating a term helps with diminishing returns, and
    a term counts for more in a short memory than in a long one. The index's IDF
    modifier supplies the remaining BM25 factor at query time. All values are
    strictly positive.
    """
    terms = keyword_terms(text)
    if not terms:
        return SparseVector((), ())
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len(terms) / BM25_AVG_TERMS)
    counts = _counts_by_index(terms)
    indices = tuple(sorted(counts))
    values = tuple(counts[i] * (BM25_K1 + 1.0) / (counts[i] + norm) for i in indices)
    return SparseVector(indices, values)


def add_sparse(a: SparseVector, b: SparseVector, weight: float = 1.0) -> SparseVector:
    """``a + weight * b``, as a sparse vector."""
    merged = dict(zip(a.indices, a.values, strict=True))
    for i, v in zip(b.indices, b.values, strict=True):
        merged[i] = merged.get(i, 0.0) + weight * v
    indices = tuple(sorted(merged))
    return SparseVector(indices, tuple(merged[i] for i in indices))


def query_vector(text: str) -> SparseVector:
    """Sparse vector to search with: weight 1.0 for each distinct term of ``text``."""
    indices = tuple(sorted({term_index(t) for t in keyword_terms(text)}))
    return SparseVector(indices, (1.0,) * len(indices))


# --- pseudo-relevance feedback ----------------------------------------------

#: How many of the best first-round hits are read as relevant.
FEEDBACK_DOCS = 5
#: How many terms they add to the query at most.
FEEDBACK_TERMS = 10
#: The added terms' total weight, relative to the query's own total weight.
FEEDBACK_WEIGHT = 0.5
#: Fewer first-round hits than this leave the query alone: a term can only stand out as
#: specific to the best hits against a background of other hits.
FEEDBACK_MIN_HITS = 4 * FEEDBACK_DOCS


def expand_query(
    query: SparseVector,
    ranked: Sequence[SparseVector],
    *,
    docs: int = FEEDBACK_DOCS,
    terms: int = FEEDBACK_TERMS,
    weight: float = FEEDBACK_WEIGHT,
    min_hits: int = FEEDBACK_MIN_HITS,
) -> SparseVector:
    """``query`` plus the terms that characterise the best hits of a first search (RM3-style
    pseudo-relevance feedback over the stored keyword vectors).

    ``ranked`` holds the stored (:func:`document_vector`) vectors of the first search's hits, best
    first; the first ``docs`` are taken as relevant, and all of them are the background against
    which a term counts as specific. Each term not in the query scores its share of each relevant
    document's weight, summed over those documents, times ``log(1 + (n - df + 0.5) / (df + 0.5))``
    with ``df`` the number of the ``n`` hits that contain it (a word in every hit, such as the
    name of the person all of them are about, scores little). The best ``terms`` join the
    query, sharing a total weight of ``weight`` times the query's own total, in proportion to
    their scores. The query's own terms keep their weights. Returns ``query`` itself when it is
    empty, when ``ranked`` has fewer than ``min_hits`` vectors (too few to tell specific terms
    from common ones: a small project's searches stay as they were) or when nothing can be added.
    Deterministic: ties go to the lower term index.
    """
    if query.is_empty or len(ranked) < max(min_hits, 1):
        return query
    own = dict(zip(query.indices, query.values, strict=True))
    relevance: dict[int, float] = defaultdict(float)
    for vector in ranked[:docs]:
        total = sum(vector.values)
        if total <= 0:
            continue
        for index, value in zip(vector.indices, vector.values, strict=True):
            if index not in own:
                relevance[index] += value / total
    if not relevance:
        return query
    n = len(ranked)
    df = Counter(itertools.chain.from_iterable(vector.indices for vector in ranked))
    scored = {i: r * math.log(1.0 + (n - df[i] + 0.5) / (df[i] + 0.5)) for i, r in relevance.items()}
    chosen = sorted(scored, key=lambda i: (-scored[i], i))[:terms]
    mass = sum(scored[i] for i in chosen)
    if mass <= 0:
        return query
    budget = weight * sum(own.values())
    expanded = dict(own)
    for index in chosen:
        expanded[index] = budget * scored[index] / mass
    indices = tuple(sorted(expanded))
    return SparseVector(indices, tuple(expanded[i] for i in indices))
