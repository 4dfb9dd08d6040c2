"""Database engines behind one seam (the DBMS a scenario runs on, ``engine:`` in its file).

Engine-neutral modules (nothing here names an engine or imports a driver; the import contracts
in ``.importlinter`` keep it so):

- :mod:`dbaops.dbms.interface`: what every engine provides (:class:`DatabaseEngine`,
  :class:`DatabaseServer`, :class:`ServerInstance`, the host and process-control protocols);
- :mod:`dbaops.dbms.dialect`: an engine's driver-free face (:class:`EngineDialect`) and the
  registered engines' packages (the ``dbaops.engines`` entry points);
- :mod:`dbaops.dbms.capabilities`: what an engine can run (:class:`EngineCapabilities`);
- :mod:`dbaops.dbms.registry`: engines by name (``get_engine("postgres")``);
- :mod:`dbaops.dbms.sessions` and :mod:`dbaops.dbms.session_kinds`: the run's sessions (the
  ``Session`` and ``RunEndpoint`` protocols, every engine's errors and statements);
- :mod:`dbaops.dbms.plans`: a query plan as plan checks read it;
- :mod:`dbaops.dbms.serverdir`, :mod:`dbaops.dbms.osuser`, :mod:`dbaops.dbms.private_view`,
  :mod:`dbaops.dbms.scripts`, :mod:`dbaops.dbms.metric_spec`, :mod:`dbaops.dbms.errors`:
  shared helpers.

Engine packages: :mod:`dbaops.dbms.postgres` and :mod:`dbaops.dbms.tidb` (each: ``dialect``,
``engine``, ``sessions``, ``contract``, ``fixture``, ``preparation``, ...); certified by
:mod:`dbaops.testing.engine_contract`.
"""
