/*
 * dlock--0.4--0.5.sql: upgrade from 0.4 to 0.5.  Each part below is one
 * block; the 0.5 library runs under the 0.4 SQL (and older) until ALTER
 * EXTENSION dlock UPDATE: what is new is only reached through the
 * functions created here.
 *
 * Like 0.2's to 0.4's, nothing here waits for a lock on dlock.leases held
 * by a waiter in lock() (test/t/090_upgrade.pl).
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.5'" to load this file. \quit

-- [scale] per-entity locks at scale (issue 25): a holding's row now goes
-- when the holding ends (unless a lock-delay, a holding value or a queued
-- ticket needs it), so rows are inserted and deleted, as in the naive lock
-- table, rather than kept free and updated in place.  fillfactor 100 (the
-- default) instead of 50: a page that inserts filled only to half never
-- looks full enough for a read to prune it (heap_page_prune_opt), so the
-- deleted rows' space came back only with VACUUM and the heap grew by the
-- churn (61 MB after a minute of pairs on a thousand resources, against 8 MB
-- for the naive table; BENCHMARKS.md).  Re-entries and renewals are still
-- HOT updates once a read has pruned the page.  SET (fillfactor) takes a
-- SHARE UPDATE EXCLUSIVE lock, which the locks of lock() waiters do not
-- conflict with, rewrites nothing, and applies to pages filled from now on.
ALTER TABLE dlock.leases SET (fillfactor = 100);
-- end [scale]
