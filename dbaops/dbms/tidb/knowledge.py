"""``query_knowledge_base`` on TiDB: BM25 over TiDB reference material available offline.

The corpus is what ships in the TiDB module the build downloads (kept beside the build, see
:func:`dbaops.dbms.tidb.build.keep_reference`): the error reference (``errors.toml``: each
error code with its message, and description and workaround where TiDB gives them) and the
system variables (``tidb_vars.go`` and ``sysvar.go``: name, scope, default, type, range, and
the comment that explains it). With ``$DBAOPS_TIDB_DOCS`` naming a checkout of the official
TiDB docs (github.com/pingcap/docs), every section of its markdown pages joins the corpus.
Nothing else enters it: no scenario label, cause or fix. The run header records which corpus
was used (:func:`describe_tidb_corpus`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from dbaops.dbms.tidb.build import TIDB_RELEASE_VERSION, reference_dir
from dbaops.record.kinds import KnowledgeCorpus
from dbaops.tools.base import Tool, ToolResult, ToolSpec
from dbaops.tools.knowledge_bm25 import Bm25Index

#: Names a checkout of the official TiDB documentation.
DOCS_ENV = "DBAOPS_TIDB_DOCS"
_WEIGHTS = (10.0, 3.0, 1.0)  # own title, enclosing titles, body (as PostgreSQL's corpus)
_SNIPPET = 1200


@dataclass(frozen=True)
class Unit:
    """One searchable unit: its source (``file#anchor``), title, context and text."""

    source: str
    title: str
    context: str
    body: str


def error_units(text: str) -> Iterator[Unit]:
    """One unit per error of ``errors.toml`` (``["kv:9007"] error = '''...'''``)."""
    for key, entry in tomllib.loads(text).items():
        code = key.rsplit(":", 1)[-1]
        parts = [f"Error {code} ({key}): {str(entry.get('error', '')).strip()}"]
        for field in ("description", "workaround"):
            if str(entry.get(field, "")).strip():
                parts.append(f"{field.capitalize()}: {str(entry[field]).strip()}")
        yield Unit(
            f"errors.toml#{key}", f"error {code} {key}", "TiDB error reference", "\n".join(parts)
        )


_CONST = re.compile(r'^\s*(\w+)\s*=\s*"([a-z0-9_.]+)"', re.M)
_DEF = re.compile(r"\{Scope: *([\w|]+), *Name: *(?:vardef\.)?(\w+),(.*)$", re.M)
_FIELD = re.compile(r"(Value|Type|MinValue|MaxValue|PossibleValues): *([^,{}]+(?:\{[^}]*\})?)")


def variable_units(tidb_vars: str, sysvar: str) -> Iterator[Unit]:
    """One unit per system variable: its definition (scope, default, type, range) from
    ``sysvar.go`` and the comment above its name in ``tidb_vars.go``."""
    names: dict[str, str] = {}
    comments: dict[str, str] = {}
    lines = tidb_vars.splitlines()
    for i, line in enumerate(lines):
        m = _CONST.match(line)
        if m is None:
            continue
        names[m[1]] = m[2]
        above: list[str] = []
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("//"):
            above.insert(0, lines[j].strip().lstrip("/").strip())
            j -= 1
        comments[m[2]] = " ".join(above)
    for m in _DEF.finditer(sysvar):
        name = names.get(m[2], m[2] if m[2].islower() else "")
        if not name:
            continue
        scope = m[1].replace("Scope", "").replace("|", " | ").upper()
        fields = {f: v.strip() for f, v in _FIELD.findall(m[3])}
        facts = [f"Scope: {scope}"]
        facts += [f"{'Default' if k == 'Value' else k}: {v}" for k, v in fields.items()]
        body = "\n".join([*facts, comments.get(name, "")]).strip()
        yield Unit(f"sysvar.go#{name}", f"{name} (system variable)", "TiDB system variables", body)


def markdown_units(docs: Path) -> Iterator[Unit]:
    """One unit per section (``#``..``###`` headings) of the docs' markdown pages."""
    for page in sorted(docs.rglob("*.md")):
        rel = page.relative_to(docs).as_posix()
        if rel.startswith(("releases/", "resources/", "media/")):
            continue
        heads: list[str] = []
        title, body = rel, []
        for line in page.read_text(errors="replace").splitlines() + ["# "]:
            m = re.match(r"^(#{1,3}) (.*)$", line)
            if m is None:
                body.append(line)
                continue
            if "\n".join(body).strip():
                yield Unit(rel, title, " / ".join(heads[:-1]), "\n".join(body).strip())
            level, title, body = len(m[1]), m[2].strip(), []
            heads = [*heads[: level - 1], title]


@dataclass
class TidbKnowledge:
    """The corpus and its index."""

    units: list[Unit]
    index: Bm25Index
    corpus: KnowledgeCorpus

    def search(self, query: str, k: int) -> list[tuple[Unit, float]]:
        return [(self.units[i], score) for i, score in self.index.search(query, k)]


def _sources() -> tuple[dict[str, Path], Path | None]:
    found = {n: reference_dir() / n for n in ("errors.toml", "tidb_vars.go", "sysvar.go")}
    docs = os.environ.get(DOCS_ENV)
    return {n: p for n, p in found.items() if p.exists()}, Path(docs) if docs else None


def describe_tidb_corpus() -> KnowledgeCorpus:
    """What ``query_knowledge_base`` searches on TiDB (for the run header)."""
    return _load().corpus


@functools.cache
def _load() -> TidbKnowledge:
    files, docs = _sources()
    units: list[Unit] = []
    digest = hashlib.sha256()
    if "errors.toml" in files:
        units += error_units(files["errors.toml"].read_text())
    if "tidb_vars.go" in files and "sysvar.go" in files:
        units += variable_units(files["tidb_vars.go"].read_text(), files["sysvar.go"].read_text())
    for name, path in sorted(files.items()):
        digest.update(name.encode() + b"\0" + path.read_bytes())
    if docs is not None and docs.is_dir():
        units += markdown_units(docs)
        digest.update(str(docs).encode())
    if not units:
        corpus = KnowledgeCorpus(
            available=False,
            reason=f"no TiDB reference in {reference_dir()} (run `dbaops tidb build`) "
            f"and no docs checkout in ${DOCS_ENV}",
        )
    else:
        source = "tidb-reference" + (f"+docs:{docs}" if docs is not None else "")
        corpus = KnowledgeCorpus(
            available=True,
            source=source,
            version=TIDB_RELEASE_VERSION,
            doc_dir=str(reference_dir()),
            pages=len(units),
            content_sha256=digest.hexdigest(),
        )
    index = Bm25Index(((u.title, u.context, u.body) for u in units), _WEIGHTS)
    return TidbKnowledge(units, index, corpus)


def format_tidb_hits(hits: list[tuple[Unit, float]], query: str) -> str:
    if not hits:
        return f"no TiDB reference entry matches {query!r}"
    out = []
    for rank, (unit, _score) in enumerate(hits, 1):
        body = unit.body if len(unit.body) <= _SNIPPET else unit.body[:_SNIPPET] + "…"
        out.append(f"[{rank}] {unit.title} — {unit.context} ({unit.source})\n{body}")
    return "\n\n".join(out)


def tidb_knowledge_tool() -> Tool:
    """``query_knowledge_base(query, k)`` over the TiDB corpus (loaded on first use)."""

    async def handler(args: dict[str, Any]) -> ToolResult:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolResult(ok=False, error="`query` must be a non-empty string")
        try:
            k = max(1, min(int(args.get("k", 5)), 10))
        except (TypeError, ValueError):
            return ToolResult(ok=False, error="`k` must be an integer")
        kb = await anyio.to_thread.run_sync(_load)
        if not kb.corpus.available:
            return ToolResult(ok=False, error=f"no knowledge base: {kb.corpus.reason}")
        hits = await anyio.to_thread.run_sync(kb.search, query, k)
        return ToolResult(
            observation=format_tidb_hits(hits, query),
            detail={"query": query, "k": k, "hits": [u.source for u, _ in hits]},
        )

    spec = ToolSpec(
        name="query_knowledge_base",
        description=(
            "Search TiDB's reference: the error reference (codes, messages, workarounds) and "
            "the system variables (scope, default, range, meaning), plus the official TiDB "
            "docs when installed. Use error codes, variable names or keywords, e.g. '8175' or "
            "'tidb_gc_life_time'."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Keywords to search for."},
                "k": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
            },
            "required": ["query"],
        },
        read_only=True,
    )
    return Tool(spec=spec, handler=handler)
