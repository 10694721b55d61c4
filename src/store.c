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
	STMT_READ,
	STMT_INSERT,
	STMT_RENEW,
	STMT_DECREMENT,
	STMT_FREE,
	STMT_HOLDER_ROWS,
	STMT_EXPIRED,
	STMT_STALE_FREE,
	STMT_DELETE_FREE,
	STMT_MIN_EXPIRY,
	STMT_FAST_ACQUIRE,
	STMT_FAST_ACQUIRE_QUEUED,
	STMT_FAST_RELEASE,
	STMT_REAP_ONE,
	NUM_STMTS
} StoreStmt;

typedef struct StoreStmtDef
{
	const char *sql;
	int			nargs;
	Oid			argtypes[9];
} StoreStmtDef;

#define RES_EQ "resource OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
/*
 * The row is held, unexpired at $4/$5 (now), by holder $2 of role $3: the
 * SQL form of HOLDING_MINE (holding.c, where the rule lives; $3 is the
 * caller's role captured there, never GetUserId() inside a session).
 */
#define MINE_AT(now) "(holder OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")" \
	" AND owner OPERATOR(pg_catalog.=) $3 AND expires_at OPERATOR(pg_catalog.>) " now ")"

#define FAST_ACQUIRE_SET \
	"UPDATE dlock.leases SET" \
	"  count = CASE WHEN " MINE_AT("$5") " THEN count OPERATOR(pg_catalog.+) 1 ELSE 1 END," \
	"  fence = CASE WHEN " MINE_AT("$5") " THEN fence ELSE dlock._next_fence() END," \
	"  lease = CASE WHEN " MINE_AT("$5") " THEN lease ELSE $4 END," \
	"  acquired_at = CASE WHEN " MINE_AT("$5") " THEN acquired_at ELSE $5 END," \
	"  expires_at = CASE WHEN " MINE_AT("$5") " THEN GREATEST(expires_at, $6) ELSE $6 END," \
	"  holder = $2, owner = $3, renewed_at = $5, released_at = NULL" \

#define FAST_ACQUIRE_RETURNING \
	"  RETURNING fence, count, expires_at," \
	"    CASE WHEN count OPERATOR(pg_catalog.=) 1 THEN (SELECT o.holder IS NOT NULL" \
	"      FROM dlock.leases o WHERE o.resource OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")) END"

