"""The knowledge base behind the agent tool ``query_knowledge_base(query, k)``.

BM25 retrieval over PostgreSQL's official HTML manual as shipped by Debian's
``postgresql-doc-NN`` packages (``/usr/share/doc/postgresql-doc-NN/html``) -- and over
nothing else: no scenario labels, causes or fixes ever enter the corpus.

* **Indexing** (:func:`build_index`): every page is split into units
  (:mod:`dbaops.tools.knowledge_html`): sections (``sect1``..``sect5``,
  ``refentry``/``refsect*``, ...) holding only their own text, anchored tables, identified
  variable-list entries such as ``<dt id="GUC-LOCK-TIMEOUT">`` (so a configuration parameter
  is found by name) and function / view-column rows.  Units land in a SQLite file with a
  contentless FTS5 table over three columns: own title, enclosing titles, body.
* **Cache**: ``$DBAOPS_CACHE/kb`` (else ``$XDG_CACHE_HOME/dbaops/kb`` or
  ``~/.cache/dbaops/kb``), one file per documentation directory, rebuilt only when the
  fingerprint of the HTML files (names, sizes, mtimes) or the schema version changes.
* **Identifiers**: the tokenizer (``porter unicode61 tokenchars '_'``) keeps ``work_mem``
  whole, so it does not match ``maintenance_work_mem``; each unit's indexed text also gets
  the parts of its identifiers appended, so prose such as ``lock timeout`` reaches
  ``lock_timeout`` too.
* **Queries** are free agent text: words are extracted, each is quoted as an FTS5 string and
  they are OR-ed, so operators, quotes and SQL never reach the FTS5 query parser.  If exact
  identifiers find fewer than *k* units, their parts (as phrases, then as words) fill up.
* **Ranking**: FTS5's ``bm25()`` with column weights title 10, enclosing titles 3, body 1,
  then a bonus for query terms present in the heading chain, one hit per source anchor.
  When the interpreter's SQLite lacks FTS5 an equivalent pure-Python BM25F
  (:mod:`dbaops.tools.knowledge_bm25`) ranks the same stored units.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import re
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio.to_thread
from pydantic import BaseModel, Field

from dbaops.cache import cache_dir
from dbaops.record.kinds import KnowledgeCorpus
from dbaops.tools.base import Tool, ToolResult, ToolSpec
from dbaops.tools.knowledge_bm25 import Bm25Index
from dbaops.tools.knowledge_html import TITLE_SEPARATOR, DocSection, parse_page

__all__ = [
    "DOC_DIR_ENV",
    "DOC_GLOB",
    "KnowledgeBase",
    "KnowledgeHit",
    "KnowledgeUnavailable",
    "build_fts_query",
    "build_index",
    "default_cache_dir",
    "describe_corpus",
    "doc_fingerprint",
    "find_doc_dir",
    "format_hits",
    "fts5_available",
    "knowledge_tool",
    "query_terms",
]

SCHEMA_VERSION = 1
DOC_GLOB = "/usr/share/doc/postgresql-doc-*/html"
DOC_DIR_ENV = "DBAOPS_PG_DOC_DIR"
TOOL_NAME = "query_knowledge_base"
SNIPPET_CHARS = 1200
MAX_QUERY_TERMS = 32
MAX_K = 20
# BM25 candidates fetched before re-ranking, and the weight of the heading-coverage bonus.
CANDIDATE_POOL = 60
HEADING_BONUS = 0.5
# bm25() weights for the FTS5 columns (title, context, body).
COLUMN_WEIGHTS: tuple[float, float, float] = (10.0, 3.0, 1.0)
# Underscores are word characters so ``work_mem`` does not match ``maintenance_work_mem``;
# :func:`_searchable` appends the parts of every identifier so prose ("lock timeout") still hits.
_TOKENIZER = "porter unicode61 remove_diacritics 2 tokenchars '_'"
# Pages that are lists of links rather than prose.
_SKIP_PAGES = frozenset({"bookindex.html"})

Backend = Literal["auto", "fts5", "python"]

# Function words an agent's natural-language query is full of; dropped unless nothing else is left.
_STOPWORDS = frozenset(
    """a an and are as at be but by can do does for from has have how i if in into is it its
    me my no not of on or our should so such than that the their then there these this to
    was we what when where which while who why will with would you your""".split()
)
_WORD = re.compile(r"\w+")
_ALNUM = re.compile(r"[^\W_]+")


class KnowledgeUnavailable(RuntimeError):
    """The PostgreSQL documentation (and hence the knowledge base) is not available."""


class KnowledgeHit(BaseModel):
    """One retrieved documentation unit."""

    title: str = Field(description="Heading chain, e.g. '20.11. … › lock_timeout (integer)'.")
    source: str = Field(description="Page and anchor inside the manual, 'file.html#ANCHOR'.")
    score: float = Field(description="BM25 relevance; higher is better, comparable per query.")
    snippet: str = Field(description=f"The most relevant part of the unit (<= ~{SNIPPET_CHARS}).")


class BuildStats(BaseModel):
    """What :func:`build_index` did."""

    path: str
    doc_dir: str
    pg_version: str
    pages: int
    documents: int
    fts5: bool
    seconds: float
    bytes: int


# -- locating the documentation -------------------------------------------------------------


def _version_key(path: Path) -> tuple[int, ...]:
    match = re.search(r"postgresql-doc-(\d+)(?:\.(\d+))?", str(path))
    if not match:
        return (-1,)
    return tuple(int(g) for g in match.groups() if g is not None)


def _has_pages(path: Path) -> bool:
    return path.is_dir() and (any(path.glob("*.html")) or any(path.glob("*.html.gz")))


def find_doc_dir(doc_dir: str | os.PathLike[str] | None = None, pattern: str = DOC_GLOB) -> Path:
    """Locate the HTML manual.

    Order: the explicit *doc_dir*, the ``DBAOPS_PG_DOC_DIR`` environment variable, then the
    newest ``/usr/share/doc/postgresql-doc-*/html`` directory.

    Raises:
        KnowledgeUnavailable: nothing usable was found.
    """
    explicit = doc_dir if doc_dir is not None else os.environ.get(DOC_DIR_ENV) or None
    if explicit is not None:
        path = Path(explicit).expanduser()
        if _has_pages(path):
            return path.resolve()
        raise KnowledgeUnavailable(f"PostgreSQL documentation not found at {path}: no *.html pages")
    root = Path(pattern).anchor or "/"
    candidates = sorted(
        (p for p in Path(root).glob(pattern.removeprefix(root)) if _has_pages(p)),
        key=_version_key,
        reverse=True,
    )
    if not candidates:
        raise KnowledgeUnavailable(
            f"PostgreSQL documentation not found (looked for {pattern}); "
            "install it with `apt-get install postgresql-doc-15` (or any postgresql-doc-NN), "
            f"or point {DOC_DIR_ENV} at a directory of the manual's HTML pages"
        )
    return candidates[0].resolve()


def _doc_pages(doc_dir: Path) -> list[Path]:
    pages = [*doc_dir.glob("*.html"), *doc_dir.glob("*.html.gz")]
    return sorted(p for p in pages if _page_name(p) not in _SKIP_PAGES)


def _page_name(path: Path) -> str:
    return path.name.removesuffix(".gz")


def _read_page(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def detect_version(doc_dir: Path) -> str:
    """PostgreSQL version of the manual, e.g. ``"15.20"`` (from ``index.html``'s title)."""
    for name in ("index.html", "index.html.gz"):
        index = doc_dir / name
        if index.exists():
            head = _read_page(index)[:4000]
            match = re.search(r"<title>\s*PostgreSQL\s+([\d.]+\w*)", head)
            if match:
                return match.group(1).rstrip(".")
    key = _version_key(doc_dir)
    return ".".join(map(str, key)) if key != (-1,) else "unknown"


def describe_corpus(doc_dir: str | os.PathLike[str] | None = None) -> KnowledgeCorpus:
    """The corpus :func:`find_doc_dir` resolves to (what the tool will search): its version,
    page count and a hash of its contents; or, without one, why not."""
    try:
        docs = find_doc_dir(doc_dir)
    except KnowledgeUnavailable as exc:
        return KnowledgeCorpus(available=False, reason=str(exc))
    return _corpus(docs, doc_fingerprint(docs))


@functools.lru_cache(maxsize=8)
def _corpus(docs: Path, fingerprint: str) -> KnowledgeCorpus:
    """The corpus of ``docs``, hashed once per process while its pages' names, sizes and
    mtimes (``fingerprint``) stay the same (every run's header asks for it)."""
    pages = _doc_pages(docs)
    digest = hashlib.sha256()
    for page in pages:
        digest.update(page.name.encode() + b"\0")
        digest.update(page.read_bytes())
    return KnowledgeCorpus(
        available=True,
        source="postgresql-manual",
        version=detect_version(docs),
        doc_dir=str(docs),
        pages=len(pages),
        content_sha256=digest.hexdigest(),
    )


def doc_fingerprint(doc_dir: Path) -> str:
    """Hash of the schema version and every page's name, size and mtime."""
    digest = hashlib.sha256(f"schema={SCHEMA_VERSION};tok={_TOKENIZER}\n".encode())
    for page in _doc_pages(doc_dir):
        st = page.stat()
        digest.update(f"{page.name}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """``$DBAOPS_CACHE/kb``, else ``$XDG_CACHE_HOME/dbaops/kb``, else ``~/.cache/dbaops/kb``."""
    return cache_dir("kb")


def index_path(doc_dir: Path, cache_dir: Path, version: str) -> Path:
    """Cache file for *doc_dir*: ``postgresql-<major>-<hash of the doc dir path>.sqlite``."""
    major = version.split(".")[0]
    tag = hashlib.sha256(str(doc_dir).encode()).hexdigest()[:10]
    return cache_dir / f"postgresql-{major}-{tag}.sqlite"


def fts5_available() -> bool:
    """Whether this interpreter's SQLite can create FTS5 tables."""
    try:
        with closing(sqlite3.connect(":memory:")) as conn:
            conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except sqlite3.Error:
        return False


# -- building -------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE docs (
    id INTEGER PRIMARY KEY,
    page TEXT NOT NULL,
    anchor TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    context TEXT NOT NULL,
    body TEXT NOT NULL
);
"""


_IDENTIFIER = re.compile(r"\w*[^\W_]_+[^\W_]\w*")


def _searchable(text: str) -> str:
    """*text* plus the space-separated parts of each distinct ``a_b`` identifier in it.

    The FTS5 tokenizer keeps identifiers whole (exact ``work_mem`` matches); the appended
    parts let a prose query such as ``lock timeout`` reach ``lock_timeout`` as well.
    """
    parts = dict.fromkeys(" ".join(_ALNUM.findall(ident)) for ident in _IDENTIFIER.findall(text))
    return f"{text}\n{' / '.join(parts)}" if parts else text


def _iter_sections(doc_dir: Path) -> Iterator[DocSection]:
    for page in _doc_pages(doc_dir):
        yield from parse_page(_page_name(page), _read_page(page))


def build_index(
    doc_dir: Path, path: Path, *, use_fts5: bool | None = None, fingerprint: str | None = None
) -> BuildStats:
    """Parse the manual in *doc_dir* and write a fresh index to *path* (atomically replaced).

    Args:
        doc_dir: directory of the manual's HTML pages.
        path: destination SQLite file; written next to it under a temporary name first.
        use_fts5: create the FTS5 table (default: when SQLite supports it).
        fingerprint: precomputed :func:`doc_fingerprint` of *doc_dir*.
    """
    started = time.perf_counter()
    use_fts5 = fts5_available() if use_fts5 is None else use_fts5
    fingerprint = fingerprint or doc_fingerprint(doc_dir)
    version = detect_version(doc_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    pages = len(_doc_pages(doc_dir))
    try:
        with closing(sqlite3.connect(tmp)) as conn:
            conn.execute("PRAGMA journal_mode = OFF")
            conn.execute("PRAGMA synchronous = OFF")
            conn.executescript(_SCHEMA)
            rows = (
                (s.page, s.anchor, s.kind, s.title, TITLE_SEPARATOR.join(s.context), s.body)
                for s in _iter_sections(doc_dir)
            )
            conn.executemany(
                "INSERT INTO docs (page, anchor, kind, title, context, body) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            if use_fts5:
                tokenize = _TOKENIZER.replace("'", "''")
                conn.execute(
                    "CREATE VIRTUAL TABLE docs_fts USING fts5(title, context, body, "
                    f"content='', tokenize='{tokenize}')"
                )
                conn.executemany(
                    "INSERT INTO docs_fts (rowid, title, context, body) VALUES (?, ?, ?, ?)",
                    (
                        (doc_id, _searchable(title), _searchable(context), _searchable(body))
                        for doc_id, title, context, body in conn.execute(
                            "SELECT id, title, context, body FROM docs ORDER BY id"
                        ).fetchall()
                    ),
                )
                conn.execute("INSERT INTO docs_fts (docs_fts) VALUES ('optimize')")
            (documents,) = conn.execute("SELECT count(*) FROM docs").fetchone()
            seconds = time.perf_counter() - started
            meta = {
                "schema": str(SCHEMA_VERSION),
                "fingerprint": fingerprint,
                "doc_dir": str(doc_dir),
                "pg_version": version,
                "pages": str(pages),
                "documents": str(documents),
                "fts5": "1" if use_fts5 else "0",
                "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "build_seconds": f"{seconds:.3f}",
            }
            conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
            conn.commit()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return BuildStats(
        path=str(path),
        doc_dir=str(doc_dir),
        pg_version=version,
        pages=pages,
        documents=documents,
        fts5=use_fts5,
        seconds=time.perf_counter() - started,
        bytes=path.stat().st_size,
    )


def _read_meta(path: Path) -> dict[str, str] | None:
    try:
        with closing(sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)) as conn:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error:
        return None
    meta["_has_fts"] = "1" if "docs_fts" in tables else "0"
    return meta


# -- querying -------------------------------------------------------------------------------


def query_terms(query: str) -> list[str]:
    """Distinct lower-case words/identifiers of *query*, function words dropped when possible.

    ``"pg_stat_activity wait_event?"`` -> ``["pg_stat_activity", "wait_event"]``.
    """
    words = []
    for token in _WORD.findall(query.lower()):
        parts = _ALNUM.findall(token)
        if parts:
            words.append("_".join(parts))
    words = list(dict.fromkeys(words))
    content = [w for w in words if len(w) > 1 and w not in _STOPWORDS]
    return (content or words)[:MAX_QUERY_TERMS]


QueryMode = Literal["exact", "phrase", "words"]


def build_fts_query(query: str, mode: QueryMode = "exact") -> str | None:
    """Turn arbitrary text into a safe FTS5 ``MATCH`` expression (``None`` if no words).

    Every word is double-quoted (so ``NEAR``, ``AND``, ``-``, ``*``, ``"`` and column filters
    lose their meaning) and the strings are OR-ed; BM25 then rewards units matching more and
    rarer terms.  *mode* decides what happens to identifiers such as ``work_mem``:

    * ``"exact"``: kept whole, so they do not match ``maintenance_work_mem``;
    * ``"phrase"``: a phrase of their parts (``"work mem"``), matching prose and the parts
      :func:`_searchable` appended for every identifier (so also ``maintenance_work_mem``);
    * ``"words"``: every part a separate term (``"work" OR "mem"``).
    """
    terms = query_terms(query)
    if mode == "phrase":
        terms = [term.replace("_", " ") for term in terms]
    elif mode == "words":
        terms = list(dict.fromkeys(part for term in terms for part in term.split("_")))
    if not terms:
        return None
    return " OR ".join(f'"{term}"' for term in terms)


def _term_patterns(terms: Sequence[str]) -> list[re.Pattern[str]]:
    """Case-insensitive patterns locating *terms* in display text (for snippets and headings).

    Identifiers match whole (``work_mem`` not inside ``maintenance_work_mem``) or as prose
    (``work mem``); plain words match by a crude stem at a word start, also inside
    identifiers (``activity`` in ``pg_stat_activity``).
    """
    patterns = []
    for term in terms:
        if "_" in term:
            body = r"[\s_]+".join(re.escape(p) for p in term.split("_"))
            pattern = rf"(?<!\w){body}(?!\w)"
        else:
            stem = re.sub(r"(ingly|edly|ing|ed|ly|es|s)$", "", term) if len(term) > 5 else term
            pattern = rf"(?<![^\W_]){re.escape(stem)}\w*"
        patterns.append(re.compile(pattern, re.IGNORECASE))
    return patterns


def _trim(text: str, limit: int, at: int = 0) -> str:
    """*limit* characters of one long paragraph around position *at*, cut at word boundaries."""
    start = max(0, at - limit // 5)
    if start:
        sentence = text.rfind(". ", 0, start + 1)
        start = sentence + 2 if sentence >= 0 and start - sentence < limit // 4 else start
    end = min(len(text), start + limit)
    if end < len(text):
        space = text.rfind(" ", start, end)
        end = space if space > start + limit // 2 else end
    if start:
        space = text.find(" ", start)
        start = space + 1 if 0 <= space < start + 30 else start
    return ("… " if start else "") + text[start:end].strip() + (" …" if end < len(text) else "")


def make_snippet(body: str, terms: Sequence[str], limit: int = SNIPPET_CHARS) -> str:
    """The run of whole paragraphs (at most *limit* characters) that best covers *terms*.

    Windows are scored by how many distinct terms they contain, then by occurrences; ties go
    to the earliest window.  A single over-long paragraph is cut around its first match.
    """
    if len(body) <= limit:
        return body
    patterns = _term_patterns(terms)
    paragraphs = body.split("\n")
    hits = [[len(p.findall(par)) for p in patterns] for par in paragraphs]
    best: tuple[int, int] | None = None
    best_range = (0, 1)
    for i in range(len(paragraphs)):
        size = 0
        counts = [0] * len(patterns)
        j = i
        while j < len(paragraphs) and size + len(paragraphs[j]) + 1 <= limit + 1:
            size += len(paragraphs[j]) + 1
            counts = [a + b for a, b in zip(counts, hits[j], strict=True)]
            j += 1
        if j == i:  # the paragraph alone is too long
            counts = hits[i]
            j = i + 1
        score = (sum(1 for c in counts if c), min(sum(counts), 12))
        if best is None or score > best:
            best, best_range = score, (i, j)
    i, j = best_range
    if j == i + 1 and len(paragraphs[i]) > limit:
        positions = [m.start() for p in patterns for m in p.finditer(paragraphs[i])]
        text = _trim(paragraphs[i], limit, min(positions, default=0))
    else:
        text = "\n".join(paragraphs[i:j])
    if i > 0 and not text.startswith("…"):
        text = "…\n" + text
    if j < len(paragraphs) and not text.endswith("…"):
        text += "\n…"
    return text


@dataclass(frozen=True)
class _Candidate:
    page: str
    anchor: str
    title: str
    context: str
    body: str
    bm25: float
    tier: int = 0

    @property
    def source(self) -> str:
        return f"{self.page}#{self.anchor}" if self.anchor else self.page


def _rerank(
    candidates: Sequence[_Candidate], terms: Sequence[str], k: int
) -> list[tuple[_Candidate, float]]:
    """Boost units whose headings contain the query terms, drop repeated sources, keep *k*."""
    patterns = _term_patterns(terms)
    scored = []
    for order, cand in enumerate(candidates):
        headings = f"{cand.context} {cand.title}"
        coverage = sum(1 for p in patterns if p.search(headings)) / max(len(patterns), 1)
        score = cand.bm25 * (1.0 + HEADING_BONUS * coverage)
        scored.append((cand.tier, -score, order, cand, score))
    scored.sort(key=lambda item: item[:3])
    out: list[tuple[_Candidate, float]] = []
    seen: set[str] = set()
    for *_, cand, score in scored:
        if cand.source in seen:
            continue
        seen.add(cand.source)
        out.append((cand, score))
        if len(out) == k:
            break
    return out


class KnowledgeBase:
    """BM25 search over one cached index of the PostgreSQL manual.

    Obtain one with :meth:`open_or_build`; it is safe to share between threads.
    """

    #: Number of indexes built by this process (lets tests see whether a cache was reused).
    builds: ClassVar[int] = 0

    def __init__(
        self,
        path: Path,
        *,
        doc_dir: Path,
        backend: Literal["fts5", "python"],
        built: bool,
        build_stats: BuildStats | None = None,
    ) -> None:
        """Open the index at *path*; prefer :meth:`open_or_build`."""
        self.path = path
        self.doc_dir = doc_dir
        self.backend = backend
        self.built = built
        self.build_stats = build_stats
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False
        )
        self.meta: dict[str, str] = dict(
            self._conn.execute("SELECT key, value FROM meta").fetchall()
        )
        self._bm25: Bm25Index | None = None
        self._ids: list[int] = []

    @classmethod
    def open_or_build(
        cls,
        doc_dir: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        *,
        backend: Backend = "auto",
        rebuild: bool = False,
    ) -> KnowledgeBase:
        """Open the cached index for the manual, building it first if missing or stale.

        Args:
            doc_dir: the manual's HTML directory (default: :func:`find_doc_dir`).
            cache_dir: where index files live (default: :func:`default_cache_dir`).
            backend: ``"fts5"``, ``"python"`` (pure-Python BM25) or ``"auto"`` (FTS5 if the
                SQLite library supports it).
            rebuild: build even if the cached index is current.

        Raises:
            KnowledgeUnavailable: no documentation found, or ``backend="fts5"`` unsupported.
        """
        docs = find_doc_dir(doc_dir)
        have_fts5 = fts5_available()
        if backend == "fts5" and not have_fts5:
            raise KnowledgeUnavailable("this Python's SQLite library was built without FTS5")
        chosen: Literal["fts5", "python"] = (
            "fts5" if backend == "fts5" or (backend == "auto" and have_fts5) else "python"
        )
        cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError:
            if cache_dir is not None:
                raise
            cache = Path(tempfile.gettempdir()) / "dbaops-kb"
            cache.mkdir(parents=True, exist_ok=True)
        path = index_path(docs, cache, detect_version(docs))
        fingerprint = doc_fingerprint(docs)
        meta = None if rebuild or not path.exists() else _read_meta(path)
        current = (
            meta is not None
            and meta.get("schema") == str(SCHEMA_VERSION)
            and meta.get("fingerprint") == fingerprint
            and (chosen == "python" or meta.get("_has_fts") == "1")
        )
        stats = None
        if not current:
            stats = build_index(docs, path, use_fts5=have_fts5, fingerprint=fingerprint)
            cls.builds += 1
        return cls(path, doc_dir=docs, backend=chosen, built=not current, build_stats=stats)

    # -- properties ----------------------------------------------------------------------

    @property
    def pg_version(self) -> str:
        """Version of the indexed manual, e.g. ``"15.20"``."""
        return self.meta.get("pg_version", "unknown")

    @property
    def document_count(self) -> int:
        """Number of indexed sections and entries."""
        return int(self.meta.get("documents", "0"))

    # -- search --------------------------------------------------------------------------

    def search(self, query: str, k: int = 5) -> list[KnowledgeHit]:
        """Return the *k* best units for *query* (any text; never raises on syntax).

        Candidates come from BM25 (FTS5 or the Python fallback), are re-scored with a bonus
        for query terms appearing in the unit's heading chain, and are deduplicated by
        source so one table's rows cannot crowd out everything else.
        """
        k = max(1, min(int(k), MAX_K))
        terms = query_terms(query)
        if not terms:
            return []
        pool = max(CANDIDATE_POOL, 4 * k)
        with self._lock:
            if self.backend == "fts5":
                candidates = self._search_fts(query, pool, k)
            else:
                candidates = self._search_python(terms, pool)
        return [
            KnowledgeHit(
                title=TITLE_SEPARATOR.join(filter(None, (c.context, c.title))),
                source=c.source,
                score=round(score, 4),
                snippet=make_snippet(c.body, terms),
            )
            for c, score in _rerank(candidates, terms, k)
        ]

    def _search_fts(self, query: str, pool: int, k: int) -> list[_Candidate]:
        weights = ", ".join(str(w) for w in COLUMN_WEIGHTS)
        sql = (
            "SELECT d.page, d.anchor, d.title, d.context, d.body, -r.rank FROM "
            f"(SELECT rowid, bm25(docs_fts, {weights}) AS rank FROM docs_fts "
            "WHERE docs_fts MATCH ? ORDER BY rank LIMIT ?) AS r "
            "JOIN docs AS d ON d.id = r.rowid ORDER BY r.rank, d.id"
        )
        out: list[_Candidate] = []
        # Tier 0: identifiers exact.  While that leaves fewer than k sources, tier 1 treats
        # them as phrases of their parts (``lock_timeout`` -> ``lock timeout``) and tier 2 as
        # loose words; lower tiers always rank after higher ones.
        modes: tuple[QueryMode, ...] = ("exact", "phrase", "words")
        if not any("_" in term for term in query_terms(query)):
            modes = ("exact",)
        for tier, mode in enumerate(modes):
            match = build_fts_query(query, mode)
            if match is None:
                break
            try:
                rows = self._conn.execute(sql, (match, pool)).fetchall()
            except sqlite3.OperationalError:  # defensive: every word is quoted
                rows = []
            out += [
                _Candidate(row[0], row[1], row[2], row[3], row[4], row[5], tier) for row in rows
            ]
            if len({c.source for c in out}) >= k:
                break
        return out

    def _search_python(self, terms: list[str], pool: int) -> list[_Candidate]:
        if self._bm25 is None:
            rows = self._conn.execute("SELECT id, title, context, body FROM docs ORDER BY id")
            ids, fields = [], []
            for doc_id, title, context, body in rows:
                ids.append(doc_id)
                fields.append((title, context, body))
            self._bm25 = Bm25Index(fields, COLUMN_WEIGHTS)
            self._ids = ids
        out = []
        for index, score in self._bm25.search(" ".join(terms), pool):
            row = self._conn.execute(
                "SELECT page, anchor, title, context, body FROM docs WHERE id = ?",
                (self._ids[index],),
            ).fetchone()
            out.append(_Candidate(row[0], row[1], row[2], row[3], row[4], score))
        return out

    def close(self) -> None:
        """Close the SQLite connection."""
        self._conn.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def format_hits(hits: Sequence[KnowledgeHit], query: str, *, pg_version: str | None = None) -> str:
    """Render hits as the observation text an agent reads."""
    manual = f"PostgreSQL {pg_version} documentation" if pg_version else "PostgreSQL documentation"
    if not hits:
        return f"No sections of the {manual} matched {query!r}. Try other keywords."
    lines = [f"Top {len(hits)} sections of the {manual} for {query!r}:"]
    for rank, hit in enumerate(hits, 1):
        lines += ["", f"[{rank}] {hit.title}", f"source: {hit.source} (score {hit.score:.2f})"]
        lines.append(hit.snippet)
    return "\n".join(lines)


def knowledge_tool(
    kb: KnowledgeBase | None = None,
    *,
    doc_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Tool:
    """The ``query_knowledge_base(query, k)`` tool; opens (or builds) the index on first use."""
    state: dict[str, KnowledgeBase] = {"kb": kb} if kb is not None else {}
    lock = threading.Lock()

    def _get() -> KnowledgeBase:
        with lock:
            if "kb" not in state:
                state["kb"] = KnowledgeBase.open_or_build(doc_dir, cache_dir)
            return state["kb"]

    async def handler(args: dict[str, Any]) -> ToolResult:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolResult(ok=False, error="`query` must be a non-empty string")
        try:
            k = int(args.get("k", 5))
        except (TypeError, ValueError):
            return ToolResult(ok=False, error="`k` must be an integer")
        k = max(1, min(k, 10))
        try:
            base = await anyio.to_thread.run_sync(_get)
        except KnowledgeUnavailable as exc:
            return ToolResult(ok=False, error=str(exc))
        hits = await anyio.to_thread.run_sync(base.search, query, k)
        return ToolResult(
            observation=format_hits(hits, query, pg_version=base.pg_version),
            detail={
                "query": query,
                "k": k,
                "pg_version": base.pg_version,
                "hits": [hit.model_dump() for hit in hits],
            },
        )

    spec = ToolSpec(
        name=TOOL_NAME,
        description=(
            "Search the official PostgreSQL documentation (BM25 over manual sections and "
            "configuration-parameter entries). Use keywords, parameter names or view names, "
            "e.g. 'lock_timeout' or 'pg_stat_activity wait_event'. Returns the best sections "
            "with their source anchors and relevant excerpts."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Keywords to search for."},
                "k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10,
                    "default": 5,
                    "description": "Number of sections to return.",
                },
            },
            "required": ["query"],
        },
        read_only=True,
    )
    return Tool(spec=spec, handler=handler)
