/*-------------------------------------------------------------------------
 *
 * elect.c
 *		Leader election (campaign, proclaim, resign) and the value of a
 *		holding.
 *
 * An election is a resource; its leader is the holder, the term is the
 * holding's fence, so renew, check and assert_fence work on elections
 * unchanged.  campaign is a fair lock() (candidates are elected in the
 * order they campaigned; with wait => '0' it is a client-side fair
 * attempt, as try_lock(..., fair => true)) that does not re-enter: the
 * current leader campaigning again gets its current term.
 *
 * A holding's value (who leads and where to reach it) lives in
 * dlock.holding_values, tied to the holding by its fence like a lock-delay
 * (queue.c): a row whose fence is not the resource's current holding is
 * dead, ignored by dlock.locks, and deleted with the resource's row once
 * that has been free long enough (reap.c).  The row also says
 * whether the holding was taken by campaign, so that its end by expiry is
 * announced as an election event (reap.c).
 *
 * Events (events.c) on the election's channel: elected, proclaimed,
 * resigned, and expired from the reaper, each with candidate, term and
 * value.
 *
 * Each term campaign elects is also appended to dlock.term_log (0.3 SQL),
 * kept for ten minutes (view dlock.terms), so that an observer that polls
 * sees every term.
 *
 * Shared state: rows of dlock.holding_values, written only under the
 * resource's lock (CHANGE), except the purge of dead rows; rows of
 * dlock.term_log, appended under the election's lock, and old ones (of any
 * election) deleted by the next campaigns with SKIP LOCKED.  Only under the 0.2 SQL
 * (dlock_values_installed); the functions exist only there.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(dlock_campaign);
PG_FUNCTION_INFO_V1(dlock_proclaim);
PG_FUNCTION_INFO_V1(dlock_resign);

/* The longest value, so that an event carrying it fits a NOTIFY. */
#define DLOCK_MAX_VALUE_LEN 4000

#define RES_IS(alias) alias ".resource OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"

/* dlock_values_installed: is dlock.holding_values there (0.2 SQL)? */
bool
dlock_values_installed(void)
{
	return OidIsValid(get_relname_relid("holding_values", dlock_schema_oid()));
}

/* check_value: the value argument: NULL, or at most DLOCK_MAX_VALUE_LEN bytes. */
static text *
check_value(FunctionCallInfo fcinfo, int argno)
{
	text	   *t;

	if (PG_ARGISNULL(argno))
		return NULL;
	t = PG_GETARG_TEXT_PP(argno);
	if (VARSIZE_ANY_EXHDR(t) > DLOCK_MAX_VALUE_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("value must be at most %d bytes long", DLOCK_MAX_VALUE_LEN),
				 errdetail("The value given is %d bytes long.",
						   (int) VARSIZE_ANY_EXHDR(t))));
	return t;
}

/* check_term: the optional term argument; false if NULL. */
static bool
check_term(FunctionCallInfo fcinfo, int argno, int64 *term)
{
	*term = PG_ARGISNULL(argno) ? 0 : PG_GETARG_INT64(argno);
	return !PG_ARGISNULL(argno);
}

/*
 * dlock_value_read: the holder and value of res's holding fence, and
 * whether campaign took it.  False if there is no value row for that
 * holding.  Inside a store session; *holder and *value (NULL if the value
 * is NULL) are palloc'd in the session's caller context.
 */
bool
dlock_value_read(const DlockResource *res, int64 fence, char **holder,
				 char **value, bool *election)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, INT8OID};
	Datum		values[2];
	bool		isnull;
	Datum		d;

	*holder = NULL;
	*value = NULL;
	*election = false;
	values[0] = PointerGetDatum(res->name);
	values[1] = Int64GetDatum(fence);
	if (dlock_store_exec(&plan,
						 "SELECT v.value, v.election, v.holder FROM dlock.holding_values v"
						 "  WHERE " RES_IS("v") " AND v.fence OPERATOR(pg_catalog.=) $2",
						 2, types, values, NULL, true) == 0)
		return false;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		*value = dlock_store_copy_text(d);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	*election = !isnull && DatumGetBool(d);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	if (!isnull)
		*holder = dlock_store_copy_text(d);
	return true;
}

/*
 * value_set: res's holding fence now has value; election: campaign took
 * it (false keeps what the row says for this holding).  Inside a store
 * session, under the resource's lock.
 */
