/*-------------------------------------------------------------------------
 *
 * store.c
 *		The SPI statements that read and change dlock.leases.
 *
 * Every statement is prepared once per backend (SPI_keepplan), takes the
 * user's values only as parameters, and names everything with its schema,
 * operators included, so neither the caller's search_path nor objects
 * planted on it can change what runs.  For good measure a store session
 * also runs with search_path = pg_catalog, pg_temp.
 *
 * Users have no rights on the table.  A store session runs as the table's
 * owner (SECURITY_LOCAL_USERID_CHANGE, like the RI triggers), with
 * SECURITY_RESTRICTED_OPERATION so nothing it runs can change session
 * state.  The caller's role is captured before the switch.
 *
 * Plans are cached for the backend's life, so a generic plan made while
 * the table was tiny could seq-scan it forever after; point lookups run
 * with enable_seqscan = off so they always use the primary key.
 *
 * Statements run on the latest snapshot: the per-resource lock is held
 * whenever a row is read to be changed, so the latest committed state is
 * the one that counts, whatever the caller's isolation level.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "catalog/pg_class.h"

/* Identifies each prepared statement in plans[]. */
typedef enum StoreStmt
{
	STMT_HOLDER_ROWS,
	STMT_EXPIRED,
	STMT_STALE_FREE,
	STMT_DELETE_FREE,
	STMT_MIN_EXPIRY,
	NUM_STMTS
} StoreStmt;

typedef struct StoreStmtDef
{
	const char *sql;
	int			nargs;
	Oid			argtypes[9];
} StoreStmtDef;

#define RES_EQ "resource OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
static const StoreStmtDef stmt_defs[NUM_STMTS] = {
	[STMT_HOLDER_ROWS] = {
		"SELECT resource FROM dlock.leases"
		"  WHERE holder OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
		"    AND owner OPERATOR(pg_catalog.=) $2",
		2, {TEXTOID, REGROLEOID}
	},
	[STMT_EXPIRED] = {
		"SELECT resource FROM dlock.leases"
		"  WHERE holder IS NOT NULL AND expires_at OPERATOR(pg_catalog.<=) $1"
		"  LIMIT $2",
		2, {TIMESTAMPTZOID, INT4OID}
	},
	[STMT_STALE_FREE] = {
		"SELECT resource FROM dlock.leases"
		"  WHERE holder IS NULL AND released_at OPERATOR(pg_catalog.<=) $1"
		"  LIMIT $2",
		2, {TIMESTAMPTZOID, INT4OID}
	},
	[STMT_DELETE_FREE] = {
		"DELETE FROM dlock.leases WHERE " RES_EQ " AND holder IS NULL",
		1, {TEXTOID}
	},
	[STMT_MIN_EXPIRY] = {
		"SELECT pg_catalog.min(expires_at) FROM dlock.leases WHERE holder IS NOT NULL",
		0, {InvalidOid}
	},
};

static SPIPlanPtr plans[NUM_STMTS];

/* State saved by dlock_store_begin for dlock_store_end. */
static int	store_depth = 0;
static Oid	saved_userid;
static int	saved_sec_context;
static int	saved_nestlevel;
static MemoryContext caller_context;	/* where results are copied to */
static bool spi_entered = false;	/* dlock_store_spi ran in this session */

/* dlock_schema_oid: OID of schema dlock (errors if the extension is gone). */
Oid
dlock_schema_oid(void)
{
	return get_namespace_oid("dlock", false);
}

/*
 * table_owner: the role that owns dlock.leases, i.e. the extension's
 * installer.  Store sessions run as this role.
 */
static Oid
table_owner(void)
{
	Oid			relid = get_relname_relid("leases", dlock_schema_oid());
	HeapTuple	tp;
	Oid			owner;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table dlock.leases does not exist"),
				 errhint("Run CREATE EXTENSION dlock.")));
	tp = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tp))->relowner;
	ReleaseSysCache(tp);
	return owner;
}

/*
 * dlock_store_begin: open a store session.  The direct row access of
 * rows.c needs nothing more; the SPI part (the owner's identity, a safe
 * search_path, SPI itself) is entered by the first statement that needs
 * it (store_spi) and left when the outermost session ends.  Sessions nest.
 */
void
dlock_store_begin(void)
{
	if (store_depth++ > 0)
		return;
	dlock_own_writes_begin();
	caller_context = CurrentMemoryContext;
}

/*
 * dlock_store_spi: make the session ready for SPI statements (once per
 * session): connect, become the table's owner, set the search_path.
 */
