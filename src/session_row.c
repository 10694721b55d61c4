/*-------------------------------------------------------------------------
 *
 * session_row.c
 *		A session's row of dlock.session_rows (1.1), read for the holdings
 *		in it: by direct heap access (table.c) where the row is only read,
 *		through SPI where its end must be locked in (dlock_session_lapsed).
 *
 * A holding in a session has its session's expiry and ttl (rows.c's
 * with_session), and ends only once its session's end is locked in
 * (ending.c, admit.c, reap.c).  Opening, keepalive and closing are
 * session.c's.  Under the 1.0 SQL there is no such table: no row is found.
 *
 * Concurrency: the read hints are backend-local; a keepalive and a
 * session's end are serialized by the row lock dlock_session_lapsed takes.
 *
 *-------------------------------------------------------------------------
 */
#include "table.h"

#include "access/table.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* dlock.session_rows (1.1): a session's holder, role, ttl and expiry. */
enum
{
	X_ID, X_HOLDER, X_OWNER, X_TTL, X_OPENED_AT, X_RENEWED_AT, X_EXPIRES_AT,
	X_NUM
};
static const char *const session_cols[X_NUM] = {
	"id", "holder", "owner", "ttl", "opened_at", "renewed_at", "expires_at"
};
static TableInfo session_rows = {"session_rows", session_cols, X_NUM, X_NUM};

/*
 * Where a session's row was last found (fetch_row_at's hint), for a few
 * sessions: a backend behind a pool serves several.  Slot by id.
 */
#define SESSION_HINTS 16
typedef struct SessionHint
{
	int64		id;
	ItemPointerData tid;
	Buffer		buf;			/* the buffer that held tid's block */
} SessionHint;
static SessionHint hints[SESSION_HINTS];

/*
 * dlock_session_read: session id's row on the latest snapshot into *s
 * (holder copied into the store session's caller context); false if
 * there is none (closed, reaped, never opened, or the 1.0 SQL).
 */
bool
dlock_session_read(int64 id, DlockSession *s)
{
	TableInfo  *t = &session_rows;
	Relation	rel = open_table(t, AccessShareLock);
	RowImage	img;
	bool		found;
	SessionHint *h;

	memset(s, 0, sizeof(*s));
	if (rel == NULL)
		return false;
	h = &hints[(uint64) id % SESSION_HINTS];
	if (h->id != id)
		ItemPointerSetInvalid(&h->tid);
	h->id = id;
	found = fetch_row_at(rel, t, X_ID, id, &h->tid, &h->buf, &img);
	if (found)
	{
		MemoryContext old = MemoryContextSwitchTo(dlock_store_context());

		s->id = id;
		s->holder = TextDatumGetCString(COL(t, &img, X_HOLDER));
		MemoryContextSwitchTo(old);
		s->owner = DatumGetObjectId(COL(t, &img, X_OWNER));
		s->ttl = *DatumGetIntervalP(COL(t, &img, X_TTL));
		s->renewed_at = DatumGetTimestampTz(COL(t, &img, X_RENEWED_AT));
		s->expires_at = DatumGetTimestampTz(COL(t, &img, X_EXPIRES_AT));
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
	return found;
}

/*
 * dlock_sessions_installed: is the 1.1 SQL there (sessions)?
 */
bool
dlock_sessions_installed(void)
{
	Relation	rel = open_table(&session_rows, AccessShareLock);

	if (rel == NULL)
		return false;
	table_close(rel, NoLock);
	return true;
}

/*
 * dlock_session_lapsed: has session id ended, with that end locked in?
 * Its row is locked FOR SHARE SKIP LOCKED to the end of the transaction:
 * true when the row is gone, or locked and past its expiry; false while
 * it lives, or while another transaction changes it (a keepalive or a
 * close in flight: busy).  A keepalive that comes later waits for this
 * transaction and then sees the end: a session's end and a keepalive
 * never both win.  Inside a store session.
 */
bool
dlock_session_lapsed(int64 id)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_exists = NULL;
	static const Oid types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};
	bool		isnull;
	TimestampTz e;

	if (dlock_store_exec(&plan,
						 "SELECT s.expires_at FROM dlock.session_rows s"
						 " WHERE s.id OPERATOR(pg_catalog.=) $1 FOR SHARE SKIP LOCKED",
						 1, types, values, NULL, false) == 0)
		return dlock_store_exec(&plan_exists,
								"SELECT 1 FROM dlock.session_rows s"
								" WHERE s.id OPERATOR(pg_catalog.=) $1",
								1, types, values, NULL, true) == 0;
	e = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull));
	return e <= GetCurrentTimestamp();
}