static void
value_set(const DlockResource *res, int64 fence, text *holder, text *value,
		  bool election)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[5] = {TEXTOID, INT8OID, TEXTOID, BOOLOID, TEXTOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', value ? ' ' : 'n', ' ', ' '};

	values[0] = PointerGetDatum(res->name);
	values[1] = Int64GetDatum(fence);
	values[2] = PointerGetDatum(value);
	values[3] = BoolGetDatum(election);
	values[4] = PointerGetDatum(holder);
	(void) dlock_store_exec(&plan,
							"INSERT INTO dlock.holding_values AS v"
							"  (resource, fence, holder, value, election)"
							"  VALUES ($1, $2, $5, $3, $4)"
							"  ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value,"
							"  holder = EXCLUDED.holder,"
							"  election = EXCLUDED.election OR (v.election AND"
							"    v.fence OPERATOR(pg_catalog.=) EXCLUDED.fence),"
							"  fence = EXCLUDED.fence",
							5, types, values, nulls, false);
}

/*
 * dlock_values_forget: delete res's value row if its holding is over.
 * Under the resource's lock (the reaper's purge of long-free rows): a
 * sweeping DELETE without it could meet a row just taken over for a new
 * holding and, re-checking it against its own older snapshot of
 * dlock.leases, delete the new value.
 */
void
dlock_values_forget(const DlockResource *res)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = PointerGetDatum(res->name);
	(void) dlock_store_exec(&plan,
							"DELETE FROM dlock.holding_values v WHERE " RES_IS("v")
							"   AND NOT EXISTS (SELECT FROM dlock.leases l"
							"    WHERE l.resource OPERATOR(pg_catalog.=) v.resource"
							"      AND l.fence OPERATOR(pg_catalog.=) v.fence"
							"      AND l.holder IS NOT NULL)",
							1, types, values, NULL, false);
}

/*
 * term_log: a new term of res (0.3 SQL): append it to dlock.term_log, the
 * history behind view dlock.terms that lets an observer that polls (behind
 * a pooler: no LISTEN) see every term, also one that began and ended
 * between two of its looks.  In the same statement, up to TERM_LOG_SWEEP
 * terms (of any election) older than TERM_LOG_KEEP go, skipping rows
 * another such sweep has locked (never waiting): each new term removes
 * more old ones than it adds, so the log holds little more than the last
 * ten minutes' terms.  Inside a store session, under the resource's lock;
 * nothing under older SQL.
 */
#define TERM_LOG_KEEP "10 minutes"
#define TERM_LOG_SWEEP "64"
static void
term_log(const DlockResource *res, int64 term, text *candidate, text *value,
		 Oid owner)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[5] = {TEXTOID, INT8OID, TEXTOID, TEXTOID, REGROLEOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', value ? ' ' : 'n', ' '};

	if (!OidIsValid(get_relname_relid("term_log", dlock_schema_oid())))
		return;
	values[0] = PointerGetDatum(res->name);
	values[1] = Int64GetDatum(term);
	values[2] = PointerGetDatum(candidate);
	values[3] = PointerGetDatum(value);
	values[4] = ObjectIdGetDatum(owner);
	(void) dlock_store_exec(&plan,
							"WITH old AS (DELETE FROM dlock.term_log t"
							"  WHERE t.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
							"   SELECT o.ctid FROM dlock.term_log o"
							"    WHERE o.elected_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp()"
							"      OPERATOR(pg_catalog.-) '" TERM_LOG_KEEP "'::pg_catalog.interval)"
							"    LIMIT " TERM_LOG_SWEEP " FOR UPDATE SKIP LOCKED)))"
							" INSERT INTO dlock.term_log (resource, term, candidate, value, owner, elected_at)"
							"  VALUES ($1, $2, $3, $4, $5, pg_catalog.clock_timestamp())"
							"  ON CONFLICT DO NOTHING",
							5, types, values, nulls, false);
}

/* value_cstring: a text value as a C string, or NULL. */
static char *
value_cstring(text *value)
{
	return value ? text_to_cstring(value) : NULL;
}

/*
 * current_term: if candidate (of the caller's role) leads election now,
 * its term, with the resource's lock taken (CHANGE) and the store session
 * open; else 0, with neither; -1 (with neither) if another transaction
 * kept the resource's lock for longer than wait_ms (0: not at all; -1: no
 * limit but lock_timeout and statement_timeout).  A first look without the
 * lock keeps a candidate that does not lead from waiting for anyone here.
 * 55000 if it leads another way than in session (0: with a lease).
 */
