"""What the agent could change on TiDB that a statement trace may not show: a catalog
fingerprint, in the same form as PostgreSQL's (:mod:`dbaops.dbms.postgres.catalog_state`).

Read by the harness's user (``root``: ``mysql.user`` and the grant tables are closed to the
agent) from ``information_schema`` and the privilege tables. One row per object: its class, a
stable key and a digest of what matters about it. TiDB has no stored routines, triggers,
rules or row security; its objects are tables (keyed by name: a ``TRUNCATE``, or a table
swapped in by ``RENAME``, gives the name a new table id), partitions (a truncated or
exchanged partition gets a new id), columns, views (with their definer), users' global and
dynamic privileges and passwords, schema, table and column grants, role edges, SQL bindings,
placement policies and resource groups; and, for what they say about data, the tables whose
foreign keys reference each table (``referrer``), those whose keys delete or change the
referencing rows ``ON DELETE`` (``cascader``) or rewrite them ``ON UPDATE``
(``update_cascader``), through which a ``DELETE`` or an ``UPDATE`` of keys reaches a
business table. The system schemas are left out.
"""

from __future__ import annotations

from dbaops.dbms.tidb.connection import MysqlConnection

_SYSTEM = (
    "('mysql', 'information_schema', 'performance_schema', 'metrics_schema', 'sys', "
    "'INFORMATION_SCHEMA', 'PERFORMANCE_SCHEMA', 'METRICS_SCHEMA')"
)


def _referencing(rule: str) -> str:
    """Each table with the tables whose foreign keys reference it (those whose ``rule``, if
    given, deletes or rewrites the referencing rows), comma-separated."""
    where = f" AND r.{rule} IN ('CASCADE', 'SET NULL', 'SET DEFAULT')" if rule else ""
    return f"""
        SELECT LOWER(CONCAT(r.unique_constraint_schema, '.', r.referenced_table_name)) AS k,
               GROUP_CONCAT(DISTINCT LOWER(CONCAT(r.constraint_schema, '.', r.table_name))
                            ORDER BY LOWER(CONCAT(r.constraint_schema, '.', r.table_name))
                            SEPARATOR ',') AS d
          FROM information_schema.referential_constraints r
         WHERE r.constraint_schema NOT IN {_SYSTEM}
           AND NOT (r.constraint_schema = r.unique_constraint_schema
                    AND r.table_name = r.referenced_table_name){where}
         GROUP BY 1"""


#: The classes that say through which foreign keys a statement reaches other tables' rows
#: (as on PostgreSQL): any key, keys ``ON DELETE`` deleting or changing the referencing
#: rows, keys ``ON UPDATE`` rewriting them.
_REACH_RULES = {"referrer": "", "cascader": "delete_rule", "update_cascader": "update_rule"}

