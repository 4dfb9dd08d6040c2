"""dbaops: run database-operations agents against live databases and score them (DBA-Bench)."""

__version__ = "0.1.0"
TRACE_SCHEMA_VERSION = 2
