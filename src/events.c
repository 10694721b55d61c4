/*-------------------------------------------------------------------------
 *
 * events.c
 *		NOTIFY events for releases, expiries and breaks.
 *
 * The channel is dlock.channel(resource), "dlock_" followed by the md5 of
 * the resource in hex: 38 bytes whatever the resource, and an identifier
 * that needs no quoting.  The payload is JSON built with escape_json; no
 * SQL is built at all (Async_Notify is what NOTIFY itself calls), and
 * PostgreSQL delivers it only if and after the transaction commits.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "commands/async.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"

PG_FUNCTION_INFO_V1(dlock_channel);

/*
 * dlock_notify: queue event (released, expired, broken) for res with the
 * fence of the holding that ended.
 */
void
dlock_notify(const DlockResource *res, const char *event, int64 fence)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"event\":");
	escape_json(&buf, event);
	appendStringInfoString(&buf, ",\"resource\":");
	escape_json(&buf, text_to_cstring(res->name));
	appendStringInfo(&buf, ",\"fence\":" INT64_FORMAT "}", fence);
	Async_Notify(res->channel, buf.data);
	pfree(buf.data);
}

/* dlock.channel(resource): the LISTEN channel of a resource. */
Datum
dlock_channel(PG_FUNCTION_ARGS)
{
	DlockResource res;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	PG_RETURN_TEXT_P(cstring_to_text(res.channel));
}
