/*
 * dlock--1.1--1.2.sql: upgrade from 1.1 to 1.2: the fence epoch records
 * the xmin of its database's own pg_database row (column dbrow of
 * dlock.fence_epoch, as the portable edition does).
 *
 * A database dropped and made again from a copy of itself under its old
 * OID keeps everything else the epoch test reads; its pg_database row is
 * new.  1.1 compared the two rows' xmins by age, which missed a new row
 * frozen before the first fence, and an epoch row more than 2^31
 * transactions old.  1.2 compares the recorded xmin for equality.
 *
 * The row 1.1 wrote is kept, dbrow NULL: the first fence after the update
 * starts a new epoch (fences go on increasing), which records dbrow.  The
 * 1.2 library runs under the 1.1 SQL until ALTER EXTENSION dlock UPDATE:
 * it writes and compares dbrow only when the column exists.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '1.2'" to load this file. \quit

ALTER TABLE dlock.fence_epoch ADD COLUMN dbrow text;
COMMENT ON COLUMN dlock.fence_epoch.dbrow IS
    'The xmin of the database''s pg_database row when the epoch started (NULL: written by 1.1)';
