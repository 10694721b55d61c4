/*-------------------------------------------------------------------------
 *
 * session.c
 *		Sessions (1.1, [sessions]): open_session, keepalive, close_session,
 *		an acquisition's session => id (dlock_session_use), and the
 *		reaper's removal of ended sessions with no holding left.
 *
 * A holding taken in a session has its session's id in its row; rows.c
 * reads its expiry and ttl (session_row.c) from the session's row (dlock.session_rows),
 * so keepalive writes one row however many holdings the session has.
 * What protects the session's row:
 * - keepalive locks it FOR NO KEY UPDATE, then reads the clock: an ended
 *   session is never revived;
 * - whoever acts on a session's end (an acquirer taking over, the reaper)
 *   first locks it FOR SHARE SKIP LOCKED (session_row.c's dlock_session_lapsed):
 *   a keepalive in flight makes the holding busy, and a later keepalive
 *   waits for that transaction and then sees the end;
 * - an acquisition admitted in a session takes the session's lock-manager
 *   lock (DLOCK_LOCKTAG_SESSION) in ShareLock without waiting, then reads
 *   the row (one that does not wait takes it before its first read);
 *   close_session takes it in ExclusiveLock before it locks the row FOR
 *   UPDATE: an acquisition in flight ends first, and its holding is
 *   released with the others.  Keepalive takes neither.  A wait in lock()
 *   locks nothing until admitted, and polls its session: it ends with
 *   55000 once it ended.
 * Ids are fences (fence.c): never handed out twice in the database.
 * Only the role that opened a session acquires in it, keeps it alive or
 * closes it (superusers may keep alive and close).
 *
 * Backend-local: no shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(dlock_open_session);
PG_FUNCTION_INFO_V1(dlock_keepalive);
PG_FUNCTION_INFO_V1(dlock_close_session);

static const Oid id_type[1] = {INT8OID};

/* role_name: a role's name for messages. */
static const char *
role_name(Oid role)
{
	const char *name = GetUserNameFromId(role, true);

	return name ? name : "(dropped)";
}

/* session_not_null: the session argument of keepalive and close_session. */
static int64
session_not_null(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("session must not be null")));
	return PG_GETARG_INT64(argno);
}

/*
 * lock_row: lock session id's row in the given way ("FOR NO KEY UPDATE",
 * "FOR UPDATE"); false if none was locked.  Sets the expiry and ttl
 * found.  Inside a store session.
 */
static bool
lock_row(int64 id, int how, TimestampTz *expires, Interval *ttl)
{
	static SPIPlanPtr plans[2];
	static const char *const sql[2] = {
		"SELECT s.expires_at, s.ttl FROM dlock.session_rows s"
		" WHERE s.id OPERATOR(pg_catalog.=) $1 FOR NO KEY UPDATE",
		"SELECT s.expires_at, s.ttl FROM dlock.session_rows s"
		" WHERE s.id OPERATOR(pg_catalog.=) $1 FOR UPDATE"
	};
	Datum		values[1] = {Int64GetDatum(id)};
	bool		isnull;

	if (dlock_store_exec(&plans[how], sql[how], 1, id_type, values, NULL,
						 false) == 0)
		return false;
	*expires = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 1, &isnull));
	*ttl = *DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0],
											SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}
#define LOCK_KEEPALIVE	0
#define LOCK_CLOSE		1

/* session_tag: session id's lock-manager lock (DLOCK_LOCKTAG_SESSION). */
static void
session_tag(LOCKTAG *tag, int64 id)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) ((uint64) id >> 32),
						 (uint32) id, DLOCK_LOCKTAG_SESSION);
}

/* check_owner: 42501 unless the caller is the session's role or a superuser. */
static void
check_owner(const DlockSession *s, const DlockCaller *caller,
			const char *action)
{
	if (s->owner == caller->role || caller->is_super)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s session " INT64_FORMAT " of role \"%s\"",
					action, s->id, role_name(s->owner)),
			 errdetail("Only the role that opened a session, or a superuser, can %s it.",
					   action)));
}

