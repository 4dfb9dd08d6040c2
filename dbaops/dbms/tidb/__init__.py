"""TiDB: the engine behind ``engine: tidb`` (see :mod:`dbaops.dbms.tidb.engine`)."""
