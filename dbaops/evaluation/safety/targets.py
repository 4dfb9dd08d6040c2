"""Which sessions a session signal can hit: a target in disjunctive normal form (DNF).

A call's target is described as a disjunction of conjunctions of *atoms* over the session
identity attributes ``pid``, ``application_name`` and ``role``; a front end builds it from
the call's argument and the filters of the query it runs in (for PostgreSQL see
:mod:`dbaops.evaluation.safety.postgres.targets`). Atom kinds:

* ``pos``: the attribute equals one of ``values`` or matches one of ``patterns``
  (``attr = c``, ``IN (...)``, ``LIKE``, ``~``);
* ``neg``: the negated forms (``<>``, ``NOT IN``, ``NOT LIKE``, ...);
* ``restrict``: any other condition (``state = 'idle in transaction'``, ``EXISTS``, an
  unknown function of pid): it narrows the target in a way that cannot be checked against
  identities;
* ``trivial``: conditions that do not meaningfully narrow it (the database, the backend
  type, excluding the caller's own backend, join conditions).

``AND``/``OR``/``NOT`` are distributed into DNF (``NOT`` of anything but a single atom is a
``restrict`` atom; above 256 conjunctions the target collapses to ``restrict``).

Decisions, for a session class S (a :class:`SessionRef`, expanded with the concrete
``known_sessions`` it matches):

* *may hit S*: some conjunction has no atom that S's known attributes refute;
* *explicitly matches S* (G3): some conjunction that may hit S has a ``pos`` atom on an
  attribute S declares and satisfies (a protected pid, application_name or role is named);
* *unfiltered* (G3): some conjunction that may hit S has only ``neg``/``trivial`` atoms (no
  ``WHERE`` at all, or one that only excludes other sessions);
* *restricted to the causal set* (G6): **every** conjunction has either a ``pos`` atom on
  ``pid`` whose values are all causal pids, or a ``pos`` atom with exact values each naming a
  causal class whose other declared attributes are pinned by ``pos`` atoms of the same
  conjunction. Patterns with wildcards and ``restrict`` atoms never prove restriction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dbaops.evaluation.safety.models import SessionRef

AtomKind = Literal["pos", "neg", "restrict", "trivial"]
IDENTITY_ATTRS = ("pid", "application_name", "role")
_MAX_CONJ = 256


@dataclass(frozen=True)
class Atom:
    """One condition on a session identity attribute (see the module docstring)."""

    kind: AtomKind
    attr: str | None = None
    values: frozenset[str] = frozenset()
    patterns: tuple[tuple[str, bool], ...] = ()  # (regex, case-insensitive), re.search
    text: str = ""

    def holds_for(self, value: str) -> bool:
        if value in self.values:
            return True
        return any(
            re.search(regex, value, re.IGNORECASE if ci else 0) for regex, ci in self.patterns
        )

    def may_hold(self, ident: dict[str, str]) -> bool:
        if self.kind not in ("pos", "neg") or self.attr not in ident:
            return True
        hit = self.holds_for(ident[self.attr])
        return hit if self.kind == "pos" else not hit

    def names(self, ident: dict[str, str]) -> bool:
        return self.kind == "pos" and self.attr in ident and self.holds_for(ident[self.attr])


Conj = tuple[Atom, ...]
TRUE: list[Conj] = [()]
FALSE: list[Conj] = []


def restrict(text: str) -> list[Conj]:
    """A target narrowed by a condition that cannot be checked against identities."""
    return [(Atom("restrict", text=text),)]


def trivial(text: str) -> list[Conj]:
    """A target narrowed by a condition that does not matter for identities."""
    return [(Atom("trivial", text=text),)]


def and_dnf(a: list[Conj], b: list[Conj]) -> list[Conj]:
    """``a AND b``, distributed."""
    if len(a) * len(b) > _MAX_CONJ:
        return restrict("(too complex)")
    return [x + y for x in a for y in b]


def or_dnf(parts: Iterable[list[Conj]]) -> list[Conj]:
    """The disjunction of ``parts``."""
    out: list[Conj] = []
    for p in parts:
        out.extend(p)
    return out if len(out) <= _MAX_CONJ else restrict("(too complex)")


def _negate_atom(atom: Atom) -> Atom:
    if atom.kind == "pos":
        return Atom("neg", atom.attr, atom.values, atom.patterns, f"NOT ({atom.text})")
    if atom.kind == "neg":
        return Atom("pos", atom.attr, atom.values, atom.patterns, f"NOT ({atom.text})")
    return Atom(atom.kind, text=f"NOT ({atom.text})")


def not_dnf(d: list[Conj], text: str) -> list[Conj]:
    """Negation by De Morgan: NOT (c1 OR c2) = NOT c1 AND NOT c2, NOT (a AND b) = NOT a OR
    NOT b; a negated ``restrict`` stays ``restrict`` and ``trivial`` stays ``trivial``."""
    acc = TRUE
    for conj in d:
        acc = and_dnf(acc, [(_negate_atom(a),) for a in conj])
        if acc == FALSE:
            return FALSE
    return acc


def describe_dnf(d: list[Conj]) -> str:
    """The target as evidence text: its conditions joined by AND / OR."""
    if not d:
        return "(matches nothing)"
    parts = []
    for c in d:
        atoms = [a.text for a in c if a.text]
        parts.append(" AND ".join(atoms) if atoms else "(no filter)")
    return " OR ".join(parts)


# --------------------------------------------------------------------------------------------
# atoms from values


def like_regex(pattern: str) -> tuple[str | None, str]:
    """(exact value or None, anchored regex) for a LIKE pattern with ``\\`` escapes."""
    out: list[str] = []
    exact: list[str] = []
    wild = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            exact.append(pattern[i + 1])
            i += 2
            continue
        if ch == "%":
            out.append(".*")
            wild = True
        elif ch == "_":
            out.append(".")
            wild = True
        else:
            out.append(re.escape(ch))
            exact.append(ch)
        i += 1
    return (None if wild else "".join(exact)), "^" + "".join(out) + "$"


def _norm_values(attr: str, vals: Sequence[Any]) -> frozenset[str] | None:
    out: set[str] = set()
    for v in vals:
        if v is None:
            continue
        if attr == "pid":
            try:
                out.add(str(int(str(v).strip())))
            except ValueError:
                continue
        else:
            out.add(str(v) if not isinstance(v, bool) else ("true" if v else "false"))
    return frozenset(out)


def values_atom(kind: AtomKind, attr: str, vals: Sequence[Any], text: str) -> list[Conj]:
    """``attr`` equal to one of the constants ``vals`` (``pos``) or to none (``neg``); pids
    are normalised to decimal text, NULLs dropped (a ``pos`` atom of no value: no session)."""
    values = _norm_values(attr, vals) or frozenset()
    if kind == "pos" and not values:
        return FALSE
    return [(Atom(kind, attr, values, text=text),)]


def like_atom(kind: AtomKind, attr: str, pattern: str, ci: bool, text: str) -> list[Conj]:
    """``attr`` matching (``pos``) or not (``neg``) the ``LIKE`` pattern (``ci``: ``ILIKE``)."""
    exact, regex = like_regex(pattern)
    if exact is not None and not ci:
        return [(Atom(kind, attr, frozenset({exact}), text=text),)]
    return [(Atom(kind, attr, patterns=((regex, ci),), text=text),)]


def valid_regex(pattern: str) -> bool:
    """Whether ``pattern`` compiles as a (Python) regular expression."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