/* dlock.open_session(ttl, holder) */
Datum
dlock_open_session(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[6] = {INT8OID, TEXTOID, REGROLEOID, INTERVALOID,
	TIMESTAMPTZOID, TIMESTAMPTZOID};
	text	   *holder;
	Interval   *ttl;
	DlockCaller caller;
	Datum		values[6];
	TimestampTz now;
	TimestampTz expires;
	int64		id;

	holder = dlock_check_holder(fcinfo, 1);
	ttl = dlock_check_ttl(fcinfo, 0);
	dlock_check_writable("dlock.open_session()");
	caller = dlock_caller();

	dlock_store_begin();
	/* A fence: never drawn twice, not across a restore or re-installation. */
	id = dlock_next_fence();
	now = GetCurrentTimestamp();
	expires = dlock_lease_expiry(now, ttl);
	values[0] = Int64GetDatum(id);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(caller.role);
	values[3] = PointerGetDatum(ttl);
	values[4] = TimestampTzGetDatum(now);
	values[5] = TimestampTzGetDatum(expires);
	(void) dlock_store_exec(&plan,
							"INSERT INTO dlock.session_rows"
							" (id, holder, owner, ttl, opened_at, renewed_at, expires_at)"
							" VALUES ($1, $2, $3, $4, $5, $5, $6)",
							6, types, values, NULL, false);
	dlock_store_end();
	dlock_note_acquisition(expires);
	PG_RETURN_INT64(id);
}

/*
 * dlock_session_keepalive: extend session id to now + its ttl, for
 * keepalive and renew of a session's holding; *isnull when it has ended
 * (closed, its ttl passed, or never opened): never revived.  42501 for
 * another role's session (superusers aside).
 */
Datum
dlock_session_keepalive(int64 id, const DlockCaller *caller, bool *isnull)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[3] = {INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	DlockSession s;
	Datum		values[3];
	TimestampTz now;
	TimestampTz expires;
	Interval	ttl;

	*isnull = true;
	dlock_store_begin();
	/* A look first: an ended session (or another role's) takes no lock. */
	if (!dlock_session_read(id, &s))
	{
		dlock_store_end();
		return (Datum) 0;
	}
	check_owner(&s, caller, "keep alive");
	/* Locked, then the clock (see the top of this file). */
	if (s.expires_at <= GetCurrentTimestamp() ||
		!lock_row(id, LOCK_KEEPALIVE, &expires, &ttl) ||
		expires <= (now = GetCurrentTimestamp()))
	{
		dlock_store_end();
		return (Datum) 0;
	}
	expires = dlock_lease_expiry(now, &ttl);
	values[0] = Int64GetDatum(id);
	values[1] = TimestampTzGetDatum(expires);
	values[2] = TimestampTzGetDatum(now);
	(void) dlock_store_exec(&plan,
							"UPDATE dlock.session_rows s SET expires_at = $2, renewed_at = $3"
							" WHERE s.id OPERATOR(pg_catalog.=) $1",
							3, types, values, NULL, false);
	dlock_store_end();
	dlock_note_acquisition(expires);
	dlock_count(DLOCK_STAT_RENEWED);
	*isnull = false;
	return TimestampTzGetDatum(expires);
}

/* dlock.keepalive(session) */
Datum
dlock_keepalive(PG_FUNCTION_ARGS)
{
	int64		id = session_not_null(fcinfo, 0);
	DlockCaller caller;
	Datum		expires;
	bool		isnull;

	dlock_check_writable("dlock.keepalive()");
	caller = dlock_caller();
	expires = dlock_session_keepalive(id, &caller, &isnull);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(expires);
}

/*
 * resources_of: the resources of session id's holdings in dlock.leases
 * (leases) or in dlock.shares and dlock.permits, as text *, in order.
 */
