/*-------------------------------------------------------------------------
 *
 * events.c
 *		NOTIFY events for releases, expiries and breaks, and the outbox
 *		that carries them across a two-phase commit.
 *
 * The channel is dlock.channel(resource), "dlock_" followed by the md5 of
 * the resource in hex: 38 bytes whatever the resource, and an identifier
 * that needs no quoting.  The payload is JSON built with escape_json; no
 * SQL is built from it (Async_Notify is what NOTIFY itself calls).
 *
 * An event is not sent when the change is made but queued (sends.c), and
 * taken from that queue here:
 *	- at PRE_COMMIT handed to Async_Notify (PreCommit_Notify runs after the
 *	  PRE_COMMIT callbacks), so PostgreSQL delivers it when, and only if,
 *	  the transaction commits; with shared memory, only if some session
 *	  may LISTEN on its channel (listeners.c: NOTIFY serialises commits);
 *	  but if the commit will wait for a synchronous standby, in the
 *	  reaper's database, and nobody listens on its channel, written into
 *	  dlock.outbox and sent by the next reaper round, so that a LISTEN
 *	  meanwhile need not wait for the standby (listeners.c);
 *	- at PRE_PREPARE written into dlock.outbox instead, since a prepared
 *	  transaction may not NOTIFY: the rows commit with COMMIT PREPARED (and
 *	  vanish with ROLLBACK PREPARED), and the next reaper round delivers
 *	  them with dlock_outbox_deliver() and wakes a waiter of each resource.
 * Under the 0.1 SQL, which has no dlock.outbox, PREPARE of a transaction
 * that released is refused (0A000) until ALTER EXTENSION dlock UPDATE.
 *
 * Outbox statements run as the table's owner, SECURITY_RESTRICTED_OPERATION,
 * with search_path = pg_catalog, pg_temp, and take values only as parameters;
 * concurrent deliverers skip each other's rows (SKIP LOCKED), so each row
 * is delivered once.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(dlock_channel);

/* Most outbox rows one dlock_outbox_deliver() call takes. */
#define OUTBOX_BATCH 1000

static Oid	outbox_relid(void);
static void outbox_write(Oid relid, List *events);

/*
 * commit_waits_for_standby: will this transaction's commit wait for a
 * synchronous standby (SyncRepWaitForLSN's test, with this backend's view
 * of synchronous_standby_names), in the database whose reaper delivers
 * dlock.outbox within dlock.reap_interval?  Then an event nobody listens
 * for goes to the outbox instead of holding up the LISTENs of its channel
 * for as long as the standby is away (listeners.c).  Elsewhere (no reaper
 * rounds, only dlock.reap()) the LISTEN waits, as before.
 */
static bool
commit_waits_for_standby(void)
{
	char	   *db;

	if (!SyncRepRequested() || SyncRepStandbyNames == NULL ||
		SyncRepStandbyNames[0] == '\0' || dlock_database == NULL)
		return false;
	db = get_database_name(MyDatabaseId);
	return db != NULL && strcmp(db, dlock_database) == 0;
}

/*
 * events_pre_commit: hand the queued events to NOTIFY, after
 * force_sync_commit (xact.c) has set the commit's level.  A commit that
 * will wait for a synchronous standby sends those of channels someone
 * listens on, and writes the others into dlock.outbox (0.2 SQL or later)
 * for the reaper's next round (see commit_waits_for_standby).  Returns
 * whether any went to the outbox.
 */
static bool
events_pre_commit(void)
{
	ListCell   *lc;
	List	   *later = NIL;
	Oid			relid = InvalidOid;
	List	   *pending = dlock_sends_events();

	if (pending == NIL)
		return false;
	if (commit_waits_for_standby())
		relid = outbox_relid();
	if (!OidIsValid(relid))
		dlock_listeners_decide();
	foreach(lc, pending)
	{
		DlockEvent *ev = lfirst(lc);

		if (!OidIsValid(relid))
		{
			if (dlock_listened(ev->channel))
				Async_Notify(ev->channel, ev->payload);
		}
		else if (dlock_listening(ev->channel))
			Async_Notify(ev->channel, ev->payload);
		else
			later = lappend(later, ev);
	}
	if (later != NIL)
		outbox_write(relid, later);
	return later != NIL;
}

/* State of an outbox session (outbox_begin .. outbox_end). */
typedef struct OutboxSession
{
	Oid			saved_userid;
	int			saved_sec_context;
	int			nestlevel;
} OutboxSession;

/* outbox_relid: OID of dlock.outbox, or InvalidOid under the 0.1 SQL. */
static Oid
outbox_relid(void)
{
	Oid			nsp = get_namespace_oid("dlock", true);

	return OidIsValid(nsp) ? get_relname_relid("outbox", nsp) : InvalidOid;
}

