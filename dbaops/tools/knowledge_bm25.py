"""Pure-Python BM25F ranking, the fallback when SQLite lacks FTS5.

The fallback mirrors the FTS5 set-up of :mod:`dbaops.tools.knowledge`: three weighted
fields (own title, enclosing titles, body), Okapi BM25 with ``k1=1.2`` and ``b=0.75``,
case-folded words split at non-alphanumerics (so ``lock_timeout`` matches ``lock timeout``)
plus the whole underscore identifier as an extra, highly specific term.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

__all__ = ["Bm25Index", "analyze"]

_IDENT = re.compile(r"\w+")
_PART = re.compile(r"[^\W_]+")
_SUFFIXES = ("ing", "edly", "ed", "ly", "es", "s")


def _stem(word: str) -> str:
    """A deliberately tiny suffix stripper (``indexes`` -> ``index``, ``locking`` -> ``lock``)."""
    if word.isdigit() or len(word) <= 4:
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith("ss"):
                return word
            return word[: -len(suffix)]
    return word


def analyze(text: str) -> list[str]:
    """Tokenize *text*: stemmed lower-case word parts, plus each ``a_b`` identifier whole."""
    terms: list[str] = []
    for match in _IDENT.finditer(text.lower()):
        token = match.group()
        parts = _PART.findall(token)
        terms.extend(_stem(part) for part in parts)
        if len(parts) > 1:
            terms.append("_".join(parts))
    return terms


class Bm25Index:
    """An in-memory BM25F index over documents made of weighted text fields."""

    def __init__(
        self,
        documents: Iterable[Sequence[str]],
        weights: Sequence[float],
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        """Index *documents*, each a sequence of field texts matching *weights*."""
        self.k1 = k1
        self.b = b
        self.weights = tuple(weights)
        self._postings: dict[str, list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
        self._lengths: list[tuple[int, ...]] = []
        for doc_id, fields in enumerate(documents):
            per_field = [Counter(analyze(text)) for text in fields]
            self._lengths.append(tuple(sum(c.values()) for c in per_field))
            for term in set().union(*per_field):
                self._postings[term].append((doc_id, tuple(c[term] for c in per_field)))
        count = max(len(self._lengths), 1)
        self._avg = [
            max(sum(lengths[i] for lengths in self._lengths) / count, 1.0)
            for i in range(len(self.weights))
        ]

    def __len__(self) -> int:
        return len(self._lengths)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Return up to *k* ``(doc_index, score)`` pairs, best first (higher is better)."""
        n_docs = len(self._lengths)
        scores: dict[int, float] = defaultdict(float)
        for term in dict.fromkeys(analyze(query)):
            postings = self._postings.get(term)
            if not postings:
                continue
            hits = len(postings)
            idf = max(math.log((n_docs - hits + 0.5) / (hits + 0.5)), 1e-6)
            for doc_id, freqs in postings:
                lengths = self._lengths[doc_id]
                tf = 0.0
                for i, weight in enumerate(self.weights):
                    if freqs[i]:
                        norm = 1.0 - self.b + self.b * lengths[i] / self._avg[i]
                        tf += weight * freqs[i] / norm
                scores[doc_id] += idf * tf * (self.k1 + 1.0) / (tf + self.k1)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:k]