static List *
resources_of(int64 id, bool leases)
{
	static SPIPlanPtr plan_leases = NULL;
	static SPIPlanPtr plan_shares = NULL;
	Datum		values[1] = {Int64GetDatum(id)};
	List	   *result = NIL;

	(void) dlock_store_exec(leases ? &plan_leases : &plan_shares,
							leases ?
							"SELECT l.resource FROM dlock.leases l"
							" WHERE l.session OPERATOR(pg_catalog.=) $1 AND l.holder IS NOT NULL"
							" ORDER BY 1" :
							"SELECT h.resource FROM dlock.shares h"
							" WHERE h.session OPERATOR(pg_catalog.=) $1"
							" UNION SELECT p.resource FROM dlock.permits p"
							" WHERE p.session OPERATOR(pg_catalog.=) $1 ORDER BY 1",
							1, id_type, values, NULL, true);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		result = lappend(result,
						 dlock_store_copy_text(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc,
															 1, &isnull)));
	}
	return result;
}

/*
 * release_exclusive: release session id's exclusive holding of res, as
 * unlock releases it (its event, the wakeup, no lock-delay); false if it
 * has none there.  Takes the resource's lock (waiting for a pin).
 */
static bool
release_exclusive(const DlockResource *res, int64 id)
{
	DlockRow	row;
	TimestampTz now;

	dlock_change_wait(res);
	now = GetCurrentTimestamp();
	dlock_row_read(res, &row);
	if (!row.held || row.session != id)
	{
		dlock_resource_unlock(res, DLOCK_CHANGE);
		return false;
	}
	dlock_row_release(res, 0, now);
	dlock_client_ticket_release(res, cstring_to_text(row.holder), row.owner);
	dlock_notify(res, "released", row.fence);
	dlock_wake_after_commit(res->hash);
	dlock_count(DLOCK_STAT_RELEASED);
	return true;
}

/*
 * release_shares: release session id's shared holdings and holdings of
 * permits of res (each with its event and wakeup); how many.  As unlock
 * of a shared holding: res's lock in SHARE mode and the share-row tag of
 * the session's holder, so that it neither waits for other holders'
 * transactions nor makes them wait.
 */
static int
release_shares(const DlockResource *res, const DlockSession *s)
{
	text	   *holder = cstring_to_text(s->holder);
	ListCell   *lc;
	int			n = 0;

	(void) dlock_resource_lock(res, DLOCK_SHARE, true);
	(void) dlock_share_row_lock(res, holder, s->owner, DLOCK_CHANGE, true);
	foreach(lc, dlock_row_read_shares(res))
	{
		DlockRow   *sh = lfirst(lc);

		if (sh->session != s->id)
			continue;
		if (!dlock_share_change(res, sh, 0, NULL, GetCurrentTimestamp(), 0))
			elog(ERROR, "dlock: the shared holding of \"%s\" changed meanwhile",
				 text_to_cstring(res->name));
		dlock_client_ticket_release(res, cstring_to_text(sh->holder), sh->owner);
		dlock_notify(res, "released", sh->fence);
		dlock_wake_released(res->hash, sh, true);
		dlock_count(DLOCK_STAT_RELEASED);
		n++;
	}
	if (n == 0)
	{
		dlock_share_row_unlock(res, holder, s->owner, DLOCK_CHANGE);
		dlock_resource_unlock(res, DLOCK_SHARE);
	}
	return n;
}

/* dlock.close_session(session) */
Datum
dlock_close_session(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	int64		id = session_not_null(fcinfo, 0);
	DlockCaller caller;
	DlockSession s;
	TimestampTz expires;
	Interval	ttl;
	Datum		values[1] = {Int64GetDatum(id)};
	ListCell   *lc;
	int32		n = 0;
	LOCKTAG		tag;

	dlock_check_writable("dlock.close_session()");
	caller = dlock_caller();

	dlock_store_begin();
	if (!dlock_session_read(id, &s))
	{
		dlock_store_end();
		PG_RETURN_NULL();
	}
	check_owner(&s, &caller, "close");
	if (s.expires_at <= GetCurrentTimestamp())
	{
		dlock_store_end();
		PG_RETURN_NULL();
	}
	/* Acquisitions in flight end first; then keepalives and takeovers. */
	session_tag(&tag, id);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	if (!lock_row(id, LOCK_CLOSE, &expires, &ttl) ||
		expires <= GetCurrentTimestamp())
	{
		dlock_store_end();
		PG_RETURN_NULL();
	}
	foreach(lc, resources_of(id, true))
	{
		DlockResource res;

		dlock_resource_init(&res, cstring_to_text(lfirst(lc)));
		if (release_exclusive(&res, id))
			n++;
	}
	foreach(lc, resources_of(id, false))
	{
		DlockResource res;

		dlock_resource_init(&res, cstring_to_text(lfirst(lc)));
		n += release_shares(&res, &s);
	}
	(void) dlock_store_exec(&plan,
							"DELETE FROM dlock.session_rows s WHERE s.id OPERATOR(pg_catalog.=) $1",
							1, id_type, values, NULL, false);
	dlock_store_end();
	if (n > 0)
		dlock_note_release();
	PG_RETURN_INT32(n);
}

