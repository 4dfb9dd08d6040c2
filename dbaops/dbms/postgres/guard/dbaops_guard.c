/*
 * dbaops_guard: what a managed PostgreSQL service keeps its administrator role from doing.
 *
 * On PostgreSQL 15 and earlier, CREATEROLE may grant membership in any role that is not a
 * superuser, so a cloud-DBA role could grant itself pg_execute_server_program and run
 * programs as the server's OS user. Managed services patch this; dbaops loads this small
 * utility hook instead (shared_preload_libraries). For a role that is not a superuser it
 * refuses:
 *   - GRANT of a reserved role, or of any role that has a reserved role's privileges
 *     (dbaops_guard.reserved_roles), and CREATE ROLE ... IN ROLE / ALTER GROUP ... ADD USER
 *     that would make such a membership;
 *   - any statement that targets a protected role (dbaops_guard.protected_roles: the
 *     harness's own role): ALTER ROLE, ALTER ROLE ... SET, RENAME, DROP ROLE, GRANT to or of it.
 * PostgreSQL 16 and later need none of this (CREATEROLE grants only roles it administers).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/varlena.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static ProcessUtility_hook_type prev_hook = NULL;
static char *reserved_roles = NULL;
static char *protected_roles = NULL;

static bool
name_in(const char *name, const char *list)
{
	char	   *copy;
	List	   *names;
	ListCell   *lc;
	bool		found = false;

	if (name == NULL || list == NULL || list[0] == '\0')
		return false;
	copy = pstrdup(list);
	if (!SplitIdentifierString(copy, ',', &names))
		elog(ERROR, "dbaops_guard: invalid role list \"%s\"", list);
	foreach(lc, names)
	{
		if (strcmp(name, (char *) lfirst(lc)) == 0)
			found = true;
	}
	return found;
}

/* Whether role "name" is reserved or has (through membership) a reserved role's privileges. */
static bool
carries_reserved(const char *name)
{
	char	   *copy;
	List	   *names;
	ListCell   *lc;
	Oid			role;

	if (name == NULL)
		return false;
	if (name_in(name, reserved_roles) || name_in(name, protected_roles))
		return true;
	role = get_role_oid(name, true);
	if (!OidIsValid(role) || reserved_roles == NULL)
		return false;
	copy = pstrdup(reserved_roles);
	if (!SplitIdentifierString(copy, ',', &names))
		return false;
	foreach(lc, names)
	{
		Oid			reserved = get_role_oid((char *) lfirst(lc), true);

		if (OidIsValid(reserved) && has_privs_of_role(role, reserved))
			return true;
	}
	return false;
}

static const char *
spec_name(RoleSpec *spec)
{
	if (spec == NULL)
		return NULL;
	if (spec->roletype == ROLESPEC_CSTRING)
		return spec->rolename;
	return NULL;
}

static void
refuse(const char *what, const char *role)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s role \"%s\"", what, role),
			 errdetail("Role \"%s\" is reserved to the service.", role)));
}

static void
check_role_list(List *roles, const char *what)
{
	ListCell   *lc;

	foreach(lc, roles)
	{
		Node	   *node = (Node *) lfirst(lc);
		const char *name = NULL;

		if (IsA(node, RoleSpec))
			name = spec_name((RoleSpec *) node);
		else if (IsA(node, AccessPriv))
			name = ((AccessPriv *) node)->priv_name;
		else if (IsA(node, String))
			name = strVal(node);
		if (name != NULL && carries_reserved(name))
			refuse(what, name);
	}
}

static void
check_protected(RoleSpec *spec, const char *what)
{
	const char *name = spec_name(spec);

	if (name != NULL && name_in(name, protected_roles))
		refuse(what, name);
}

static void
guard(Node *stmt)
{
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_GrantRoleStmt:
			{
				GrantRoleStmt *g = (GrantRoleStmt *) stmt;

				check_role_list(g->granted_roles, g->is_grant ? "grant" : "revoke");
				foreach(lc, g->grantee_roles)
					check_protected((RoleSpec *) lfirst(lc), "change the memberships of");
				break;
			}
		case T_CreateRoleStmt:
			{
				CreateRoleStmt *c = (CreateRoleStmt *) stmt;

				foreach(lc, c->options)
				{
					DefElem    *opt = (DefElem *) lfirst(lc);

					if (strcmp(opt->defname, "addroleto") == 0)
						check_role_list((List *) opt->arg, "grant");
				}
				break;
			}
		case T_AlterRoleStmt:
			{
				AlterRoleStmt *a = (AlterRoleStmt *) stmt;
				const char *name = spec_name(a->role);

				check_protected(a->role, "alter");
				if (a->action == +1 && name != NULL && carries_reserved(name))
					refuse("grant", name);
				break;
			}
		case T_AlterRoleSetStmt:
			check_protected(((AlterRoleSetStmt *) stmt)->role, "alter");
			break;
		case T_DropRoleStmt:
			foreach(lc, ((DropRoleStmt *) stmt)->roles)
				check_protected((RoleSpec *) lfirst(lc), "drop");
			break;
		case T_RenameStmt:
			{
				RenameStmt *r = (RenameStmt *) stmt;

				if (r->renameType == OBJECT_ROLE && name_in(r->subname, protected_roles))
					refuse("rename", r->subname);
				break;
			}
		default:
			break;
	}
}

static void
dbaops_guard_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					 ProcessUtilityContext context, ParamListInfo params,
					 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (!superuser())
		guard(pstmt->utilityStmt);
	if (prev_hook)
		prev_hook(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv,
								dest, qc);
}

void
_PG_init(void)
{
	DefineCustomStringVariable("dbaops_guard.reserved_roles",
							   "Roles no non-superuser may grant, directly or through another role.",
							   NULL, &reserved_roles,
							   "pg_read_server_files,pg_write_server_files,pg_execute_server_program",
							   PGC_POSTMASTER, GUC_LIST_INPUT, NULL, NULL, NULL);
	DefineCustomStringVariable("dbaops_guard.protected_roles",
							   "Roles no non-superuser may alter, rename, drop or grant.",
							   NULL, &protected_roles, "",
							   PGC_POSTMASTER, GUC_LIST_INPUT, NULL, NULL, NULL);
	MarkGUCPrefixReserved("dbaops_guard");
	prev_hook = ProcessUtility_hook;
	ProcessUtility_hook = dbaops_guard_utility;
}
