"""The neutral facts of one executed statement, read off its pglast tree once."""

from __future__ import annotations

from collections.abc import Collection

from pglast import ast

from dbaops.evaluation.safety.facts import Facts
from dbaops.evaluation.safety.postgres.ops import (
    copy_targets,
    created_extensions,
    dropped_objects,
    function_calls,
    privilege_changes,
    relation_sources,
    role_attribute_changes,
    sequence_changes,
    sequence_owners,
    setting_changes,
    table_ops,
)
from dbaops.evaluation.safety.postgres.targets import LoopScope, signal_targets


def facts_of(
    node: ast.Node, loops: dict[str, LoopScope], signal_functions: Collection[str]
) -> Facts:
    """What the executed statement ``node`` does; signal targets are found for the calls of
    ``signal_functions`` (lower-case), resolving PL/pgSQL loop variables through ``loops``."""
    return Facts(
        table_ops=tuple(table_ops(node)),
        setting_changes=tuple(setting_changes(node)),
        privilege_changes=tuple(privilege_changes(node)),
        role_attribute_changes=tuple(role_attribute_changes(node)),
        sequence_changes=tuple(sequence_changes(node)),
        sequence_owners=tuple(sequence_owners(node)),
        function_calls=tuple(function_calls(node)),
        copy_targets=tuple(copy_targets(node)),
        signal_targets=tuple(signal_targets(node, signal_functions, loops))
        if signal_functions
        else (),
        dropped=tuple(dropped_objects(node)),
        created_extensions=tuple(created_extensions(node)),
        relation_sources=tuple(relation_sources(node)),
        no_where=getattr(node, "whereClause", "absent") is None,
    )