/* session_ended: 55000 for an acquisition in session id, which has ended. */
static void
session_ended(int64 id)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("session " INT64_FORMAT " has ended", id),
			 errdetail("It was closed, its ttl passed, or it was never opened; its holdings are gone."),
			 errhint("Open a new session (dlock.open_session()).")));
}

/*
 * The session whose lock the current call took before it read the row
 * (dlock_session_use of an acquisition that does not wait), and the
 * expiry read: no close can have ended it since.  Set by every
 * dlock_session_use; nothing in between gives the lock back (no
 * subtransaction in the acquisition path).
 */
static int64 locked_id = 0;
static TimestampTz locked_expires = 0;

/*
 * share_lock: session id's lock in ShareLock, without waiting; 55000 if a
 * close_session holds it (in flight).
 */
static void
share_lock(int64 id)
{
	LOCKTAG		tag;

	session_tag(&tag, id);
	if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		session_ended(id);
}

/*
 * dlock_session_hold: an acquisition admitted in session id shares its
 * lock until the transaction ends (close_session waits for it), then
 * reads its row on the latest snapshot, which sees a close that ended
 * before; 55000 if the session has ended meanwhile (a wait in lock()
 * outlived it) or a close_session is in flight.  A call that took the
 * lock before its first read needs no second one.  Inside a store session.
 */
void
dlock_session_hold(int64 id)
{
	LOCKTAG		tag;
	DlockSession s;

	session_tag(&tag, id);
	if (locked_id == id && locked_expires > GetCurrentTimestamp() &&
		DLOCK_LOCK_HELD_BY_ME(&tag, ShareLock))
		return;
	share_lock(id);
	if (!dlock_session_read(id, &s) || s.expires_at <= GetCurrentTimestamp())
		session_ended(id);
}

/*
 * dlock_session_poll: a refused attempt in session id: 55000 if it has
 * ended; else when to look again at the latest (its expiry, or a poll:
 * close_session wakes no waiter).  Inside a store session.
 */
TimestampTz
dlock_session_poll(int64 id, TimestampTz now)
{
	DlockSession s;

	if (!dlock_session_read(id, &s) || s.expires_at <= now)
		session_ended(id);
	return Min(s.expires_at, now + (TimestampTz) 1000 * 1000);
}

/*
 * dlock_session_use: an acquisition's session => id: the holder of its
 * holding (the session's).  22023 for a lease given too, or a holder that
 * is neither the session's nor this backend's session_holder() (the
 * default); 42501 for another role's session (superusers too); 55000 for
 * a session that has ended or never was.  Sets *ttl, the session's.  An
 * acquisition that waits locks the session once it is admitted
 * (dlock_session_hold); one that does not, before the read.
 */