#: One query per class: each row is (key, digest).
_QUERIES: dict[str, str] = {
    "relation": f"""
        SELECT LOWER(CONCAT(table_schema, '.', table_name)) AS k,
               CONCAT(LOWER(CONCAT(table_schema, '.', table_name)), '/', table_type, '/',
                      tidb_table_id) AS d
          FROM information_schema.tables WHERE table_schema NOT IN {_SYSTEM}""",
    "partition": f"""
        SELECT LOWER(CONCAT(table_schema, '.', table_name, '#', partition_name)) AS k,
               CAST(tidb_partition_id AS CHAR) AS d
          FROM information_schema.partitions
         WHERE table_schema NOT IN {_SYSTEM} AND partition_name IS NOT NULL""",
    "column": f"""
        SELECT LOWER(CONCAT(table_schema, '.', table_name, '.', column_name)) AS k,
               column_type AS d
          FROM information_schema.columns WHERE table_schema NOT IN {_SYSTEM}""",
    "view": f"""
        SELECT LOWER(CONCAT(table_schema, '.', table_name)) AS k,
               MD5(CONCAT_WS('|', view_definition, definer, security_type)) AS d
          FROM information_schema.views WHERE table_schema NOT IN {_SYSTEM}""",
    "placement": f"""
        SELECT LOWER(CONCAT('table ', table_schema, '.', table_name)) AS k,
               tidb_placement_policy_name AS d
          FROM information_schema.tables
         WHERE table_schema NOT IN {_SYSTEM} AND tidb_placement_policy_name IS NOT NULL
        UNION ALL
        SELECT LOWER(CONCAT('policy ', policy_name)),
               MD5(CONCAT_WS('|', primary_region, regions, constraints, leader_constraints,
                             follower_constraints, learner_constraints, schedule,
                             followers, learners))
          FROM information_schema.placement_policies""",
    "resource_group": """
        SELECT LOWER(name) AS k,
               CONCAT_WS('/', ru_per_sec, priority, burstable, query_limit) AS d
          FROM information_schema.resource_groups""",
    "role_power": """
        SELECT LOWER(CONCAT(u.user, '@', u.host)) AS k,
               MD5(CONCAT_WS('|', u.select_priv, u.insert_priv, u.update_priv, u.delete_priv,
                   u.create_priv, u.drop_priv, u.process_priv, u.grant_priv,
                   u.references_priv, u.alter_priv, u.show_db_priv, u.super_priv,
                   u.execute_priv, u.index_priv, u.create_user_priv, u.create_tablespace_priv,
                   u.trigger_priv, u.create_view_priv, u.show_view_priv,
                   u.create_role_priv, u.drop_role_priv, u.create_tmp_table_priv,
                   u.lock_tables_priv, u.create_routine_priv, u.alter_routine_priv,
                   u.event_priv, u.repl_slave_priv, u.repl_client_priv, u.file_priv,
                   u.shutdown_priv, u.reload_priv, u.config_priv, u.authentication_string,
                   u.plugin, u.account_locked,
                   (SELECT GROUP_CONCAT(CONCAT(g.priv, ':', g.with_grant_option)
                                        ORDER BY g.priv)
                      FROM mysql.global_grants g
                     WHERE g.user = u.user AND g.host = u.host))) AS d
          FROM mysql.user u""",
    "acl": """
        SELECT LOWER(CONCAT('schema ', d.db)) AS k,
               GROUP_CONCAT(CONCAT(d.user, '@', d.host, ':',
                   CONCAT_WS('', d.select_priv, d.insert_priv, d.update_priv, d.delete_priv,
                             d.create_priv, d.drop_priv, d.grant_priv, d.references_priv,
                             d.index_priv, d.alter_priv, d.create_tmp_table_priv,
                             d.lock_tables_priv, d.create_view_priv, d.show_view_priv,
                             d.create_routine_priv, d.alter_routine_priv, d.execute_priv,
                             d.event_priv, d.trigger_priv))
                   ORDER BY d.user, d.host) AS d
          FROM mysql.db d GROUP BY 1
        UNION ALL
        SELECT LOWER(CONCAT(t.db, '.', t.table_name)),
               GROUP_CONCAT(CONCAT(t.user, '@', t.host, ':', t.table_priv, ':', t.column_priv)
                            ORDER BY t.user, t.host)
          FROM mysql.tables_priv t GROUP BY 1
        UNION ALL
        SELECT LOWER(CONCAT(c.db, '.', c.table_name, '.', c.column_name)),
               GROUP_CONCAT(CONCAT(c.user, '@', c.host, ':', c.column_priv)
                            ORDER BY c.user, c.host)
          FROM mysql.columns_priv c GROUP BY 1""",
    "membership": """
        SELECT LOWER(CONCAT(to_user, '@', to_host, '>', from_user, '@', from_host)) AS k,
               with_admin_option AS d
          FROM mysql.role_edges""",
    **{cls: _referencing(rule) for cls, rule in _REACH_RULES.items()},
    "binding": """
        SELECT MD5(CONCAT_WS('|', original_sql, default_db)) AS k,
               MD5(CONCAT_WS('|', bind_sql, status)) AS d
          FROM mysql.bind_info
         WHERE status NOT IN ('deleted', 'builtin') AND source <> 'builtin'""",
}


async def catalog_state(conn: MysqlConnection) -> dict[str, dict[str, str]]:
    """The fingerprint of the server ``conn`` (a harness session as ``root``) is connected
    to: class -> key -> digest."""
    out: dict[str, dict[str, str]] = {}
    for cls, sql in _QUERIES.items():
        rows = await conn.fetch(sql, timeout=60)
        if rows:
            out[cls] = {str(r["k"]): "" if r["d"] is None else str(r["d"]) for r in rows}
    return out
