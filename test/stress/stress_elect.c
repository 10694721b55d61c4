/*
 * stress_elect.c: the --elect mode of dlock_stress: leader election under
 * kills and pauses.
 *
 * Each worker is a candidate of one election (the --resource).  It
 * campaigns (dlock.campaign with the --lease and --wait), and while it
 * leads it increments the counter with the same read, window, write
 * pattern as the lock mode, the write fenced by its term
 * (dlock.assert_fence(election, term) in the write's transaction).  It
 * renews (dlock.renew(..., term)) before each further increment, and after
 * one to three increments it resigns (dlock.resign(..., term)) and then
 * tries one more write under the term it just gave up: that write must be
 * refused (55P03), whoever leads by then.  The parent's chaos (in
 * dlock_stress.c) SIGKILLs and SIGSTOPs workers in their read-to-write
 * window, which only a leader reaches: a killed leader's term ends when
 * its lease does, and a leader paused beyond its lease must have its write
 * refused when it is resumed.
 *
 * verify_elect checks, on top of the lock mode's checks (every committed
 * increment counted, values 1..N in write order):
 *   - in write order terms never go down, and each term's writes are all
 *     by one candidate (no two leaders' writes interleave under a term:
 *     a new leader's term is strictly greater than the previous one's);
 *   - no write under a term its candidate had resigned was accepted, and
 *     that was tried at least once;
 *   - there were several leaders (terms) and resignations.
 *
 * Shared state: the worker's own slot in the Shared mapping (stress.h):
 * its counters, bumped atomically, and its state, the chaos handshake.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stress.h"

/* read_counter: the counter's value; -1 on error (reported). */
static long
read_counter(PGconn *conn)
{
	PGresult   *res = exec_ok(conn, "SELECT value FROM stress_counter WHERE id = 1",
							  0, NULL, NULL);
	long		v;

	if (!res)
		return -1;
	v = atol(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

/*
 * resign: dlock.resign(election, candidate, term); 1 if it led under that
 * term, 0 if not, -1 on error.
 */
static int
resign(PGconn *conn, const char *candidate, const char *term)
{
	const char *p[3] = {resource, candidate, term};
	PGresult   *res = exec_ok(conn, "SELECT dlock.resign($1, $2, $3::bigint)", 3, p, NULL);
	int			r;

	if (!res)
		return -1;
	r = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return r;
}

/*
 * step_down: the leader resigns its term, then tries a write under the
 * term it gave up (which the fence must refuse).  -1 on an error.
 */
static int
step_down(PGconn *conn, Slot *slot, const char *candidate, const char *term)
{
	long		v;
	int			w;

	switch (resign(conn, candidate, term))
	{
		case 1:
			bump(&slot->resigns);
			break;
		case 0:
			bump(&slot->lost_unlocks);
			break;
		default:
			return -1;
	}
	if ((v = read_counter(conn)) < 0)
		return -1;
	bump(&slot->old_term_probes);
	w = write_increment(conn, term, v, candidate);
	if (w < 0)
		return -1;
	if (w == 1)
	{
		bump(&slot->old_term_accepted);
		bump(&slot->committed);
		bump(&shared->committed_total);
		fprintf(stderr, "dlock_stress: WRITE UNDER A RESIGNED TERM accepted"
				" from %s (term %s)\n", candidate, term);
	}
	return 0;
}

/*
 * lead_term: one term of a leader: one to three fenced increments (the
 * lease renewed under the term before each but the first), then
 * step_down; the term ends early when the renewal finds the lease gone
 * or a write is fenced off.  Exits once the counter has reached the
 * target.  -1 on an error, else 0 (campaign again).
 */
static int
lead_term(PGconn *conn, Slot *slot, const char *candidate, const char *lease,
		  const char *term)
{
	int			nwrites = 1 + (int) (random() % 3);
	int			k;

	for (k = 0;; k++)
	{
		long		v;
		bool		paused;
		int			w;

		if (k > 0)
		{
			const char *p_renew[4] = {resource, candidate, lease, term};
			PGresult   *res;
			bool		lost;

			if (!(res = exec_ok(conn, "SELECT dlock.renew($1, $2, $3::interval, $4::bigint)",
								4, p_renew, NULL)))
				return -1;
			lost = PQgetisnull(res, 0, 0);
			PQclear(res);
			if (lost)
			{
				/* the lease ran out (a slow machine): campaign again */
				bump(&slot->lost_renewals);
				return 0;
			}
		}
		if ((v = read_counter(conn)) < 0)
			return -1;
		if (v >= target)
		{
			/* All done: hand over, so the next candidate sees it too. */
			if (resign(conn, candidate, term) < 0)
				return -1;
			set_state(slot, ST_DONE);
			PQfinish(conn);
			exit(0);
		}

		paused = wait_in_window(slot);
		w = write_increment(conn, term, v, candidate);
		set_state(slot, ST_IDLE);
		if (w < 0)
			return -1;
		if (w == 0)
		{
			bump(&slot->fenced);
			if (paused)
				bump(&slot->fenced_after_pause);
			if (verbose)
				fprintf(stderr, "dlock_stress: %s fenced off (term %s)%s\n",
						candidate, term, paused ? " after a pause" : "");
			return 0;			/* no longer the leader: campaign again */
		}
		bump(&slot->committed);
		bump(&shared->committed_total);
		if (paused)
		{
			bump(&slot->stale_writes);
			fprintf(stderr, "dlock_stress: STALE WRITE accepted from %s"
					" (term %s) after a pause beyond its lease\n", candidate, term);
		}
		if (k + 1 >= nwrites)
			return step_down(conn, slot, candidate, term);
	}
}

/*
 * elect_worker_main: one candidate's loop (see the banner) until the
 * counter reaches the target.  Never returns.
 */
void
elect_worker_main(Slot *slot, int slotno)
{
	PGconn	   *conn = connect_or_die(EXIT_WORKER_ERROR);
	char		candidate[64];
	char		value[64];
	char		lease[32];
	char		wait[32];

	snprintf(candidate, sizeof(candidate), "cand-%d.%d-%d", slotno,
			 slot->generation, (int) getpid());
	snprintf(value, sizeof(value), "pid %d", (int) getpid());
	snprintf(lease, sizeof(lease), "%ld milliseconds", lease_ms);
	snprintf(wait, sizeof(wait), "%ld milliseconds", wait_ms);
	srandom((unsigned) getpid());

	for (;;)
	{
		const char *p_campaign[5] = {resource, candidate, value, lease, wait};
		PGresult   *res;
		char		term[32];

		if (now_s() - start_time > max_seconds)
			exit(EXIT_WORKER_TIMEOUT);
		set_state(slot, ST_IDLE);
		res = exec_ok(conn, "SELECT dlock.campaign($1, $2, $3, $4::interval, $5::interval)",
					  5, p_campaign, NULL);
		if (!res)
			break;
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			bump(&slot->lock_timeouts);
			continue;
		}
		snprintf(term, sizeof(term), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		bump(&slot->terms);
		if (lead_term(conn, slot, candidate, lease, term) < 0)
			break;
	}
	bump(&slot->errors);
	PQfinish(conn);
	exit(EXIT_WORKER_ERROR);
}

/*
 * verify_elect: the election checks of the banner, on the log read on a
 * fresh connection and the slots' counters.  Returns the failed checks.
 */
int
verify_elect(void)
{
	PGconn	   *conn = connect_or_die(2);
	PGresult   *res;
	long		rows,
				i,
				bad_order_at = -1,
				shared_term_at = -1,
				logged_terms = 0;
	long		terms = 0,
				resigns = 0,
				lost_renewals = 0,
				probes = 0,
				accepted = 0;
	long long	prev = -1;
	char		prev_holder[64] = "";
	int			failed = 0;

	for (i = 0; i < nclients; i++)
	{
		Slot	   *s = &shared->slots[i];

		terms += s->terms;
		resigns += s->resigns;
		lost_renewals += s->lost_renewals;
		probes += s->old_term_probes;
		accepted += s->old_term_accepted;
	}

	res = exec_ok(conn, "SELECT fence, holder FROM stress_log ORDER BY seq", 0, NULL, NULL);
	if (!res)
	{
		printf("FAIL: cannot read stress_log\n");
		return 1;
	}
	rows = PQntuples(res);
	for (i = 0; i < rows; i++)
	{
		long long	f = atoll(PQgetvalue(res, i, 0));
		const char *h = PQgetvalue(res, i, 1);

		if (f < prev && bad_order_at < 0)
			bad_order_at = i;
		if (f == prev && strcmp(h, prev_holder) != 0 && shared_term_at < 0)
		{
			shared_term_at = i;
			fprintf(stderr, "dlock_stress: term %lld written by %s and %s\n",
					f, prev_holder, h);
		}
		if (f != prev)
			logged_terms++;
		prev = f;
		snprintf(prev_holder, sizeof(prev_holder), "%s", h);
	}
	PQclear(res);
	PQfinish(conn);

	printf("terms won:            %ld (%ld of them wrote)\n", terms, logged_terms);
	printf("resignations:         %ld\n", resigns);
	printf("lost renewals:        %ld\n", lost_renewals);
	printf("resigned-term writes: %ld tried, %ld accepted\n", probes, accepted);
	failed += !check(bad_order_at < 0,
					 "terms strictly increase from one leader's writes to the next's"
					 " (first bad row %s)", row_label(bad_order_at));
	failed += !check(shared_term_at < 0,
					 "each term's writes are all by one candidate (first bad row %s)",
					 row_label(shared_term_at));
	failed += !check(accepted == 0,
					 "no write under a resigned term was accepted (%ld of %ld)",
					 accepted, probes);
	failed += !check(probes > 0 && resigns > 0,
					 "leaders resigned and wrote under their old term"
					 " (%ld resignations, %ld tries)", resigns, probes);
	failed += !check(logged_terms >= 2, "several leaders wrote (%ld terms)",
					 logged_terms);
	return failed;
}
