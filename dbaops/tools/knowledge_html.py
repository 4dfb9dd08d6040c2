"""Split PostgreSQL's DocBook-generated HTML manual into focused, searchable sections.

The manual shipped by Debian's ``postgresql-doc-NN`` packages is XHTML produced by the
DocBook XSL stylesheets.  Every page nests ``<div class="sect1">``/``sect2``/... (or, on
reference pages, ``refentry``/``refsect1``/``refsect2``) blocks, each with an ``id`` anchor
and a heading.  :func:`parse_page` turns one page into :class:`DocSection` records:

* one per section, holding only the section's *own* text (sub-sections are records of
  their own);
* one per anchored table (``<div class="table" id=...>``: view columns, wait events,
  function lists, ...);
* one per identified variable-list entry (``<dt id=...>`` + its ``<dd>``), most importantly
  the configuration parameters (``<dt id="GUC-LOCK-TIMEOUT">``) of the runtime-config pages,
  which agents look up by name; their text is not repeated in the enclosing section;
* one per function or view-column row of the reference tables (``func_table_entry`` /
  ``catalog_table_entry`` cells); their text also stays in the table's record.

Only the standard library's :mod:`html.parser` is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["DocSection", "TITLE_SEPARATOR", "parse_page"]

TITLE_SEPARATOR = " › "

# DocBook containers that become sections of their own.
_SECTION_CLASSES = frozenset(
    {
        "book",
        "part",
        "reference",
        "chapter",
        "appendix",
        "preface",
        "partintro",
        "sect1",
        "sect2",
        "sect3",
        "sect4",
        "sect5",
        "section",
        "simplesect",
        "refentry",
        "refsynopsisdiv",
        "refsect1",
        "refsect2",
        "refsect3",
        "glossary",
        "bibliography",
    }
)
# Formal tables with an anchor (column lists of views, wait events, function lists, ...).
_TABLE_CLASSES = frozenset({"table", "informaltable"})
# Table cells documenting one function or one view/catalog column; each also becomes a record.
_ROW_CELL_CLASSES = frozenset({"func_table_entry", "catalog_table_entry"})
_ROW_TITLE_CLASSES = frozenset({"func_signature", "column_definition"})
# Navigation chrome and machine-made lists whose text would only add noise.
_SKIP_DIV_CLASSES = frozenset({"navheader", "navfooter", "toc", "list-of-tables", "index"})
_SKIP_TAGS = frozenset({"script", "style"})
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "dl",
        "dt",
        "dd",
        "ul",
        "ol",
        "li",
        "pre",
        "table",
        "tr",
        "blockquote",
        "br",
        "hr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
    }
)
_CELL_TAGS = frozenset({"td", "th"})
_MAX_TITLE = 160
_WS = re.compile(r"[ \t\r\f\v\u00a0]+")


@dataclass
class DocSection:
    """One indexable unit of the manual.

    Attributes:
        page: HTML file name inside the documentation directory, e.g. ``sql-createindex.html``.
        anchor: ``id`` of the section or entry (``""`` for a page without anchors).
        title: the unit's own heading, e.g. ``lock_timeout (integer)``.
        context: headings of the enclosing sections on the same page, outermost first.
        body: the unit's own plain text, paragraphs separated by newlines.
        kind: ``"section"`` (a heading-delimited section or an anchored table), ``"entry"``
            (an identified list entry such as a GUC) or ``"row"`` (one function or column row
            of a table; its text also stays in the table's record).
    """

    page: str
    anchor: str
    title: str
    context: list[str]
    body: str
    kind: str = "section"

    @property
    def source(self) -> str:
        """``page#anchor`` (or just the page when there is no anchor)."""
        return f"{self.page}#{self.anchor}" if self.anchor else self.page

    @property
    def title_chain(self) -> str:
        """Enclosing headings and the own title joined by :data:`TITLE_SEPARATOR`."""
        return TITLE_SEPARATOR.join([*self.context, self.title])


@dataclass
class _Frame:
    kind: str  # "page", "section", "entry" or "row"
    anchor: str
    depth: int  # tag-stack depth of the element that opened the frame
    parent: _Frame | None
    title: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    has_title: bool = False
    has_child: bool = False
    # Entry frames: "dt" while reading the term, "gap" after it, "dd" inside the definition.
    phase: str = ""


def _clean(parts: list[str]) -> str:
    """Join text pieces, collapse runs of blanks and drop empty lines."""
    lines = []
    for line in "".join(parts).split("\n"):
        line = _WS.sub(" ", line).strip()
        if line:
            lines.append(line)
    return "\n".join(lines)


class _ManualParser(HTMLParser):
    """Stream parser collecting :class:`DocSection` records for one page."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page = page
        self.sections: list[DocSection] = []
        self.page_title: list[str] = []
        self._stack: list[str] = []
        self._skip_depth: int | None = None  # depth of the element being skipped
        self._in_title_tag = False
        self._heading_depth: int | None = None  # depth of a heading captured as title
        self._root = _Frame(kind="page", anchor="", depth=0, parent=None)
        self._frame = self._root

    # -- helpers ---------------------------------------------------------------------------

    def _emit(self, text: str) -> None:
        frame = self._frame
        if frame.kind == "entry" and frame.phase == "dt":
            frame.title.append(text)
        elif self._heading_depth is not None:
            frame.title.append(text)
        else:
            frame.body.append(text)
        if frame.kind == "row" and frame.parent is not None:
            frame.parent.body.append(text)  # rows stay part of their table's text too

    def _push(self, kind: str, anchor: str, depth: int) -> None:
        self._frame.has_child = True
        self._frame = _Frame(
            kind=kind, anchor=anchor or self._frame.anchor, depth=depth, parent=self._frame
        )

    def _context(self, frame: _Frame) -> list[str]:
        chain: list[str] = []
        node = frame.parent
        while node is not None:
            if node.kind != "page":
                title = _clean(node.title).replace("\n", " ")
                if title and (not chain or chain[0] != title):
                    chain.insert(0, title)
            node = node.parent
        return chain

    def _pop(self) -> None:
        frame = self._frame
        assert frame.parent is not None
        self._frame = frame.parent
        self._finish(frame)

    def _finish(self, frame: _Frame) -> None:
        title = _clean(frame.title).replace("\n", " ")
        body = _clean(frame.body)
        if frame.kind == "page":
            title = title or _clean(self.page_title)
        if not title or not body:
            return
        if len(title) > _MAX_TITLE:  # e.g. a psql meta-command's full synopsis
            title = title[: title.rfind(" ", 0, _MAX_TITLE) if " " in title else _MAX_TITLE]
            title = title.rstrip() + " …"
        self.sections.append(
            DocSection(
                page=self.page,
                anchor=frame.anchor,
                title=title,
                context=self._context(frame) if frame.kind != "page" else [],
                body=body,
                kind=frame.kind if frame.kind in ("entry", "row") else "section",
            )
        )

    # -- HTMLParser callbacks --------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open(tag, attrs, selfclosing=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open(tag, attrs, selfclosing=True)

    def _open(self, tag: str, attrs: list[tuple[str, str | None]], selfclosing: bool) -> None:
        if self._skip_depth is not None:
            if not selfclosing:
                self._stack.append(tag)
            return
        attr = {k: v or "" for k, v in attrs}
        classes = set(attr.get("class", "").split())
        depth = len(self._stack)
        if tag == "title" and not selfclosing:
            self._in_title_tag = True
        if tag in _BLOCK_TAGS:
            self._emit("\n")
        elif tag in _CELL_TAGS:
            self._emit(" ")
        if selfclosing:
            return
        self._stack.append(tag)
        if tag in _SKIP_TAGS or (tag == "div" and classes & _SKIP_DIV_CLASSES):
            self._skip_depth = depth
            return
        frame = self._frame
        # An entry frame ends when its definition is followed by a sibling.
        if frame.kind == "entry" and frame.phase == "gap" and depth == frame.depth:
            if tag == "dd":
                frame.phase = "dd"
                return
            self._pop()
            frame = self._frame
        if tag == "div" and (
            classes & _SECTION_CLASSES or (classes & _TABLE_CLASSES and attr.get("id"))
        ):
            self._push("section", attr.get("id", ""), depth)
        elif tag == "dt" and attr.get("id") and not attr["id"].startswith("id-"):
            self._push("entry", attr["id"], depth)
            self._frame.phase = "dt"
        elif tag == "td" and classes & _ROW_CELL_CLASSES:
            self._push("row", "", depth)
        elif (
            (
                (tag in _HEADINGS or (tag == "p" and "title" in classes))
                and frame.kind in ("section", "page")
            )
            or (tag == "p" and classes & _ROW_TITLE_CLASSES and frame.kind == "row")
        ) and (self._heading_depth is None and not frame.has_title and not frame.has_child):
            self._heading_depth = depth
            frame.has_title = True

    def handle_endtag(self, tag: str) -> None:
        if tag not in self._stack:
            return  # stray end tag
        while self._stack:
            open_tag = self._stack.pop()
            self._close(open_tag)
            if open_tag == tag:
                break

    def _close(self, tag: str) -> None:
        depth = len(self._stack)
        if self._skip_depth is not None:
            if depth == self._skip_depth:
                self._skip_depth = None
            return
        if tag == "title":
            self._in_title_tag = False
        if tag in _BLOCK_TAGS:
            self._emit("\n")
        if self._heading_depth is not None and depth == self._heading_depth:
            self._heading_depth = None
        frame = self._frame
        if frame.kind == "entry" and depth == frame.depth:
            if frame.phase == "dt":
                frame.phase = "gap"
            elif frame.phase == "dd":
                self._pop()
        elif frame.kind == "entry" and depth < frame.depth:
            self._pop()  # the enclosing list closed
            frame = self._frame
        if frame.kind in ("section", "row") and depth == frame.depth:
            self._pop()

    def handle_data(self, data: str) -> None:
        if self._in_title_tag:
            self.page_title.append(data)
            return
        if self._skip_depth is not None:
            return
        if "pre" in self._stack:
            self._emit(data)
        else:
            self._emit(data.replace("\n", " "))

    def close(self) -> None:
        super().close()
        while self._frame.parent is not None:
            self._pop()
        self._finish(self._root)


def parse_page(page: str, html: str) -> list[DocSection]:
    """Parse one manual page into its sections and identified list entries.

    Args:
        page: file name used as the ``source`` of every record, e.g. ``runtime-config-locks.html``.
        html: the page's markup.

    Returns:
        Records in document order of completion (entries before their enclosing section).
    """
    parser = _ManualParser(page)
    parser.feed(html)
    parser.close()
    return parser.sections