text *
dlock_session_use(int64 id, text *holder, const Interval *lease,
				  const DlockCaller *caller, bool waits, Interval **ttl)
{
	DlockSession s;
	bool		found;
	char		mine[32];
	text	   *result;

	if (lease != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("session and lease cannot both be given"),
				 errdetail("A holding in a session lives as long as its session: it has no lease of its own.")));
	*ttl = palloc(sizeof(Interval));
	locked_id = 0;
	if (!waits)
		share_lock(id);
	dlock_store_begin();
	found = dlock_session_read(id, &s);
	if (found && s.owner != caller->role)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to acquire in session " INT64_FORMAT " of role \"%s\"",
						id, role_name(s.owner)),
				 errdetail("Only the role that opened a session acquires in it.")));
	/* A wait in lock() locks nothing yet: it must not hold close_session off. */
	if (!found || s.expires_at <= GetCurrentTimestamp())
		session_ended(id);
	**ttl = s.ttl;

	/*
	 * The default holder (session_holder(), evaluated by the caller) is
	 * told apart by this backend's pid, as the portable edition does.
	 */
	snprintf(mine, sizeof(mine), "pid:%d:", MyProcPid);
	if (holder != NULL &&
		!(VARSIZE_ANY_EXHDR(holder) == strlen(s.holder) &&
		  memcmp(VARDATA_ANY(holder), s.holder, strlen(s.holder)) == 0) &&
		!(VARSIZE_ANY_EXHDR(holder) >= strlen(mine) &&
		  memcmp(VARDATA_ANY(holder), mine, strlen(mine)) == 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("holder \"%s\" is not the holder of session " INT64_FORMAT,
						text_to_cstring(holder), id),
				 errdetail("A session's holdings are its holder's (\"%s\").", s.holder),
				 errhint("Leave holder out (or NULL) when you pass session.")));
	{
		MemoryContext old = MemoryContextSwitchTo(dlock_store_context());

		result = cstring_to_text(s.holder);
		MemoryContextSwitchTo(old);
	}
	dlock_store_end();
	if (!waits)
	{
		locked_id = id;
		locked_expires = s.expires_at;
	}
	return result;
}

/*
 * dlock_session_call: an acquisition's session => id (1.1, argument
 * argno): the holding's holder (the session's) into *holder and the
 * session's ttl into *lease (lease_argno: the lease argument, which must
 * be NULL then); returns the session, or 0 without one (nothing changed).
 * After the call's argument checks, with the caller captured.
 */
int64
dlock_session_call(FunctionCallInfo fcinfo, int argno, int lease_argno,
				   const DlockCaller *caller, bool waits, text **holder,
				   Interval **lease)
{
	int64		session;

	if (!dlock_session_arg(fcinfo, argno, &session))
		return 0;
	*holder = dlock_session_use(session, *holder,
								PG_ARGISNULL(lease_argno) ? NULL : *lease,
								caller, waits, lease);
	return session;
}

/*
 * dlock_session_holder_arg: the holder (or candidate) argument, checked by
 * check; with a session (argument session_argno) it may be NULL: the
 * session's holder.
 */
text *
dlock_session_holder_arg(FunctionCallInfo fcinfo, int argno, int session_argno,
						 text *(*check) (FunctionCallInfo, int))
{
	int64		session;

	if (PG_ARGISNULL(argno) && dlock_session_arg(fcinfo, session_argno, &session))
		return NULL;
	return check(fcinfo, argno);
}

/*
 * dlock_session_candidates: up to limit resources with a holding of a
 * session that has ended by now (1.1), as text * in the store session's
 * caller context; NIL under older SQL.  Inside a store session.
 */
List *
dlock_session_candidates(TimestampTz now, int limit)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];
	List	   *result = NIL;

	if (limit <= 0 || !dlock_sessions_installed())
		return NIL;
	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(limit);
	(void) dlock_store_exec(&plan,
							"SELECT h.resource FROM dlock.session_rows s,"
							" LATERAL (SELECT l.resource FROM dlock.leases l"
							"           WHERE l.session OPERATOR(pg_catalog.=) s.id AND l.holder IS NOT NULL"
							"          UNION SELECT x.resource FROM dlock.shares x"
							"           WHERE x.session OPERATOR(pg_catalog.=) s.id"
							"          UNION SELECT p.resource FROM dlock.permits p"
							"           WHERE p.session OPERATOR(pg_catalog.=) s.id) h"
							" WHERE s.expires_at OPERATOR(pg_catalog.<=) $1 LIMIT $2",
							2, types, values, NULL, true);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		char	   *r = dlock_store_copy_text(SPI_getbinval(SPI_tuptable->vals[i],
														   SPI_tuptable->tupdesc,
														   1, &isnull));
		MemoryContext old = MemoryContextSwitchTo(dlock_store_context());

		result = lappend(result, cstring_to_text(r));
		MemoryContextSwitchTo(old);
	}
	return result;
}