static int64
current_term(const DlockResource *res, text *candidate, const DlockCaller *caller,
			 int64 wait_ms, int64 session)
{
	DlockRow	row;

	dlock_store_begin();
	dlock_row_read(res, &row);
	if (dlock_holding_verdict(&row, candidate, caller, GetCurrentTimestamp()) != HOLDING_MINE)
	{
		dlock_store_end();
		return 0;
	}
	dlock_store_end();
	if (wait_ms < 0)
		dlock_change_wait(res);
	else
	{
		/* Within the wait: one try for '0', never a wait in the lock manager. */
		TimestampTz deadline = GetCurrentTimestamp() + wait_ms * 1000;
		long		sleep_ms = 1;

		while (!dlock_take_resource(res, DLOCK_CHANGE))
		{
			TimestampTz now = GetCurrentTimestamp();

			if (now >= deadline)
				return -1;
			dlock_wait_sleep(Min(sleep_ms, (long) ((deadline - now + 999) / 1000)));
			sleep_ms = Min(sleep_ms * 2, 100);
		}
	}
	dlock_store_begin();
	dlock_row_read(res, &row);
	if (dlock_holding_verdict(&row, candidate, caller, GetCurrentTimestamp()) != HOLDING_MINE)
	{
		dlock_store_end();
		dlock_resource_unlock(res, DLOCK_CHANGE);
		return 0;
	}
	/* Had only the way it was taken (1.1), as a re-entry (acquire.c). */
	if (row.session != session)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 row.session == 0 ?
				 errmsg("holder \"%s\" holds resource \"%s\" with a lease of its own",
						text_to_cstring(candidate), text_to_cstring(res->name)) :
				 errmsg("holder \"%s\" holds resource \"%s\" in session " INT64_FORMAT,
						text_to_cstring(candidate), text_to_cstring(res->name),
						row.session),
				 errhint("Re-enter a holding the way it was taken: in its session, or with a lease.")));
	return row.fence;
}

/*
 * still_leader: candidate leads res already under term, with the
 * resource's lock taken (CHANGE) and the store session open: a value given
 * (and different) is proclaimed, and the holding becomes an election's
 * however it was taken (a try_lock, say), so that its end by expiry is
 * announced with candidate, term and value like any leader's; the session
 * is closed, the lock kept only if something changed.
 */
static void
still_leader(const DlockResource *res, int64 term, text *candidate, text *value,
			 Oid owner)
{
	bool		proclaimed = false;
	bool		changed = false;
	char	   *old_holder;
	char	   *old_value;
	bool		election;
	bool		exists;

	exists = dlock_value_read(res, term, &old_holder, &old_value, &election);
	if (value != NULL)
		proclaimed = old_value == NULL || strcmp(old_value, text_to_cstring(value)) != 0;
	if (proclaimed || !exists || !election)
	{
		text	   *v = proclaimed ? value : (old_value ? cstring_to_text(old_value) : NULL);

		value_set(res, term, candidate, v, true);
		if (!exists || !election)
			term_log(res, term, candidate, v, owner);	/* a leader's term from now */
		changed = true;
	}
	if (proclaimed)
		dlock_notify_holding(res, "proclaimed", term, text_to_cstring(candidate),
							 value_cstring(value));
	dlock_store_end();
	if (!changed)
		dlock_resource_unlock(res, DLOCK_CHANGE);
}

/*
 * dlock.campaign(election, candidate, value, lease, wait, session): the
 * term once
 * elected, NULL on timeout.  The leader campaigning again gets its current
 * term, never a re-entry, however it came to lead (also while it waits); a
 * value given then (and different) is proclaimed.  The holding takes the
 * lock-delay of dlock.lock_delay, as lock() does.
 */
