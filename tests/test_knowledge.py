"""Tests for the PostgreSQL-documentation knowledge base (``query_knowledge_base``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from dbaops.tools.knowledge import (
    SNIPPET_CHARS,
    KnowledgeBase,
    KnowledgeHit,
    KnowledgeUnavailable,
    build_fts_query,
    describe_corpus,
    find_doc_dir,
    format_hits,
    fts5_available,
    knowledge_tool,
    query_terms,
)
from dbaops.tools.knowledge_html import parse_page

WEIRD_QUERIES = [
    '"',
    '"lock_timeout',
    "*",
    "lock*",
    "-",
    "- lock -timeout",
    "NEAR(",
    "NEAR(lock timeout, 2)",
    "lock AND OR NOT timeout",
    "'; DROP TABLE x; --",
    "title: body: {title body}: ^lock",
    "pg_stat_activity.wait_event = 'Lock' AND state <> 'idle'",
    "",
    "   ",
    "\x00\n\t",
    "ü ß ø — “quotes” 日本語",
    "_ __ ___",
    "x" * 5000,
]

MINI_PAGE = """<?xml version="1.0" encoding="UTF-8"?>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>20.11. Client Connection Defaults</title>
</head><body><div class="navheader"><a href="x.html">Prev</a> Chapter 20 nav</div>
<div class="sect1" id="RUNTIME-CONFIG-CLIENT"><div class="titlepage"><h2 class="title">20.11.
Client Connection Defaults</h2></div>
<div class="toc"><dl class="toc"><dt>20.11.1. Statement Behavior</dt></dl></div>
<p>Intro text of the chapter section.</p>
<div class="sect2" id="RUNTIME-CONFIG-CLIENT-STATEMENT"><div class="titlepage">
<h3 class="title">20.11.1. Statement Behavior</h3></div>
<p>Settings that affect statements.</p>
<div class="variablelist"><dl class="variablelist">
<dt id="GUC-STATEMENT-TIMEOUT"><span class="term"><code class="varname">statement_timeout</code>
(<code class="type">integer</code>)<a id="id-1.2" class="indexterm"></a></span></dt>
<dd><p>Abort any statement that takes more than the specified amount of time.</p></dd>
<dt id="GUC-LOCK-TIMEOUT"><span class="term"><code class="varname">lock_timeout</code>
(<code class="type">integer</code>)</span></dt>
<dd><p>Abort any statement that waits longer than the specified amount of time while
attempting to acquire a lock.</p><pre class="programlisting">SET lock_timeout = '5s';
SHOW lock_timeout;</pre></dd>
</dl></div></div>
<div class="table" id="WAIT-TABLE"><p class="title"><strong>Table 1. Wait Things</strong></p>
<table><tr><td class="func_table_entry"><p class="func_signature">pg_cancel_backend
( <code>pid</code> integer ) → boolean</p><p>Cancels the current query.</p></td></tr></table>
</div></div>
<div class="navfooter">Next: Lock Management</div></body></html>
"""


def _docs_or_skip() -> Path:
    try:
        return find_doc_dir()
    except KnowledgeUnavailable as exc:
        pytest.skip(f"PostgreSQL HTML documentation not installed ({exc})")


@pytest.fixture(scope="module")
def doc_dir() -> Path:
    return _docs_or_skip()


@pytest.fixture(scope="module")
def kb(doc_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase.open_or_build(doc_dir, tmp_path_factory.mktemp("kb-cache"))
    yield base
    base.close()


@pytest.fixture()
def mini_docs(tmp_path: Path) -> Path:
    docs = tmp_path / "postgresql-doc-15" / "html"
    docs.mkdir(parents=True)
    (docs / "index.html").write_text(
        "<html><head><title>PostgreSQL 15.99 Documentation</title></head>"
        "<body><div class='book' id='BOOK'><h1 class='title'>PostgreSQL 15.99 Documentation"
        "</h1><p>The manual.</p></div></body></html>",
        encoding="utf-8",
    )
    (docs / "runtime-config-client.html").write_text(MINI_PAGE, encoding="utf-8")
    (docs / "bookindex.html").write_text(
        "<html><body><dt>lock_timeout lock_timeout lock_timeout</dt></body></html>",
        encoding="utf-8",
    )
    return docs


# -- parsing --------------------------------------------------------------------------------


def test_parse_page_splits_sections_entries_tables_and_rows() -> None:
    parsed = parse_page("runtime-config-client.html", MINI_PAGE)
    sections = {s.source: s for s in parsed if s.kind != "row"}

    lock = sections["runtime-config-client.html#GUC-LOCK-TIMEOUT"]
    assert lock.kind == "entry"
    assert lock.title == "lock_timeout (integer)"
    assert lock.context == ["20.11. Client Connection Defaults", "20.11.1. Statement Behavior"]
    assert lock.title_chain.endswith("20.11.1. Statement Behavior › lock_timeout (integer)")
    assert lock.body.startswith("Abort any statement that waits longer")
    assert "SET lock_timeout = '5s';\nSHOW lock_timeout;" in lock.body  # <pre> keeps lines

    stmt = sections["runtime-config-client.html#RUNTIME-CONFIG-CLIENT-STATEMENT"]
    assert stmt.body == "Settings that affect statements."  # GUC text lives in the entries

    top = sections["runtime-config-client.html#RUNTIME-CONFIG-CLIENT"]
    assert top.title == "20.11. Client Connection Defaults"
    assert "Intro text" in top.body
    assert "Prev" not in top.body and "Next" not in top.body  # navigation dropped
    assert "Statement Behavior" not in top.body  # table of contents dropped

    table = sections["runtime-config-client.html#WAIT-TABLE"]
    assert table.title == "Table 1. Wait Things"
    assert "Cancels the current query." in table.body

    rows = [s for s in parsed if s.kind == "row"]
    assert [r.title for r in rows] == ["pg_cancel_backend ( pid integer ) → boolean"]
    assert rows[0].context[-1] == "Table 1. Wait Things"


# -- query sanitising -----------------------------------------------------------------------


@pytest.mark.parametrize("query", WEIRD_QUERIES)
def test_build_fts_query_quotes_every_term(query: str) -> None:
    for mode in ("exact", "phrase", "words"):
        match = build_fts_query(query, mode)  # type: ignore[arg-type]
        if match is None:
            assert not query_terms(query)
            continue
        for term in match.split(" OR "):
            assert term.startswith('"') and term.endswith('"')
            assert '"' not in term[1:-1]


def test_query_terms_keeps_identifiers_and_drops_function_words() -> None:
    assert query_terms("How do I see pg_stat_activity.wait_event?") == [
        "see",
        "pg_stat_activity",
        "wait_event",
    ]
    assert query_terms("the") == ["the"]  # nothing else left: keep it
    assert query_terms('"*-') == []


# -- retrieval over the real manual ---------------------------------------------------------


def test_lock_timeout_returns_guc_entry_first(kb: KnowledgeBase) -> None:
    hits = kb.search("lock_timeout", k=5)
    assert hits, "no hits for lock_timeout"
    assert hits[0].source == "runtime-config-client.html#GUC-LOCK-TIMEOUT"
    assert hits[0].title.endswith("lock_timeout (integer)")
    assert "Abort any statement that waits longer" in hits[0].snippet
    assert len({h.source for h in hits}) == len(hits)  # one hit per source


def test_pg_stat_activity_wait_event_in_top3(kb: KnowledgeBase) -> None:
    hits = kb.search("pg_stat_activity wait_event", k=3)
    assert len(hits) == 3
    relevant = [
        h
        for h in hits
        if h.source.startswith("monitoring-stats.html#")
        and "pg_stat_activity" in h.title
        and "wait_event" in h.snippet
    ]
    assert relevant, [h.title for h in hits]


def test_create_index_concurrently_in_top3(kb: KnowledgeBase) -> None:
    hits = kb.search("CREATE INDEX CONCURRENTLY", k=3)
    sources = [h.source for h in hits]
    assert "sql-createindex.html#SQL-CREATEINDEX-CONCURRENTLY" in sources, sources
    hit = hits[sources.index("sql-createindex.html#SQL-CREATEINDEX-CONCURRENTLY")]
    assert hit.title.startswith("CREATE INDEX") and "Concurrently" in hit.title


def test_identifier_is_matched_whole(kb: KnowledgeBase) -> None:
    hits = kb.search("work_mem", k=3)
    assert hits[0].source == "runtime-config-resource.html#GUC-WORK-MEM"


def test_prose_reaches_identifier(kb: KnowledgeBase) -> None:
    sources = [h.source for h in kb.search("lock timeout", k=3)]
    assert "runtime-config-client.html#GUC-LOCK-TIMEOUT" in sources


def test_function_rows_are_searchable(kb: KnowledgeBase) -> None:
    hits = kb.search("pg_terminate_backend", k=3)
    assert hits[0].source == "functions-admin.html#FUNCTIONS-ADMIN-SIGNAL-TABLE"
    assert "pg_terminate_backend" in hits[0].title


@pytest.mark.parametrize("query", WEIRD_QUERIES)
def test_weird_queries_do_not_raise(kb: KnowledgeBase, query: str) -> None:
    hits = kb.search(query, k=3)
    assert isinstance(hits, list) and len(hits) <= 3
    assert all(isinstance(h, KnowledgeHit) for h in hits)
    if not query_terms(query):
        assert hits == []


def test_sql_injection_like_query_still_finds_words(kb: KnowledgeBase) -> None:
    hits = kb.search("'; DROP TABLE x; --", k=3)
    assert hits and all(h.score > 0 for h in hits)


def test_snippets_are_bounded_and_relevant(kb: KnowledgeBase) -> None:
    # The pg_stat_activity section is ~26k characters: the snippet must be a focused excerpt.
    hits = kb.search("pg_stat_activity state idle in transaction", k=5)
    assert hits
    for hit in hits:
        assert len(hit.snippet) <= SNIPPET_CHARS + 10
        assert hit.snippet.strip()
    assert any("idle in transaction" in h.snippet for h in hits)


def test_k_is_respected(kb: KnowledgeBase) -> None:
    assert len(kb.search("vacuum", k=1)) == 1
    assert len(kb.search("vacuum", k=7)) == 7


def test_format_hits(kb: KnowledgeBase) -> None:
    hits = kb.search("lock_timeout", k=2)
    text = format_hits(hits, "lock_timeout", pg_version=kb.pg_version)
    assert f"PostgreSQL {kb.pg_version} documentation" in text
    assert "[1] " in text and "source: runtime-config-client.html#GUC-LOCK-TIMEOUT" in text
    assert "No sections" in format_hits([], "zzz")


def test_index_is_reused_on_second_open(doc_dir: Path, tmp_path: Path) -> None:
    before = KnowledgeBase.builds
    with KnowledgeBase.open_or_build(doc_dir, tmp_path) as first:
        assert first.built is True
        assert first.build_stats is not None and first.build_stats.documents > 1000
        path = first.path
    assert KnowledgeBase.builds == before + 1
    mtime = path.stat().st_mtime_ns
    built_at = first.meta["built_at"]

    with KnowledgeBase.open_or_build(doc_dir, tmp_path) as second:
        assert second.built is False
        assert second.path == path
        assert second.meta["built_at"] == built_at
        assert second.search("lock_timeout", k=1)[0].source.endswith("#GUC-LOCK-TIMEOUT")
    assert KnowledgeBase.builds == before + 1
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp files left


def test_default_cache_dir_from_env(
    doc_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBAOPS_CACHE", str(tmp_path))
    with KnowledgeBase.open_or_build(doc_dir) as base:
        assert base.path.parent == tmp_path / "kb"
        assert base.path.name.startswith(f"postgresql-{base.pg_version.split('.')[0]}-")
        assert base.path.suffix == ".sqlite"


# -- small synthetic manual (no installed docs needed) --------------------------------------


def test_rebuilds_when_docs_change(mini_docs: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with KnowledgeBase.open_or_build(mini_docs, cache) as first:
        assert first.built and first.pg_version == "15.99"
        assert first.search("lock_timeout", k=1)[0].source == (
            "runtime-config-client.html#GUC-LOCK-TIMEOUT"
        )
        # bookindex.html is skipped: it is a list of links, not documentation.
        assert all(not h.source.startswith("bookindex") for h in first.search("lock_timeout"))
    with KnowledgeBase.open_or_build(mini_docs, cache) as again:
        assert not again.built

    page = mini_docs / "runtime-config-client.html"
    page.write_text(MINI_PAGE.replace("acquire a lock", "acquire a zebra lock"), "utf-8")
    os.utime(page, ns=(page.stat().st_atime_ns, page.stat().st_mtime_ns + 10**9))
    with KnowledgeBase.open_or_build(mini_docs, cache) as rebuilt:
        assert rebuilt.built
        assert rebuilt.search("zebra", k=1)[0].source.endswith("#GUC-LOCK-TIMEOUT")
    with KnowledgeBase.open_or_build(mini_docs, cache, rebuild=True) as forced:
        assert forced.built


def test_python_fallback_backend(mini_docs: Path, tmp_path: Path) -> None:
    with KnowledgeBase.open_or_build(mini_docs, tmp_path, backend="python") as base:
        assert base.backend == "python"
        assert base.search("lock_timeout", k=1)[0].source.endswith("#GUC-LOCK-TIMEOUT")
        assert base.search("statement timeout", k=1)[0].source.endswith("#GUC-STATEMENT-TIMEOUT")
        for query in WEIRD_QUERIES:
            assert isinstance(base.search(query, k=2), list)


@pytest.mark.skipif(not fts5_available(), reason="SQLite without FTS5")
def test_fts5_backend_selected_by_default(mini_docs: Path, tmp_path: Path) -> None:
    with KnowledgeBase.open_or_build(mini_docs, tmp_path) as base:
        assert base.backend == "fts5"
        assert base.meta["fts5"] == "1"


def test_newest_doc_dir_preferred(tmp_path: Path, mini_docs: Path) -> None:
    for version in ("16", "9"):
        target = tmp_path / f"postgresql-doc-{version}" / "html"
        shutil.copytree(mini_docs, target)
    found = find_doc_dir(pattern=str(tmp_path / "postgresql-doc-*" / "html"))
    assert found == (tmp_path / "postgresql-doc-16" / "html").resolve()
    assert find_doc_dir(mini_docs) == mini_docs.resolve()  # explicit path wins


def test_missing_docs_raise_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeUnavailable, match="postgresql-doc-15"):
        find_doc_dir(pattern=str(tmp_path / "postgresql-doc-*" / "html"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(KnowledgeUnavailable, match="not found"):
        KnowledgeBase.open_or_build(empty, tmp_path / "cache")


def test_tool_handler(mini_docs: Path, tmp_path: Path) -> None:
    tool = knowledge_tool(doc_dir=mini_docs, cache_dir=tmp_path)
    assert tool.spec.name == "query_knowledge_base"
    assert tool.spec.read_only
    assert tool.spec.parameters["required"] == ["query"]

    result = anyio.run(tool.handler, {"query": "lock_timeout", "k": 2})
    assert result.ok
    assert "runtime-config-client.html#GUC-LOCK-TIMEOUT" in result.observation
    assert result.detail["hits"][0]["source"] == "runtime-config-client.html#GUC-LOCK-TIMEOUT"

    bad = anyio.run(tool.handler, {"k": 2})
    assert not bad.ok and bad.error and "query" in bad.error

    missing = knowledge_tool(doc_dir=tmp_path / "nowhere", cache_dir=tmp_path)
    unavailable = anyio.run(missing.handler, {"query": "lock_timeout"})
    assert (
        not unavailable.ok and unavailable.error and "documentation not found" in unavailable.error
    )


def test_the_corpus_is_described_by_version_pages_and_content(mini_docs: Path) -> None:
    corpus = describe_corpus(mini_docs)
    assert corpus.available and corpus.source == "postgresql-manual"
    assert corpus.version == "15.99" and corpus.pages == 2  # bookindex.html is skipped
    assert corpus.content_sha256 is not None
    assert describe_corpus(mini_docs) == corpus  # stable
    page = mini_docs / "runtime-config-client.html"
    page.write_text(page.read_text().replace("Abort any", "Cancel any"), encoding="utf-8")
    assert describe_corpus(mini_docs).content_sha256 != corpus.content_sha256
    assert "15.99 (2 pages, sha256 " in corpus.summary()


def test_without_documentation_the_corpus_says_why(tmp_path: Path) -> None:
    corpus = describe_corpus(tmp_path / "nothing-here")
    assert not corpus.available and corpus.pages == 0 and corpus.reason
    assert corpus.summary().startswith("none (")


def test_kb_command_shows_the_corpus_and_builds_its_index(
    mini_docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from dbaops.cli import app

    monkeypatch.setenv("DBAOPS_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    shown = runner.invoke(app, ["kb", "--doc-dir", str(mini_docs)])
    assert shown.exit_code == 0, shown.output
    assert "postgresql-manual 15.99 (2 pages" in shown.output and "index:" not in shown.output
    built = runner.invoke(app, ["kb", "--doc-dir", str(mini_docs), "--build"])
    assert built.exit_code == 0, built.output
    assert "(built, " in built.output and list((tmp_path / "cache" / "kb").glob("*.sqlite"))
    again = runner.invoke(app, ["kb", "--doc-dir", str(mini_docs), "--build"])
    assert "(current, " in again.output
    missing = runner.invoke(app, ["kb", "--doc-dir", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "corpus: none (" in missing.output