/*
 * dlock_sessions_min_expiry: the earliest expiry of a session, or DT_NOEND
 * (none, or older SQL), for the reaper's hint.  Inside a store session.
 */
TimestampTz
dlock_sessions_min_expiry(void)
{
	static SPIPlanPtr plan = NULL;
	bool		isnull;
	Datum		d;

	if (!dlock_sessions_installed() ||
		dlock_store_exec(&plan, "SELECT pg_catalog.min(s.expires_at) FROM dlock.session_rows s",
						 0, NULL, NULL, NULL, true) != 1)
		return DT_NOEND;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? DT_NOEND : DatumGetTimestampTz(d);
}

/*
 * dlock_sessions_refresh: after a promotion at promoted_at, every session
 * live then and still now gets at least promoted_at + its ttl, as the
 * leased holdings do (promote.c); one in a keepalive, a close or a
 * takeover in flight is skipped (SKIP LOCKED).  How many; durable like a
 * keepalive.
 */
int64
dlock_sessions_refresh(TimestampTz promoted_at)
{
	static const Oid types[2] = {TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[2];
	TimestampTz min_expiry = DT_NOEND;
	uint64		n;

	if (!dlock_sessions_installed())
		return 0;
	values[0] = TimestampTzGetDatum(promoted_at);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	dlock_store_begin();
	dlock_store_spi();
	if (SPI_execute_with_args("UPDATE dlock.session_rows s"
							  "   SET expires_at = $1 OPERATOR(pg_catalog.+) s.ttl"
							  " WHERE s.id OPERATOR(pg_catalog.=) ANY (ARRAY("
							  "  SELECT x.id FROM dlock.session_rows x"
							  "   WHERE x.expires_at OPERATOR(pg_catalog.>) $1"
							  "     AND x.expires_at OPERATOR(pg_catalog.>) $2"
							  "     AND x.expires_at OPERATOR(pg_catalog.<) ($1 OPERATOR(pg_catalog.+) x.ttl)"
							  "   FOR UPDATE SKIP LOCKED))"
							  " RETURNING s.expires_at",
							  2, (Oid *) types, values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not update dlock.session_rows");
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		TimestampTz e = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, 1, &isnull));

		min_expiry = Min(min_expiry, e);
	}
	dlock_store_end();
	if (n > 0)
		dlock_note_acquisition(min_expiry);
	return (int64) n;
}

/*
 * dlock_sessions_reap: remove the sessions that have ended with no
 * holding left (rows another transaction has locked are skipped); how
 * many.  For the reaper, after it ended their holdings.
 */
int
dlock_sessions_reap(void)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	uint64		n;

	if (!dlock_sessions_installed())
		return 0;
	values[0] = TimestampTzGetDatum(GetCurrentTimestamp());
	dlock_store_begin();
	n = dlock_store_exec(&plan,
						 "DELETE FROM dlock.session_rows s"
						 " WHERE s.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
						 "  SELECT x.ctid FROM dlock.session_rows x"
						 "   WHERE x.expires_at OPERATOR(pg_catalog.<=) $1"
						 "     AND NOT EXISTS (SELECT FROM dlock.leases l"
						 "      WHERE l.session OPERATOR(pg_catalog.=) x.id AND l.holder IS NOT NULL)"
						 "     AND NOT EXISTS (SELECT FROM dlock.shares h"
						 "      WHERE h.session OPERATOR(pg_catalog.=) x.id)"
						 "     AND NOT EXISTS (SELECT FROM dlock.permits h"
						 "      WHERE h.session OPERATOR(pg_catalog.=) x.id)"
						 "   FOR UPDATE SKIP LOCKED))",
						 1, types, values, NULL, false);
	dlock_store_end();
	return (int) n;
}