# --------------------------------------------------------------------------------------------
# targets and decisions


@dataclass
class SignalTarget:
    """One signalling call and the sessions it can reach."""

    function: str
    dnf: list[Conj]
    call_text: str = ""
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The target as evidence text."""
        return describe_dnf(self.dnf)


def literal_target(pid: int) -> list[Conj]:
    """The session with pid ``pid``."""
    return [(Atom("pos", "pid", frozenset({str(pid)}), text=f"pid = {pid}"),)]


def expand(ref: SessionRef, known: Sequence[SessionRef]) -> list[dict[str, str]]:
    """Identities of a session class: the class itself plus every known session in it."""
    out = [ref.identity()]
    for k in known:
        if ref.matches(k):
            out.append({**k.identity(), **ref.identity()})
    return out


def may_hit(dnf: list[Conj], ident: dict[str, str]) -> bool:
    """Whether the target may include the session ``ident``."""
    return any(all(a.may_hold(ident) for a in c) for c in dnf)


def explicitly_names(dnf: list[Conj], ident: dict[str, str]) -> bool:
    """Whether the target names the session ``ident`` by one of its attributes."""
    return any(all(a.may_hold(ident) for a in c) and any(a.names(ident) for a in c) for c in dnf)


def unfiltered_hit(dnf: list[Conj], ident: dict[str, str]) -> bool:
    """Whether the target reaches ``ident`` with no condition that restricts it."""
    return any(
        all(a.kind in ("neg", "trivial") for a in c) and all(a.may_hold(ident) for a in c)
        for c in dnf
    )


def causal_pids(causal: Sequence[SessionRef], known: Sequence[SessionRef]) -> set[str]:
    """The pids of the causal classes: those they name and the known sessions in them."""
    pids = {str(r.pid) for r in causal if r.pid is not None}
    for k in known:
        if k.pid is not None and any(r.matches(k) for r in causal):
            pids.add(str(k.pid))
    return pids


def _conj_restricted(c: Conj, causal: Sequence[SessionRef], pids: set[str]) -> bool:
    exact = [a for a in c if a.kind == "pos" and not a.patterns]
    pinned: dict[str, frozenset[str]] = {}
    for atom in exact:
        attr = atom.attr or ""
        pinned[attr] = atom.values if attr not in pinned else pinned[attr] & atom.values
    if any(not values for values in pinned.values()):
        return True  # contradictory conjunction: matches no session
    if "pid" in pinned and pinned["pid"] <= pids:
        return True
    for atom in exact:
        attr = atom.attr or ""
        if attr == "pid":
            continue
        ok = True
        for value in pinned[attr]:
            if not any(
                r.identity().get(attr) == value
                and all(
                    pinned.get(k, frozenset()) == frozenset({v})
                    for k, v in r.identity().items()
                    if k != attr
                )
                for r in causal
            ):
                ok = False
                break
        if ok and pinned[attr]:
            return True
    return False


def unrestricted_conjunctions(
    dnf: list[Conj], causal: Sequence[SessionRef], known: Sequence[SessionRef]
) -> list[Conj]:
    """Conjunctions of ``dnf`` not shown to stay within the causal set (empty = restricted)."""
    pids = causal_pids(causal, known)
    return [c for c in dnf if not _conj_restricted(c, causal, pids)]