/* outbox_begin: SPI, as the owner of dlock.outbox, with a safe path. */
static void
outbox_begin(Oid relid, OutboxSession *s)
{
	HeapTuple	tp;
	Oid			owner;

	tp = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tp))->relowner;
	ReleaseSysCache(tp);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	GetUserIdAndSecContext(&s->saved_userid, &s->saved_sec_context);
	SetUserIdAndSecContext(owner,
						   s->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	s->nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

/* outbox_end: undo outbox_begin (an error undoes it all by itself). */
static void
outbox_end(OutboxSession *s)
{
	AtEOXact_GUC(true, s->nestlevel);
	SetUserIdAndSecContext(s->saved_userid, s->saved_sec_context);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/*
 * events_pre_prepare: the transaction is being prepared: write its
 * queued events into dlock.outbox, to be delivered once it commits.
 * Returns whether there were any.
 */
static bool
events_pre_prepare(void)
{
	Oid			relid;
	List	   *pending = dlock_sends_events();

	if (pending == NIL)
		return false;
	relid = outbox_relid();
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that released a dlock lock before ALTER EXTENSION dlock UPDATE"),
				 errdetail("The event of the release must wait in table dlock.outbox for the prepared transaction to commit, and that table does not exist yet."),
				 errhint("Run ALTER EXTENSION dlock UPDATE in this database.")));

	outbox_write(relid, pending);
	return true;
}

/*
 * outbox_write: insert events (DlockEvent *) into dlock.outbox (relid),
 * at PRE_PREPARE or PRE_COMMIT.
 */
static void
outbox_write(Oid relid, List *events)
{
	static const char *sql =
		"INSERT INTO dlock.outbox (channel, payload, hash, queued_at)"
		" VALUES ($1, $2, $3, $4)";
	Oid			argtypes[4] = {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID};
	OutboxSession s;
	SPIPlanPtr	plan;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	/* Portals are closed by now: SPI needs a snapshot of its own. */
	PushActiveSnapshot(GetTransactionSnapshot());
	outbox_begin(relid, &s);
	plan = SPI_prepare(sql, 4, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	foreach(lc, events)
	{
		DlockEvent *ev = lfirst(lc);
		Datum		values[4];
		int			rc;

		values[0] = CStringGetTextDatum(ev->channel);
		values[1] = CStringGetTextDatum(ev->payload);
		values[2] = Int64GetDatum((int64) ev->hash);
		values[3] = TimestampTzGetDatum(now);
		rc = SPI_execute_plan(plan, values, NULL, false, 0);
		if (rc != SPI_OK_INSERT || SPI_processed != 1)
			elog(ERROR, "dlock: could not queue an event in dlock.outbox: %s",
				 SPI_result_code_string(rc));
	}
	outbox_end(&s);
	PopActiveSnapshot();
}

/* What events.c does when a transaction ends (xact.c calls them). */
const DlockXactHooks dlock_events_xact_hooks = {
	.pre_commit = events_pre_commit,
	.pre_prepare = events_pre_prepare,
};

/*
 * dlock_outbox_deliver: send the events that prepared transactions left
 * in dlock.outbox and have since committed, and wake one waiter of each of
 * their resources, when the caller's transaction commits (the rows are
 * deleted in it, so an abort leaves them for the next try).  For the
 * reaper, inside a transaction of its own; returns how many events.  Does
 * nothing under the 0.1 SQL.  While prepared transactions exist in this
 * database (they may commit events at any time), or rows were left for
 * want of room in one batch, the reaper's hint is lowered to now so that
 * its next interval looks again.
 */
int
dlock_outbox_deliver(void)
{
	static const char *deliver_sql =
		"WITH d AS (DELETE FROM dlock.outbox"
		"  WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
		"    SELECT ctid FROM dlock.outbox FOR UPDATE SKIP LOCKED LIMIT $1))"
		"  RETURNING channel, payload, hash, queued_at)"
		" SELECT channel, payload, hash FROM d ORDER BY queued_at";
	static const char *prepared_sql =
		"SELECT EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts"
		"  WHERE database OPERATOR(pg_catalog.=) pg_catalog.current_database())";
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	Oid			relid = outbox_relid();
	OutboxSession s;
	uint64		i;
	int			delivered;
	bool		isnull;
	bool		prepared_exist;
	int			rc;

	if (!OidIsValid(relid))
		return 0;
	PushActiveSnapshot(GetTransactionSnapshot());
	outbox_begin(relid, &s);

	/*
	 * Look for prepared transactions first, then take the events with a
	 * snapshot of their own (READ COMMITTED: the statement's).  A prepared
	 * transaction leaves pg_prepared_xacts only after its commit is visible,
	 * so one that commits in between is either seen here (and the hint
	 * brings the next round) or its events are in the snapshot below.  The
	 * other order lost them until the next full scan.
	 */
	rc = SPI_execute(prepared_sql, true, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "dlock: could not look for prepared transactions: %s",
			 SPI_result_code_string(rc));
	prepared_exist = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1,
												&isnull));
	values[0] = Int32GetDatum(OUTBOX_BATCH);
	rc = SPI_execute_with_args(deliver_sql, 1, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "dlock: could not take events from dlock.outbox: %s",
			 SPI_result_code_string(rc));
	delivered = (int) SPI_processed;
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *channel = SPI_getvalue(tup, desc, 1);
		char	   *payload = SPI_getvalue(tup, desc, 2);
		Datum		hash = SPI_getbinval(tup, desc, 3, &isnull);

		Async_Notify(channel, payload);
		if (!isnull)
			dlock_wake_after_commit((uint64) DatumGetInt64(hash));
	}

	if (delivered >= OUTBOX_BATCH || prepared_exist)
		dlock_expiry_hint(GetCurrentTimestamp());
	outbox_end(&s);
	PopActiveSnapshot();
	return delivered;
}

/* dlock.channel(resource): the LISTEN channel of a resource. */
Datum
dlock_channel(PG_FUNCTION_ARGS)
{
	DlockResource res;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	PG_RETURN_TEXT_P(cstring_to_text(res.channel));
}