static const StoreStmtDef stmt_defs[NUM_STMTS] = {
	[STMT_READ] = {
		"SELECT holder, owner, count, fence, lease, expires_at"
		"  FROM dlock.leases WHERE " RES_EQ,
		1, {TEXTOID}
	},
	[STMT_INSERT] = {
		"INSERT INTO dlock.leases (resource, holder, owner, count, fence,"
		"  lease, acquired_at, renewed_at, expires_at)"
		"  VALUES ($1, $2, $3, 1, $4, $5, $6, $6, $7)",
		7, {TEXTOID, TEXTOID, REGROLEOID, INT8OID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[STMT_RENEW] = {
		"UPDATE dlock.leases SET lease = $2, renewed_at = $3, expires_at = $4"
		"  WHERE " RES_EQ,
		4, {TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[STMT_DECREMENT] = {
		"UPDATE dlock.leases SET count = $2 WHERE " RES_EQ,
		2, {TEXTOID, INT4OID}
	},
	[STMT_FREE] = {
		"UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0,"
		"  expires_at = NULL, released_at = $2 WHERE " RES_EQ,
		2, {TEXTOID, TIMESTAMPTZOID}
	},
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
	/*
	 * The common successful acquisition in one statement: a free or expired
	 * row gets a new holder and a fence drawn by dlock._next_fence() (only
	 * for the row that matched, after the resource's lock was taken); the
	 * holder's own unexpired holding is re-entered.  SET sees old values.
	 * This form knows nothing of queues and lock-delay: it runs under the
	 * 0.1 SQL, and as the takeover of the slow path once acquire.c has
	 * checked them.
	 */
	[STMT_FAST_ACQUIRE] = {
		FAST_ACQUIRE_SET
		"  WHERE " RES_EQ " AND (holder IS NULL"
		"    OR expires_at OPERATOR(pg_catalog.<=) $5 OR " MINE_AT("$5") ")"
		FAST_ACQUIRE_RETURNING,
		6, {TEXTOID, TEXTOID, REGROLEOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	/*
	 * The same under the 0.2 SQL: re-entry as before; a takeover only when
	 * $7 (no other backend's in-server ticket is ahead of the caller's,
	 * queue.c), no live client ticket below $8 (the caller's in-server
	 * ticket, or the largest bigint) is queued, and the ended holding's
	 * lock-delay is over (the SQL form of dlock_lease_available and the
	 * queue rule, holding.c).
	 */
	[STMT_FAST_ACQUIRE_QUEUED] = {
		FAST_ACQUIRE_SET
		"  WHERE " RES_EQ " AND (" MINE_AT("$5") " OR ($7"
		"    AND (holder IS NULL OR expires_at OPERATOR(pg_catalog.<=) $5)"
		"    AND NOT EXISTS (SELECT FROM dlock.tickets t"
		"      WHERE t.resource OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
		"        AND t.expires_at OPERATOR(pg_catalog.>) $5"
		"        AND t.ticket OPERATOR(pg_catalog.<) $8)"
		"    AND NOT EXISTS (SELECT FROM dlock.delays d"
		"      WHERE d.resource OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
		"        AND d.fence OPERATOR(pg_catalog.=) leases.fence"
		"        AND CASE WHEN leases.holder IS NULL"
		"          THEN d.available_at OPERATOR(pg_catalog.>) $5"
		"          ELSE leases.expires_at OPERATOR(pg_catalog.+) d.lock_delay OPERATOR(pg_catalog.>) $5 END)))"
		FAST_ACQUIRE_RETURNING,
		8, {TEXTOID, TEXTOID, REGROLEOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, INT8OID}
	},
	/* The common unlock in one statement: the holder's own holding. */
	[STMT_FAST_RELEASE] = {
		"UPDATE dlock.leases SET"
		"  count = count OPERATOR(pg_catalog.-) 1,"
		"  holder = CASE WHEN count OPERATOR(pg_catalog.>) 1 THEN holder END,"
		"  owner = CASE WHEN count OPERATOR(pg_catalog.>) 1 THEN owner END,"
		"  expires_at = CASE WHEN count OPERATOR(pg_catalog.>) 1 THEN expires_at END,"
		"  released_at = CASE WHEN count OPERATOR(pg_catalog.>) 1 THEN released_at ELSE $4 END"
		"  WHERE " RES_EQ " AND " MINE_AT("$4")
		"    AND ($5 IS NULL OR fence OPERATOR(pg_catalog.=) $5)"
		"  RETURNING count, fence",
		5, {TEXTOID, TEXTOID, REGROLEOID, TIMESTAMPTZOID, INT8OID}
	},
	/* Free a lease if it is (still) expired; its fence for the event. */
	[STMT_REAP_ONE] = {
		"UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0,"
		"  expires_at = NULL, released_at = $2"
		"  WHERE " RES_EQ " AND holder IS NOT NULL"
		"    AND expires_at OPERATOR(pg_catalog.<=) $2"
		"  RETURNING fence",
		2, {TEXTOID, TIMESTAMPTZOID}
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
 * dlock_store_begin: open a store session: SPI, the owner's identity and a
 * safe search_path.  Sessions nest (only the outermost one switches).
 */
void
dlock_store_begin(void)
{
	if (store_depth++ > 0)
		return;
	dlock_own_writes_begin();
	caller_context = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
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

/* dlock_store_active: is a store session open (identity switched)? */
bool
dlock_store_active(void)
{
	return store_depth > 0;
}

/*
 * dlock_store_end: close the store session opened by dlock_store_begin.
 * On error the transaction (or subtransaction) abort restores all of this,
 * so store_depth is reset by dlock_store_reset from the xact callbacks.
 */
void
dlock_store_end(void)
{
	Assert(store_depth > 0);
	if (--store_depth > 0)
		return;
	dlock_own_writes_end();
	AtEOXact_GUC(true, saved_nestlevel);
	SetUserIdAndSecContext(saved_userid, saved_sec_context);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/* dlock_store_reset: forget open sessions after an error unwound them. */
void
dlock_store_reset(void)
{
	store_depth = 0;
}

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

	Assert(store_depth > 0);
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

/* run_change: run a statement that must change exactly one row. */
static void
run_change(StoreStmt which, Datum *values, const char *nulls)
{
	uint64		n = run(which, values, nulls, false, 0);

	if (n != 1)
		elog(ERROR, "dlock: expected to change one row, changed " UINT64_FORMAT, n);
}

/*
 * dlock_row_read: read a resource's row into *row (holder copied into the
 * memory context that was current when the store session began).
 */
void
dlock_row_read(const DlockResource *res, DlockRow *row)
{
	Datum		values[1] = {PointerGetDatum(res->name)};
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;

	memset(row, 0, sizeof(*row));
	if (run(STMT_READ, values, NULL, true, 0) == 0)
		return;
	row->exists = true;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;

	d = SPI_getbinval(tup, desc, 1, &isnull);
	row->held = !isnull;
	if (row->held)
	{
		MemoryContext old = MemoryContextSwitchTo(caller_context);

		row->holder = TextDatumGetCString(d);
		MemoryContextSwitchTo(old);
	}
	d = SPI_getbinval(tup, desc, 2, &isnull);
	row->owner = isnull ? InvalidOid : DatumGetObjectId(d);
	row->count = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	d = SPI_getbinval(tup, desc, 4, &isnull);
	row->fence = isnull ? 0 : DatumGetInt64(d);
	d = SPI_getbinval(tup, desc, 5, &isnull);
	if (!isnull)
		row->lease = *DatumGetIntervalP(d);
	d = SPI_getbinval(tup, desc, 6, &isnull);
	row->expires_at = isnull ? DT_NOBEGIN : DatumGetTimestampTz(d);
}

/* dlock_row_insert: the first holding of a resource never seen. */
void
dlock_row_insert(const DlockResource *res, text *holder, Oid owner,
				 int64 fence, const Interval *lease, TimestampTz now,
				 TimestampTz expires)
{
	Datum		values[7];

	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(owner);
	values[3] = Int64GetDatum(fence);
	values[4] = PointerGetDatum(lease);
	values[5] = TimestampTzGetDatum(now);
	values[6] = TimestampTzGetDatum(expires);
	run_change(STMT_INSERT, values, NULL);
}

/* dlock_row_renew: a renewal's new lease and expiry. */
void
dlock_row_renew(const DlockResource *res, const Interval *lease,
				TimestampTz now, TimestampTz expires)
{
	Datum		values[4];

	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(lease);
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(expires);
	run_change(STMT_RENEW, values, NULL);
}

/*
 * dlock_row_release: set the count left; at zero the row becomes free (it
 * stays, keeping its last fence, so the next acquisition updates in place).
 */
void
dlock_row_release(const DlockResource *res, int32 count_left, TimestampTz now)
{
	Datum		values[2];

	values[0] = PointerGetDatum(res->name);
	if (count_left > 0)
	{
		values[1] = Int32GetDatum(count_left);
		run_change(STMT_DECREMENT, values, NULL);
	}
	else
	{
		values[1] = TimestampTzGetDatum(now);
		run_change(STMT_FREE, values, NULL);
	}
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
 * dlock_row_fast_acquire: the one-statement acquisition (see
 * STMT_FAST_ACQUIRE; with queued, the 0.2 form STMT_FAST_ACQUIRE_QUEUED,
 * which takes over only when allow_takeover and no live client ticket
 * below tickets_below is queued).  Returns false, changing nothing, when the row is
 * missing or held by another; else sets the fence, the new count and
 * expiry, and whether an expired holding was taken over.
 */
bool
dlock_row_fast_acquire(const DlockResource *res, text *holder, Oid owner,
					   const Interval *lease, TimestampTz now,
					   TimestampTz expires, bool queued, bool allow_takeover,
					   int64 tickets_below, int64 *fence, int32 *count,
					   TimestampTz *new_expires, bool *took_over)
{
	Datum		values[8];
	bool		isnull;
	HeapTuple	tup;
	TupleDesc	desc;

	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(owner);
	values[3] = PointerGetDatum(lease);
	values[4] = TimestampTzGetDatum(now);
	values[5] = TimestampTzGetDatum(expires);
	values[6] = BoolGetDatum(allow_takeover);
	values[7] = Int64GetDatum(tickets_below);
	if (run(queued ? STMT_FAST_ACQUIRE_QUEUED : STMT_FAST_ACQUIRE,
			values, NULL, false, 0) == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	*fence = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	*count = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
	*new_expires = DatumGetTimestampTz(SPI_getbinval(tup, desc, 3, &isnull));
	*took_over = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull)) && !isnull;
	return true;
}

/*
 * dlock_row_fast_release: the one-statement unlock of the caller's own
 * unexpired holding (under fence, when fence_given).  Returns false,
 * changing nothing, otherwise; else sets the count left and the fence.
 */
bool
dlock_row_fast_release(const DlockResource *res, text *holder, Oid owner,
					   TimestampTz now, bool fence_given, int64 fence,
					   int32 *left, int64 *fence_out)
{
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', fence_given ? ' ' : 'n'};
	bool		isnull;

	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(owner);
	values[3] = TimestampTzGetDatum(now);
	values[4] = Int64GetDatum(fence);
	if (run(STMT_FAST_RELEASE, values, nulls, false, 0) == 0)
		return false;
	*left = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
	*fence_out = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}

/*
 * dlock_row_reap: free the resource's lease if it expired by now; returns
 * its fence, or 0 if it was not (or no longer) expired.
 */
int64
dlock_row_reap(const DlockResource *res, TimestampTz now)
{
	Datum		values[2];
	bool		isnull;

	values[0] = PointerGetDatum(res->name);
	values[1] = TimestampTzGetDatum(now);
	if (run(STMT_REAP_ONE, values, NULL, false, 0) == 0)
		return 0;
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									   SPI_tuptable->tupdesc, 1, &isnull));
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

	Assert(store_depth > 0);
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
