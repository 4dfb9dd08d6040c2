"""An append-only JSONL store of diagnosis judgments (the judge's cache and its record).

One line per judgment: a ``ConditionJudgment`` as JSON with its provenance (time, judge model
and id, prompt version and hash, request hash, usage, cost, raw answer). Lines are never
rewritten: a second judge model adds lines beside the first one's.

Cache key (``judgment_key``): sha256 of the canonical JSON of
``{report_hash, condition_hash, kind, judge_model, judge_model_id, prompt_version}`` - the
rendered reports, the normalized condition, whether it is asked as a required or a
contradictory condition (the question differs), the judge (registry name and provider model
id) and the prompt version.

Reading: a line that is not a valid judgment (e.g. the torn last line of a writer that was
killed mid-write) is skipped and counted in ``JudgmentStore.bad_lines``. Lines with
``final = false`` (judge unavailable) are kept for the record but never served. When several
final lines share a key (two scorers raced, or an unknown was asked again), the first resolved
(yes/no) line wins, else the first line - so a verdict never changes once resolved.

Writing: each judgment is one ``write`` of one full line on a file opened with ``O_APPEND``,
under an exclusive ``flock`` (POSIX), followed by ``fsync``; if the file does not end with a
newline (a torn line), the new line starts with one so it stays intact.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

from pydantic import ValidationError

from dbaops.evaluation.diagnosis_models import ConditionJudgment, ConditionKind
from dbaops.models.client import sha256_json
from dbaops.models.registry import ModelSpec
from dbaops.record.layout import JUDGMENTS_FILE

try:  # POSIX only; elsewhere O_APPEND alone orders the writes
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


def judgment_key(
    *,
    report_hash: str,
    condition_hash: str,
    kind: ConditionKind,
    judge_model: str,
    judge_model_id: str,
    prompt_version: str,
) -> str:
    return sha256_json(
        {
            "report_hash": report_hash,
            "condition_hash": condition_hash,
            "kind": kind,
            "judge_model": judge_model,
            "judge_model_id": judge_model_id,
            "prompt_version": prompt_version,
        }
    )


JudgeSelector = str | ModelSpec | None


def judge_matches(j: ConditionJudgment, judge: JudgeSelector) -> bool:
    """``judge``: None (any), a ``ModelSpec`` (its name and model id), or a string matching
    the registry name, the provider model id, or ``"name:model_id"``."""
    if judge is None:
        return True
    if isinstance(judge, ModelSpec):
        return j.judge_model == judge.name and j.judge_model_id == judge.model
    return judge in (j.judge_model, j.judge_model_id, f"{j.judge_model}:{j.judge_model_id}")


def select_final(lines: Iterable[ConditionJudgment]) -> dict[str, ConditionJudgment]:
    """Per key, the line to use: the first resolved final line, else the first final line."""
    out: dict[str, ConditionJudgment] = {}
    for j in lines:
        if not j.final:
            continue
        cur = out.get(j.key)
        if cur is None or (not cur.resolved and j.resolved):
            out[j.key] = j
    return out


class JudgmentStore:
    """A JSONL file of judgments. ``path`` may be the file or a directory (then
    ``<dir>/judgments.jsonl``, e.g. a run directory or a global cache directory)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        p = Path(path)
        if p.is_dir():
            p = p / JUDGMENTS_FILE
        self.path = p
        self.bad_lines = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JudgmentStore({str(self.path)!r})"

    @classmethod
    def of(cls, store: JudgmentStore | str | os.PathLike[str]) -> JudgmentStore:
        return store if isinstance(store, JudgmentStore) else cls(store)

    def read(self) -> list[ConditionJudgment]:
        """Every valid line in file order (final or not); ``cached`` is set on each."""
        self.bad_lines = 0
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out: list[ConditionJudgment] = []
        for raw in data.split(b"\n"):
            if not raw.strip():
                continue
            try:
                j = ConditionJudgment.model_validate_json(raw)
            except (ValidationError, ValueError):
                self.bad_lines += 1
                continue
            j.cached = True
            out.append(j)
        return out

    def append(self, judgment: ConditionJudgment) -> None:
        """Append one line (flush + fsync). Safe across threads and processes."""
        line = judgment.model_dump_json().encode("utf-8") + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # keep a torn previous line from swallowing ours
                view = memoryview(line)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            finally:
                if fcntl is not None:
                    with suppress(OSError):
                        fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def final(self, judge: JudgeSelector = None) -> dict[str, ConditionJudgment]:
        """The judgments to serve, by key (see ``select_final``), of the selected judge."""
        return select_final(j for j in self.read() if judge_matches(j, judge))


def load_judgments(
    store: JudgmentStore | str | os.PathLike[str],
    judge: JudgeSelector = None,
    *,
    include_provisional: bool = False,
) -> list[ConditionJudgment]:
    """The judgments of a store for one judge (``judge``: see ``judge_matches``; None: all
    judges). By default one line per key as served from the cache (``select_final``), in
    file order; ``include_provisional=True`` returns every valid line instead, non-final
    ones included."""
    s = JudgmentStore.of(store)
    lines = [j for j in s.read() if judge_matches(j, judge)]
    if include_provisional:
        return lines
    chosen = {id(j) for j in select_final(lines).values()}
    return [j for j in lines if id(j) in chosen]
