"""PostgreSQL: the engine behind ``engine: postgres`` (see :mod:`dbaops.dbms.postgres.engine`)."""
