"""The run record: everything a run leaves behind, and the one way to read it back.

- :mod:`dbaops.record.kinds`: every kind of trace record (the lines of ``trace.jsonl``);
- :mod:`dbaops.record.layout`: the run directory's layout, every file name spelled once;
- :mod:`dbaops.record.trace`: the fsyncing trace writer and its readers;
- :mod:`dbaops.record.tables`: the Parquet schemas (SLO samples, metrics) and crash-safe parts;
- :mod:`dbaops.record.cost`: the run's Token Cost, aggregated once;
- :mod:`dbaops.record.load`: ``load_run(path)``, the typed view scoring, replay, plots and
  reports read.
"""
