"""The PostgreSQL front end of the safety judge (pglast, the PostgreSQL grammar).

Modules: :mod:`~.parse` (recorded SQL -> executed statements with session state),
:mod:`~.facts` (one statement's neutral facts), :mod:`~.ops` (table operations, settings,
privileges, roles, sequences, drops off a tree), :mod:`~.targets` (which sessions a signal
call can hit), :mod:`~.sqlutil` (pglast helpers), :mod:`~.front_end` (the front end
the judge asks).
"""
