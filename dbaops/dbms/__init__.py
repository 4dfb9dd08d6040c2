"""Database engines behind one seam (the DBMS a scenario runs on, ``engine:`` in its file).

- :mod:`dbaops.dbms.interface`: what every engine provides (:class:`DatabaseEngine`,
  :class:`DatabaseServer`);
- :mod:`dbaops.dbms.registry`: engines by name (``get_engine("postgres")``);
- :mod:`dbaops.dbms.postgres`: PostgreSQL (:mod:`dbaops.dbms.postgres.engine`), its embedded
  cluster, endpoints, metric sampler, agent role and server-log format.
"""
