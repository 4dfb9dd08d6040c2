"""Deterministic safety judge (DBA-Bench S_s): an engine-neutral core and SQL front ends.

The core judges a neutral statement form; a front end per SQL dialect produces it. Core
modules (none imports a SQL parser):

* :mod:`~.models`: the judge's inputs and outputs (actions, context, verdict);
* :mod:`~.statement`: executed statements with their session state (:class:`Stmt`) and a
  parsed trajectory (:class:`ParsedTrace`);
* :mod:`~.facts`: what a statement does (table operations, setting, privilege, role and
  sequence changes, function calls, ``COPY`` targets, signal targets, drops...);
* :mod:`~.targets`: signal targets as DNF of atoms over session identities, and the
  decisions on them;
* :mod:`~.effects`: the sessions a signalling call hit, according to the server log;
* :mod:`~.values`: constants, GUC booleans and quantities, evidence text;
* :mod:`~.names`: the names a scenario declares, and table sets matched against statements;
* :mod:`~.rules`: the declarative rules, reading statement facts only;
* :mod:`~.judge`: the global rules G1-G14 and :func:`judge_safety`;
* :mod:`~.state`: safety on what changed in the catalog (G12-G14);
* :mod:`~.contract`: the scenario's safety contract and a run's trace as the judge's input;
* :mod:`~.frontend`: the :class:`SqlFrontEnd` protocol and the registry by dialect.

Front ends: :mod:`~.postgres` (the PostgreSQL front end, on libpg_query's grammar),
registered as ``postgres``, the default.
"""

from __future__ import annotations

from dbaops.evaluation.safety.contract import (
    SafetyContract,
    actions_from_trace,
    context_from_trace,
    judge_run_safety,
    parse_server_signals,
    scenario_changed_gucs,
    scenario_changed_role_gucs,
)
from dbaops.evaluation.safety.frontend import (
    DEFAULT_DIALECT,
    SqlFrontEnd,
    dialects,
    front_end,
    register,
)
from dbaops.evaluation.safety.judge import global_rules, judge_safety, parse_actions, parse_rules
from dbaops.evaluation.safety.models import (
    Action,
    BackendSnapshot,
    DestructiveOp,
    InstanceAction,
    SafetyContext,
    SafetyVerdict,
    ServerSignal,
    SessionRef,
    SignalEffect,
    SignalHit,
    SqlAction,
    UnparsedSql,
    Violation,
    ViolationType,
)
from dbaops.evaluation.safety.rules import (
    AgentBlockingRule,
    DangerousSettingsRule,
    DdlWithoutLockTimeoutRule,
    DestructiveOnTablesRule,
    DropObjectsRule,
    FkWithoutNotValidRule,
    ForbiddenFunctionRule,
    ForbiddenGrantRule,
    GlobalGucThresholdRule,
    GucForbiddenRule,
    GucOutsideAllowedRule,
    InstanceActionForbiddenRule,
    LargeDmlRule,
    NonConcurrentIndexRule,
    NonConcurrentRefreshRule,
    ProtectedSessionSignalRule,
    RevokeFromRolesRule,
    RoleAttributeChangeRule,
    Rule,
    SequenceChangeRule,
    ServerFileAccessRule,
    TerminateOutsideCausalSetRule,
    VacuumFullOrClusterRule,
)
from dbaops.evaluation.safety.statement import ParsedTrace, Stmt

__all__ = [
    "DEFAULT_DIALECT",
    "Action",
    "BackendSnapshot",
    "DangerousSettingsRule",
    "DdlWithoutLockTimeoutRule",
    "DestructiveOnTablesRule",
    "DestructiveOp",
    "DropObjectsRule",
    "FkWithoutNotValidRule",
    "ForbiddenFunctionRule",
    "ForbiddenGrantRule",
    "GlobalGucThresholdRule",
    "GucForbiddenRule",
    "GucOutsideAllowedRule",
    "InstanceAction",
    "InstanceActionForbiddenRule",
    "LargeDmlRule",
    "NonConcurrentIndexRule",
    "NonConcurrentRefreshRule",
    "ParsedTrace",
    "ProtectedSessionSignalRule",
    "RevokeFromRolesRule",
    "RoleAttributeChangeRule",
    "Rule",
    "SafetyContext",
    "SafetyContract",
    "SafetyVerdict",
    "SequenceChangeRule",
    "AgentBlockingRule",
    "ServerFileAccessRule",
    "ServerSignal",
    "SessionRef",
    "SignalEffect",
    "SignalHit",
    "SqlAction",
    "SqlFrontEnd",
    "Stmt",
    "TerminateOutsideCausalSetRule",
    "UnparsedSql",
    "VacuumFullOrClusterRule",
    "Violation",
    "ViolationType",
    "actions_from_trace",
    "context_from_trace",
    "dialects",
    "front_end",
    "global_rules",
    "judge_run_safety",
    "judge_safety",
    "parse_actions",
    "parse_rules",
    "parse_server_signals",
    "register",
    "scenario_changed_gucs",
    "scenario_changed_role_gucs",
]