Datum
dlock_campaign(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *candidate;
	text	   *value;
	Interval   *lease;
	Interval   *lock_delay;
	int64		wait_ms;
	DlockCaller caller;
	int64		term;
	int64		session;
	bool		already;

	dlock_resource_init(&res, dlock_check_election(fcinfo, 0));
	candidate = dlock_session_holder_arg(fcinfo, 1, 5, dlock_check_candidate);
	value = check_value(fcinfo, 2);
	lease = dlock_check_lease(fcinfo, 3);
	wait_ms = dlock_check_wait_ms(fcinfo, 4);
	lock_delay = dlock_check_lock_delay(fcinfo, PG_NARGS());	/* the GUC */
	dlock_check_writable("dlock.campaign()");
	if (wait_ms != 0)
		dlock_table_locks_mark();	/* a waiter keeps no read lock (table.c) */
	caller = dlock_caller();
	session = dlock_session_call(fcinfo, 5, 3, &caller, wait_ms != 0,
								 &candidate, &lease);

	term = current_term(&res, candidate, &caller, wait_ms, session);
	if (term != 0)
		dlock_table_locks_forget();
	if (term < 0)
		PG_RETURN_NULL();
	if (term != 0)
	{
		still_leader(&res, term, candidate, value, caller.role);
		PG_RETURN_INT64(term);
	}

	term = dlock_campaign_acquire(&res, candidate, &caller, lease, session, wait_ms,
								  lock_delay, &already);
	dlock_table_locks_forget();
	if (term == 0)
		PG_RETURN_NULL();
	/* The resource's lock is ours until the transaction ends. */
	dlock_store_begin();
	if (already)
	{
		still_leader(&res, term, candidate, value, caller.role);
		PG_RETURN_INT64(term);
	}
	value_set(&res, term, candidate, value, true);
	term_log(&res, term, candidate, value, caller.role);
	dlock_store_end();
	dlock_notify_holding(&res, "elected", term, text_to_cstring(candidate), value_cstring(value));
	PG_RETURN_INT64(term);
}

/*
 * dlock.proclaim(election, candidate, value, term): the holder of any
 * holding changes its value; false if candidate does not hold it (under
 * that term).  Another role's holding: 42501.
 */
Datum
dlock_proclaim(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *candidate;
	text	   *value;
	int64		term;
	bool		term_given;
	DlockCaller caller;
	DlockRow	row;

	dlock_resource_init(&res, dlock_check_election(fcinfo, 0));
	candidate = dlock_check_candidate(fcinfo, 1);
	value = check_value(fcinfo, 2);
	term_given = check_term(fcinfo, 3, &term);
	dlock_check_writable("dlock.proclaim()");
	caller = dlock_caller();

	dlock_change_wait(&res);
	dlock_store_begin();
	dlock_row_read(&res, &row);
	if (!dlock_may_change(&row, candidate, &caller, GetCurrentTimestamp(), "proclaim") ||
		(term_given && term != row.fence))
	{
		dlock_store_end();
		dlock_resource_unlock(&res, DLOCK_CHANGE);
		PG_RETURN_BOOL(false);
	}
	value_set(&res, row.fence, candidate, value, false);
	dlock_store_end();
	dlock_notify_holding(&res, "proclaimed", row.fence, text_to_cstring(candidate), value_cstring(value));
	PG_RETURN_BOOL(true);
}

/*
 * dlock.resign(election, candidate, term): the holder gives the holding up
 * whatever its count; the next candidate is woken at once.  False if
 * candidate does not hold it (under that term).  Another role's: 42501.
 */
Datum
dlock_resign(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *candidate;
	int64		term;
	bool		term_given;
	DlockCaller caller;
	DlockRow	row;
	TimestampTz now;
	char	   *old_holder;
	char	   *value;
	bool		election;

	dlock_resource_init(&res, dlock_check_election(fcinfo, 0));
	candidate = dlock_check_candidate(fcinfo, 1);
	term_given = check_term(fcinfo, 2, &term);
	dlock_check_writable("dlock.resign()");
	caller = dlock_caller();

	dlock_change_wait(&res);
	now = GetCurrentTimestamp();
	dlock_store_begin();
	dlock_row_read(&res, &row);
	if (!dlock_may_change(&row, candidate, &caller, now, "resign") ||
		(term_given && term != row.fence))
	{
		dlock_store_end();
		dlock_resource_unlock(&res, DLOCK_CHANGE);
		PG_RETURN_BOOL(false);
	}
	(void) dlock_value_read(&res, row.fence, &old_holder, &value, &election);
	dlock_row_release(&res, 0, now);
	dlock_client_ticket_release(&res, candidate, row.owner);
	dlock_store_end();
	dlock_notify_holding(&res, "resigned", row.fence, text_to_cstring(candidate), value);
	dlock_wake_after_commit(res.hash);
	dlock_note_release();
	dlock_count(DLOCK_STAT_RELEASED);
	PG_RETURN_BOOL(true);
}