void
dlock_store_spi(void)
{
	Assert(store_depth > 0);
	if (spi_entered)
		return;
	/* SPI_finish returns to the context current at SPI_connect. */
	MemoryContextSwitchTo(caller_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	spi_entered = true;
	GetUserIdAndSecContext(&saved_userid, &saved_sec_context);
	SetUserIdAndSecContext(table_owner(),
						   saved_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	saved_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	/* Point lookups must use the primary key whatever the statistics say. */
	(void) set_config_option("enable_seqscan", "off",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	/*
	 * A disabled seq scan costs 1e10, far above jit_above_cost: without this
	 * a backend's first read of its epoch row was JIT-compiled (65 ms).
	 */
	(void) set_config_option("jit", "off",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

/* dlock_store_active: is a store session open? */
bool
dlock_store_active(void)
{
	return store_depth > 0;
}

/*
 * dlock_store_context: where results meant to outlive the session go (the
 * memory context current when it began).
 */
MemoryContext
dlock_store_context(void)
{
	Assert(store_depth > 0);
	return caller_context;
}

/*
 * dlock_store_end: close the store session opened by dlock_store_begin.
 * On error the transaction (or subtransaction) abort restores all of this,
 * so store_depth is reset by store_reset from xact.c's hooks.
 */
void
dlock_store_end(void)
{
	Assert(store_depth > 0);
	if (--store_depth > 0)
		return;
	dlock_own_writes_end();
	if (!spi_entered)
		return;
	spi_entered = false;
	AtEOXact_GUC(true, saved_nestlevel);
	SetUserIdAndSecContext(saved_userid, saved_sec_context);
	/* Back in the context current when the session began. */
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/*
 * store_reset: forget open sessions after an error unwound them: at the
 * end of every transaction, and of an aborted subtransaction (xact.c's
 * hooks).
 */
static void
store_reset(void)
{
	store_depth = 0;
	spi_entered = false;
}

static void
store_end_xact(DlockXactEnd how)
{
	store_reset();
}

static void
store_subxact(bool commit, SubTransactionId mySubid,
			  SubTransactionId parentSubid)
{
	if (!commit)
		store_reset();
}

const DlockXactHooks dlock_store_xact_hooks = {
	.end = store_end_xact,
	.subxact = store_subxact,
};

/* get_plan: the prepared statement, preparing it on first use. */
static SPIPlanPtr
get_plan(StoreStmt which)
{
	if (plans[which] == NULL)
	{
		const StoreStmtDef *def = &stmt_defs[which];
		SPIPlanPtr	plan;

		plan = SPI_prepare(def->sql, def->nargs, (Oid *) def->argtypes);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 def->sql, SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		plans[which] = plan;
	}
	return plans[which];
}

/*
 * run: execute a prepared statement on the latest snapshot.  Returns the
 * number of rows processed; checks the result code.
 */
static uint64
run(StoreStmt which, Datum *values, const char *nulls, bool read_only,
	long limit)
{
	int			rc;
	bool		scan = (which == STMT_EXPIRED || which == STMT_STALE_FREE ||
						which == STMT_MIN_EXPIRY);
	int			nestlevel = 0;

	dlock_store_spi();
	if (scan)
	{
		/* The statements that scan the table may plan a seq scan. */
		nestlevel = NewGUCNestLevel();
		(void) set_config_option("enable_seqscan", "on",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	}
	rc = SPI_execute_snapshot(get_plan(which), values, nulls,
							  GetLatestSnapshot(), InvalidSnapshot,
							  read_only, true, limit);
	if (scan)
		AtEOXact_GUC(true, nestlevel);
	if (rc < 0)
		elog(ERROR, "SPI_execute_snapshot failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

/*
 * dlock_store_copy_text: a text datum of the last result as a C string in
 * the store session's caller context (for other files' statements).
 */
char *
dlock_store_copy_text(Datum d)
{
	MemoryContext old = MemoryContextSwitchTo(caller_context);
	char	   *s = TextDatumGetCString(d);

	MemoryContextSwitchTo(old);
	return s;
}

/*
 * column_texts: the first column of the last result as a List of text*
 * copied into the caller's context.
 */
static List *
column_texts(void)
{
	List	   *result = NIL;
	uint64		i;
	MemoryContext old = MemoryContextSwitchTo(caller_context);

	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i],
									  SPI_tuptable->tupdesc, 1, &isnull);

		result = lappend(result, DatumGetTextPCopy(d));
	}
	MemoryContextSwitchTo(old);
	return result;
}

/* dlock_rows_of_holder: resources whose row names this holder and role. */
List *
dlock_rows_of_holder(text *holder, Oid owner)
{
	Datum		values[2];
	values[0] = PointerGetDatum(holder);
	values[1] = ObjectIdGetDatum(owner);
	run(STMT_HOLDER_ROWS, values, NULL, true, 0);
	return column_texts();
}

/*
 * dlock_rows_expired: up to limit resources whose lease ended by now, as
 * text* in the memory context that was current when the session began.
 */
List *
dlock_rows_expired(TimestampTz now, int limit)
{
	Datum		values[2];

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(limit);
	run(STMT_EXPIRED, values, NULL, true, 0);
	return column_texts();
}

/*
 * dlock_rows_stale_free: up to limit resources free since before cutoff,
 * as text* in the memory context that was current when the session began.
 */
List *
dlock_rows_stale_free(TimestampTz cutoff, int limit)
{
	Datum		values[2];

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int32GetDatum(limit);
	run(STMT_STALE_FREE, values, NULL, true, 0);
	return column_texts();
}

/* dlock_row_delete_free: delete a resource's row if it is free. */
void
dlock_row_delete_free(const DlockResource *res)
{
	Datum		values[1] = {PointerGetDatum(res->name)};

	(void) run(STMT_DELETE_FREE, values, NULL, false, 0);
}

/* dlock_min_expiry: earliest expiry of any holding; DT_NOEND if none. */
TimestampTz
dlock_min_expiry(void)
{
	bool		isnull;
	Datum		d;

	run(STMT_MIN_EXPIRY, NULL, NULL, true, 0);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? DT_NOEND : DatumGetTimestampTz(d);
}

/*
 * dlock_store_exec: run a statement of another file (queue.c) inside a
 * store session, on the latest snapshot, preparing it once into *plan.
 * Results are in SPI_tuptable until the next statement.
 */
uint64
dlock_store_exec(SPIPlanPtr *plan, const char *sql, int nargs,
				 const Oid *argtypes, Datum *values, const char *nulls,
				 bool read_only)
{
	int			rc;

	dlock_store_spi();
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare(sql, nargs, (Oid *) argtypes);

		if (p == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		*plan = p;
	}
	rc = SPI_execute_snapshot(*plan, values, nulls, GetLatestSnapshot(),
							  InvalidSnapshot, read_only, true, 0);
	if (rc < 0)
		elog(ERROR, "SPI_execute_snapshot failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}
