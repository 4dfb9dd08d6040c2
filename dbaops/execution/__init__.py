"""The run executor: one scenario run end to end (:mod:`dbaops.execution.runner`), its
preparation, event program, fault actors, checks, metric queries and validation. It names no
database engine: what differs per engine comes through :mod:`dbaops.dbms`."""
