/*
 * mysql/dlock.sql: dlock 1.2 for MariaDB (10.6.18, 10.11.8, 11.4.2 and later;
 * tested on 10.11 and 11.8).  MySQL 8 lacks innodb_snapshot_isolation and
 * innodb_lock_wait_timeout = 0, which the routines use (see docs/editions/mysql.md).
 *
 *     mariadb < mysql/dlock.sql           (as an administrator, once)
 *
 * Creates database `dlock`: the lock table, the fence counter, the routines
 * users call, the view `dlock.locks` and the event `dlock.reap`.  It
 * refuses to run over an existing installation (CREATE DATABASE fails);
 * there is no in-place upgrade yet: docs/editions/mysql.md, "Upgrading",
 * says how to move to a newer script (drop and re-install when nothing is
 * held; fences never repeat, see _fence).
 *
 * Shared state and what protects it:
 * - dlock.leases, one row per resource (and its tail row, below).  Every
 *   change of a holding happens under that row's InnoDB record lock, taken
 *   by the routine that changes it and held to the end of the caller's
 *   transaction.  Locks are taken only where they are meant to be kept,
 *   because InnoDB keeps every row lock to the end of the transaction
 *   (REPEATABLE READ), or drops it only from a scan (READ COMMITTED),
 *   never from a primary-key lookup:
 *   . a routine first reads the row plainly (no lock) and locks it only
 *     when that read says the caller may change it: a busy resource,
 *     someone else's holding, a stale fence are answered from the plain
 *     read, so a failed call inside an open transaction pins nothing;
 *   . no routine ever locks a key that is not there (a gap lock: the
 *     REPEATABLE READ trap where two sessions holding gap locks insert and
 *     deadlock, or every insert into the gap waits);
 *   . acquirers lock with SKIP LOCKED and never wait for another
 *     transaction: a row another transaction holds is busy (NULL);
 *   . every resource has two rows in dlock.leases and in dlock.pins, keyed
 *     (resource, tail): its row (tail 0), which every routine names by
 *     its whole key, and its tail row (tail 1), which nothing locks or
 *     changes.  A SKIP LOCKED read that skips a row goes on to the next
 *     key and, in REPEATABLE READ, locks the gap before it until the end
 *     of the transaction: the tail row makes that the gap between the
 *     resource's two rows, where nothing is ever inserted (with one row
 *     per resource it was the gap where a new resource named just after
 *     it goes, whose first acquisition then waited);
 *   . a new row is inserted only under its creation gate: dlock.gates holds
 *     4096 rows, and whoever inserts a resource's row first locks the gate
 *     row of its slot (CRC32 of the resource, SKIP LOCKED) and keeps it to
 *     the end of its transaction.  An INSERT waits for the unique key of
 *     another transaction's uncommitted row; the gate makes sure there is
 *     none: a gate another transaction holds means busy, at the price of a
 *     NULL for another new resource of the same slot while a transaction
 *     that created one is open.  Procedures (lock, xact_lock), which can
 *     catch a lock wait timeout, insert with innodb_lock_wait_timeout = 0
 *     when the row their snapshot shows is gone (reaped since).  A
 *     REPEATABLE READ snapshot may miss a row created and committed after
 *     it, whose INSERT would then wait in its duplicate-key check for a
 *     transaction that has the row locked: the gate row counts creations
 *     and deletions (gen) and names the last resource created or deleted,
 *     so an
 *     acquirer compares the gate as its snapshot shows it with the gate as
 *     it is: unchanged, it inserts; one creation since, of this resource,
 *     it locks the row (SKIP LOCKED); anything else, error 1020 and its
 *     transaction rolled back (_unpin_gate).  _create, which inserts a
 *     row an acquirer's snapshot shows but could not lock, inserts only
 *     when the gate says it was deleted since (an INSERT that finds the
 *     row keeps a shared lock on it, even in READ COMMITTED); it locks the
 *     gate to read it as it is, and keeps that lock to the end of the
 *     transaction even when it finds the row there and inserts nothing: a
 *     NULL for another new resource of the same slot meanwhile (never a
 *     wait, and never a lock on the resource's own row).
 *   . the reaper frees or deletes a row in a statement of its own (an
 *     autocommit transaction) after locking its slot's row of
 *     dlock.reapers (SKIP LOCKED), which only the reaper locks
 *     exclusively, held until that statement commits; an acquirer that
 *     finds the row locked waits for a share lock on that row of
 *     dlock.reapers (a few statements of the reaper, never a user's
 *     transaction; kept to the end of the acquirer's transaction, and
 *     the reaper passes the slot by meanwhile) and looks once more, so an
 *     expired lease is free at once while the reaper frees it.  The
 *     reaper never waits holding it.
 *   . no named lock (GET_LOCK) anywhere: one survives an interrupted
 *     statement (KILL QUERY, max_statement_time), and any user can read
 *     the names through metadata_lock_info and hold them.
 *   . assert_fence pins a holding with a shared lock on the resource's row
 *     of dlock.pins, which holds the fence of the current holding (NULL
 *     when there is none) and is changed, under its row lock, by whatever
 *     changes who holds the resource: a takeover, release, expiry or break
 *     waits for the pin (acquirers and the reaper skip a pinned row), while
 *     renewal and re-entry change only dlock.leases and go through.  Every
 *     row of dlock.leases has its row in dlock.pins, inserted and deleted
 *     with it, so that a pin is a record lock on one existing row (keyed by
 *     resource, like dlock.leases).  Lock order: the row of dlock.leases,
 *     then its row of dlock.pins.
 *   . inside the routines innodb_snapshot_isolation (MariaDB 10.6.18+, on by
 *     default from 11.6) is off, so that a locking read returns the row as
 *     it is (what every decision here is made on) rather than failing with
 *     error 1020 when the row changed after the caller's snapshot; each
 *     public routine restores the caller's setting, also on its errors.
 *   . an xact_lock taken inside a transaction marks the row (xconn, xtrx,
 *     xfence: the connection, the InnoDB transaction id, the fence), so
 *     that the same transaction's later calls know the row's lock is its
 *     own: xact_lock again returns that fence, a lease is refused (NULL,
 *     or 40P01 from lock(), which would wait for its own transaction);
 *     so does a change of a lease inside a transaction (xfence NULL:
 *     lock() of another holder raises 40P01 instead of waiting for it).
 *     MariaDB shows a routine no transaction id; dlock._xid() reads it from
 *     the ROW START of a row it inserts into dlock.xids, a table with
 *     transaction-precise system versioning (and deletes the row: no
 *     history), FOR SYSTEM_TIME ALL, whatever the session's
 *     system_versioning_asof.  MariaDB logs such a table's changes as
 *     statements even with binlog_format ROW: _xid first sets a savepoint,
 *     which ends the calling statement's row events in the binary log, so
 *     that a replica reads a well-formed log (no error 1595).  A marker
 *     outlives its transaction's commit and counts only for the transaction
 *     it names.
 *   . when the row an acquirer has just locked turns out busy (it changed
 *     hands after the acquirer's plain read: a REPEATABLE READ snapshot
 *     older than the change), the lock would stay to the end of the
 *     acquirer's transaction and hold up the holder: _unpin reads it again
 *     with innodb_snapshot_isolation on, which fails with error 1020 and
 *     rolls that transaction back, its locks with it.  The same for a
 *     holder's renew, unlock or unlock_all whose locked read shows the
 *     holding gone (_mine), and for an assert_fence whose pin shows another
 *     fence (_unpin_pin): a refused call pins nothing.
 *   . in a SERIALIZABLE transaction InnoDB turns plain reads into shared
 *     locks (they would pin and wait): the routines refuse there (0A000).
 *   Each kind of read has its own table alias (seen, locked, skipping,
 *   pinning, gate): inside a stored function all statements share the
 *   tables opened for the calling statement, and a SKIP LOCKED read through
 *   the same alias as an earlier plain read of the table silently waits
 *   instead (MariaDB 10.11); and SKIP LOCKED holds only at its first
 *   execution within one statement, so everything that retries (lock,
 *   xact_lock, reaping) is a procedure whose every attempt is a statement
 *   of its own.  Clocks are read after the row is locked.
 * - dlock.fences, an AUTO_INCREMENT counter: InnoDB hands out its values
 *   outside transactions (never reused after a rollback) and never lowers
 *   it while the server runs.  A fence is drawn only after the resource's
 *   row is locked, and is never below the clock nor the resource's last
 *   fence: when the counter is behind (milliseconds since 2020-01-01 UTC)
 *   << 22, the draw raises it there by inserting the value below, which
 *   InnoDB applies at once, whatever becomes of the transaction, then
 *   draws again (see _fence: no named lock, no wait, nothing the session
 *   sets: insert_id is reset, the clock is SYSDATE(6)).  So a fence drawn
 *   at millisecond t is in [t << 22, (t + 1) << 22) (fewer than 2^22
 *   draws a millisecond), and whatever sets the counter back (a crash that
 *   loses the redo of an acquisition never committed, a restore from a
 *   dump, which carries the counter as it was, a re-installation, a
 *   replica's promotion) is undone by the next draw, at a later
 *   millisecond: the same assumption about clocks as PostgreSQL dlock's
 *   epochs (docs/how-it-works.md, "Fence format").
 * - Users get EXECUTE on the public routines and SELECT on dlock.locks and
 *   nothing else.  The routines run as `dlock`@`localhost` (SQL SECURITY
 *   DEFINER), a locked account that owns nothing outside this database.
 *   Inside them CURRENT_USER() is that account, so the owner of a holding
 *   is the user name part of USER(), the name the client logged in with:
 *   the same as CURRENT_USER()'s user part for every account but an
 *   anonymous one (User = ''), through which a client names itself; the
 *   install warns when such accounts exist (docs/editions/mysql.md).
 *   Owners compare as bytes (utf8mb4_nopad_bin), like holders and
 *   resources (VARBINARY): `Alice`, `alicé` and `alice ` are not `alice`.
 * - Time: all lease arithmetic uses SYSDATE(6), the clock at the call (NOW()
 *   is the start of the statement), converted to UTC; times are stored and
 *   shown in UTC.
 * - Replicas: the event dlock.reap arrives there SLAVESIDE_DISABLED and
 *   stays so after a promotion; CALL dlock.on_promotion() on the new
 *   primary enables it.
 */

SET SESSION sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO';

SET NAMES utf8mb4;
CREATE DATABASE dlock CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;

DELIMITER //
-- Preflight: refuse clearly what would install but not work.
CREATE PROCEDURE dlock._preflight()
BEGIN
    DECLARE v_msg VARCHAR(400);
    IF @@global.log_bin = 1 AND @@global.log_bin_trust_function_creators = 0 THEN
        SIGNAL SQLSTATE '55000' SET MESSAGE_TEXT =
            'binary logging is on: set log_bin_trust_function_creators = 1 (dlock''s functions write and read the clock), then DROP DATABASE dlock and run this script again';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.GLOBAL_VARIABLES
                    WHERE VARIABLE_NAME = 'INNODB_SNAPSHOT_ISOLATION') THEN
        SIGNAL SQLSTATE '55000' SET MESSAGE_TEXT =
            'dlock needs MariaDB 10.6.18, 10.11.8, 11.4.2 or later (innodb_snapshot_isolation): upgrade, then DROP DATABASE dlock and run this script again';
    END IF;
    -- STATEMENT would replay calls with the replica's clock; with STATEMENT
    -- and MIXED MariaDB reads the tables of a routine that changes data
    -- with shared locks (for statement-based replay): dlock's plain reads
    -- would lock rows and wait (see _check).
    IF @@global.log_bin = 1 AND @@global.binlog_format <> 'ROW' THEN
        SET v_msg = CONCAT('binlog_format = ', @@global.binlog_format,
            ': dlock needs ROW (STATEMENT would replay calls with the replica''s clock, and with STATEMENT or MIXED its reads would lock rows and wait): SET GLOBAL binlog_format = ROW, then DROP DATABASE dlock and run this script again');
        SIGNAL SQLSTATE '55000' SET MESSAGE_TEXT = v_msg;
    END IF;
END//
DELIMITER ;
CALL dlock._preflight();
DROP PROCEDURE dlock._preflight;

-- The definer of every routine, view and event: never logs in.
CREATE USER IF NOT EXISTS 'dlock'@'localhost' ACCOUNT LOCK;
GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE, EVENT ON dlock.* TO 'dlock'@'localhost';

/*
 * One row per resource (and its tail row, see the header).  A release
 * keeps the row (holder NULL) so that the next acquisition updates it in
 * place; reaping deletes rows free for an hour.  Bytes compare as bytes
 * (VARBINARY): case and trailing spaces matter.  Times are UTC.
 */
CREATE TABLE dlock.leases (
    resource    VARBINARY(1000) NOT NULL,
    -- 0: the resource's row; 1: its tail row, which closes the gap after
    -- it (see the header), all other columns unused.
    tail        TINYINT NOT NULL DEFAULT 0,
    holder      VARBINARY(255) NULL,
    owner       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NULL,
    count       INT NOT NULL DEFAULT 0,
    fence       BIGINT NULL,
    lease_us    BIGINT NULL,            -- the lease, in microseconds
    acquired_at DATETIME(6) NULL,
    renewed_at  DATETIME(6) NULL,
    expires_at  DATETIME(6) NULL,
    released_at DATETIME(6) NULL,
    -- The explicit transaction that holds this row's xact_lock (see the
    -- header): its connection, its InnoDB transaction id (dlock._xid()) and
    -- its fence.  Left behind when that transaction commits: a marker
    -- counts only for the transaction whose id it names.
    xconn       BIGINT UNSIGNED NULL,
    xtrx        BIGINT UNSIGNED NULL,
    xfence      BIGINT NULL,
    PRIMARY KEY (resource, tail)
) ENGINE = InnoDB;

-- What assert_fence locks (see the header): each resource's current fence.
CREATE TABLE dlock.pins (
    resource VARBINARY(1000) NOT NULL,
    tail     TINYINT NOT NULL DEFAULT 0,    -- as in dlock.leases
    fence    BIGINT NULL,
    PRIMARY KEY (resource, tail)
) ENGINE = InnoDB;

/*
 * Transaction ids (see the header, dlock._xid): a table with
 * transaction-precise system versioning, so that InnoDB writes the id of
 * the transaction that inserted a row into its ROW START column.  Rows live
 * for one call (inserted and deleted by the same transaction: no history).
 * Its changes replicate as statements (MariaDB's rule for such tables; see
 * _xid), replayed on a replica in the same way.
 */
CREATE TABLE dlock.xids (
    id        BIGINT UNSIGNED NOT NULL PRIMARY KEY,     -- UUID_SHORT()
    trx_start BIGINT UNSIGNED GENERATED ALWAYS AS ROW START INVISIBLE,
    trx_end   BIGINT UNSIGNED GENERATED ALWAYS AS ROW END INVISIBLE,
    PERIOD FOR SYSTEM_TIME (trx_start, trx_end)
) ENGINE = InnoDB WITH SYSTEM VERSIONING;

-- Creation gates (see the header): one row per slot; gen counts the rows
-- created and deleted under it, last is the resource of the last creation
-- or deletion (both changed, under the gate's lock, by whoever creates or
-- deletes).  See _take and _create.
CREATE TABLE dlock.gates (
    slot SMALLINT NOT NULL PRIMARY KEY,
    gen  BIGINT NOT NULL DEFAULT 0,
    last VARBINARY(1000) NULL
) ENGINE = InnoDB;
INSERT INTO dlock.gates (slot)
    WITH h(n) AS (SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL
                  SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL
                  SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL
                  SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15)
    SELECT a.n * 256 + b.n * 16 + c.n FROM h a, h b, h c;

-- The fence counter (see the header): the AUTO_INCREMENT of column n,
-- which has a non-unique index, so that no insert ever waits for another
-- transaction's row with the same value.  Rows live for one call, keyed
-- by UUID_SHORT().
CREATE TABLE dlock.fences (
    u BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    n BIGINT NOT NULL AUTO_INCREMENT,
    KEY (n)
) ENGINE = InnoDB;
SET @dlock_first_fence = CAST(TIMESTAMPDIFF(MICROSECOND, '2020-01-01', UTC_TIMESTAMP(6)) DIV 1000 AS UNSIGNED) << 22;
SET @dlock_sql = CONCAT('ALTER TABLE dlock.fences AUTO_INCREMENT = ', @dlock_first_fence);
PREPARE dlock_stmt FROM @dlock_sql;
EXECUTE dlock_stmt;
DEALLOCATE PREPARE dlock_stmt;

-- Reaper gates (see the header): one row per creation-gate slot.  Only
-- the reaper locks a row exclusively, for one statement of its own, while
-- it frees or deletes a resource of that slot; an acquirer that finds the
-- resource's row locked waits for a share lock on it (_reaper_wait).
CREATE TABLE dlock.reapers (
    slot SMALLINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
INSERT INTO dlock.reapers (slot) SELECT slot FROM dlock.gates;

DELIMITER //

CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.version() RETURNS VARCHAR(16)
    DETERMINISTIC NO SQL SQL SECURITY DEFINER
    RETURN '1.2'//

/*
 * _check: SIGNAL SQLSTATE 22023 naming the first bad argument, 55000 when
 * this session binary-logs in another format than ROW, 25006 on a
 * read-only server when p_writes, 0A000 inside a SERIALIZABLE transaction.
 * Arguments not checked are passed NULL with their flag off.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._check(
    IN p_fn VARCHAR(64), IN p_writes BOOLEAN,
    IN p_check_resource BOOLEAN, IN p_resource LONGBLOB,
    IN p_holder LONGBLOB, IN p_lease DOUBLE, IN p_wait DOUBLE)
    NO SQL SQL SECURITY DEFINER
BEGIN
    DECLARE v_msg VARCHAR(200);
    IF p_check_resource THEN
        IF p_resource IS NULL THEN
            SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'resource must not be null';
        ELSEIF LENGTH(p_resource) = 0 THEN
            SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'resource must not be empty';
        ELSEIF LENGTH(p_resource) > 1000 THEN
            SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'resource must be at most 1000 bytes long';
        END IF;
    END IF;
    IF LENGTH(p_holder) = 0 THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'holder must not be empty';
    ELSEIF LENGTH(p_holder) > 255 THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'holder must be at most 255 bytes long';
    END IF;
    IF p_lease IS NOT NULL AND NOT (ROUND(p_lease * 1000000) >= 1) THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'lease must be positive';
    ELSEIF p_lease > 31557600000 THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'lease must be finite and at most 1000 years';
    END IF;
    IF p_wait < 0 THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'wait must not be negative';
    END IF;
    -- Binary logging in STATEMENT or MIXED format (sql_log_bin on): MariaDB
    -- reads the tables of a routine that changes data with shared locks,
    -- so the plain reads would lock rows and wait (an acquirer behind a
    -- holder's uncommitted renew; a refused call pinning the holder's row
    -- to the end of its transaction).  Refused before anything is read.
    IF @@global.log_bin = 1 AND @@session.sql_log_bin = 1 AND @@session.binlog_format <> 'ROW' THEN
        SET v_msg = CONCAT('dlock.', p_fn, '() needs binlog_format = ROW (this session logs ',
                           @@session.binlog_format, ', which makes its reads lock rows and wait)');
        SIGNAL SQLSTATE '55000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF p_writes AND @@global.read_only THEN
        SET v_msg = CONCAT('cannot execute dlock.', p_fn, '() on a read-only server');
        SIGNAL SQLSTATE '25006' SET MESSAGE_TEXT = v_msg;
    END IF;
    -- In a SERIALIZABLE transaction InnoDB turns every plain read into a
    -- shared-locking one: a refused call would pin the row and an acquirer
    -- would wait.  (A one-time SET TRANSACTION ISOLATION LEVEL, for the
    -- next transaction only, is not visible here: see the README.)
    IF dlock._in_xact() AND @@session.tx_isolation = 'SERIALIZABLE' THEN
        SET v_msg = CONCAT('dlock.', p_fn, '() cannot run in a SERIALIZABLE transaction (its plain reads would lock rows and wait): use READ COMMITTED or REPEATABLE READ, or autocommit');
        SIGNAL SQLSTATE '0A000' SET MESSAGE_TEXT = v_msg;
    END IF;
END//

/*
 * _like_number: does p_v spell a number (p_int: an integer)?  With the
 * session's default_regex_flags, which change what a pattern means
 * (EXTENDED, MULTILINE, ...) or make it warn (EXTRA), set to none for the
 * match and then restored; a session without flags (the default) is not
 * touched.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._like_number(p_v LONGBLOB, p_int BOOLEAN) RETURNS BOOLEAN
    DETERMINISTIC NO SQL SQL SECURITY DEFINER
BEGIN
    DECLARE v BOOLEAN;
    DECLARE v_flags VARCHAR(255) DEFAULT @@session.default_regex_flags;
    IF v_flags <> '' THEN
        SET SESSION default_regex_flags = '';
    END IF;
    IF p_int THEN
        SET v = p_v REGEXP '^ *[-+]?[0-9]+ *$';
    ELSE
        SET v = p_v REGEXP '^ *[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]{1,3})? *$';
    END IF;
    IF v_flags <> '' THEN
        SET SESSION default_regex_flags = v_flags;
    END IF;
    RETURN v;
END//

/*
 * _seconds, _integer: an argument of a duration (seconds, fractional
 * allowed) or a fence, taken as text so that a value that is not one (a
 * word, '12abc', 1e400, a number beyond BIGINT) signals SQLSTATE 22023
 * naming the argument instead of MariaDB's conversion errors (1265, 1366,
 * 1264, 1367), raised before a routine with DOUBLE or BIGINT parameters
 * could check anything.  NULL stays NULL.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._seconds(p_name VARCHAR(16), p_v LONGBLOB) RETURNS DOUBLE
    DETERMINISTIC NO SQL SQL SECURITY DEFINER
BEGIN
    DECLARE v DOUBLE;
    DECLARE v_msg VARCHAR(128) DEFAULT CONCAT(p_name, ' must be a number of seconds');
    DECLARE EXIT HANDLER FOR SQLEXCEPTION, SQLWARNING
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_msg;
    IF p_v IS NULL THEN
        RETURN NULL;
    ELSEIF LENGTH(p_v) > 64
        OR NOT dlock._like_number(p_v, FALSE) THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v = CAST(TRIM(p_v) AS DOUBLE);
    RETURN v;
END//

CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._integer(p_name VARCHAR(16), p_v LONGBLOB) RETURNS BIGINT
    DETERMINISTIC NO SQL SQL SECURITY DEFINER
BEGIN
    DECLARE v_msg VARCHAR(128) DEFAULT CONCAT(p_name, ' must be an integer (BIGINT)');
    DECLARE EXIT HANDLER FOR SQLEXCEPTION, SQLWARNING
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_msg;
    IF p_v IS NULL THEN
        RETURN NULL;
    ELSEIF LENGTH(p_v) > 40 OR NOT dlock._like_number(p_v, TRUE)
        OR CAST(TRIM(p_v) AS DECIMAL(40, 0)) NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_msg;
    END IF;
    RETURN CAST(TRIM(p_v) AS SIGNED);
END//

/*
 * _show: a resource for a message: "text" (at most 100 characters) when it
 * is valid UTF-8, else its bytes in hex, x'...' (at most 50 bytes).
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._show(p LONGBLOB) RETURNS VARCHAR(300) CHARACTER SET utf8mb4
    DETERMINISTIC NO SQL SQL SECURITY DEFINER
BEGIN
    DECLARE v LONGTEXT CHARACTER SET utf8mb4;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION, SQLWARNING
        RETURN CONCAT('x''', HEX(LEFT(p, 50)), IF(LENGTH(p) > 50, '...', ''), '''');
    SET v = CONVERT(p USING utf8mb4);
    IF CONVERT(v USING binary) <> p THEN
        RETURN CONCAT('x''', HEX(LEFT(p, 50)), IF(LENGTH(p) > 50, '...', ''), '''');
    END IF;
    RETURN CONCAT('"', LEFT(v, 100), IF(CHAR_LENGTH(v) > 100, '..."', '"'));
END//

-- _me: the caller (the login user name of USER(), whatever the definer).
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._me() RETURNS VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
    NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
    RETURN LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1)//

/*
 * _now: the server clock at this moment (not the statement's start), UTC:
 * SYSDATE(6), in the session's time zone, less that zone's offset.  The
 * offset is read at the statement's start (NOW() against UTC_TIMESTAMP(),
 * exact) when that is within a second of SYSDATE(6); otherwise the session
 * has SET timestamp (or the statement is long), and NOW() would give the
 * offset of another date (daylight saving time): SYSDATE(6) is converted
 * by itself (UNIX_TIMESTAMP, exact but in the hour a clock is set back).
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._now() RETURNS DATETIME(6)
    NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
BEGIN
    DECLARE v DATETIME(6) DEFAULT SYSDATE(6);
    IF ABS(TIMESTAMPDIFF(MICROSECOND, NOW(6), v)) < 1000000 THEN
        RETURN v - INTERVAL TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()) SECOND;
    END IF;
    RETURN TIMESTAMP('1970-01-01') + INTERVAL ROUND(UNIX_TIMESTAMP(v) * 1000000) MICROSECOND;
END//

/*
 * _fence: the next fence, above p_last (the resource's last fence, 0 when
 * none) and never below the clock (see the header).  Callers hold the
 * resource's row lock.  A draw is an insert into dlock.fences that takes
 * the counter's next value.  When that is behind (milliseconds since
 * 2020-01-01 UTC) << 22, or not above p_last, an insert of the value just
 * below raises the counter there (InnoDB, at once, whatever becomes of the
 * transaction), and a second draw follows: a fence is always a drawn
 * value, unique, never a value inserted explicitly (two sessions may
 * raise to the same one).  Nothing here waits: the index on n is not
 * unique, so no insert checks for another transaction's row.  Nothing
 * here reads what the session sets: insert_id is reset first, the clock
 * is SYSDATE(6) (_now), not the session's timestamp; auto_increment_
 * increment and _offset only spread the values.  No named lock.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._fence(p_last BIGINT) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v BIGINT;
    DECLARE v_u BIGINT UNSIGNED DEFAULT UUID_SHORT();
    DECLARE v_floor BIGINT DEFAULT GREATEST(
        CAST(TIMESTAMPDIFF(MICROSECOND, '2020-01-01', dlock._now()) DIV 1000 AS SIGNED) << 22,
        IFNULL(p_last, 0) + 1);
    SET SESSION insert_id = 0;
    INSERT INTO dlock.fences (u) VALUES (v_u);
    SET v = LAST_INSERT_ID();
    DELETE FROM dlock.fences WHERE u = v_u;
    IF v < v_floor THEN
        INSERT INTO dlock.fences (u, n) VALUES (v_u, v_floor - 1);
        DELETE FROM dlock.fences WHERE u = v_u;
        SET v_u = UUID_SHORT();
        SET SESSION insert_id = 0;
        INSERT INTO dlock.fences (u) VALUES (v_u);
        SET v = LAST_INSERT_ID();
        DELETE FROM dlock.fences WHERE u = v_u;
    END IF;
    RETURN v;
END//

/*
 * session_holder: 'conn:<connection id>:<UUID()>', made at the connection's
 * first call and kept in @dlock_session_holder.  UUID() is unique over the
 * server's lifetime and across restarts (a 100 ns clock, and a node part
 * drawn at server start), so a connection that gets a dead one's id after
 * a crash never re-enters its leases.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.session_holder() RETURNS VARCHAR(64)
    NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
BEGIN
    IF @dlock_session_holder IS NULL
       OR @dlock_session_holder NOT LIKE CONCAT('conn:', CONNECTION_ID(), ':%') THEN
        SET @dlock_session_holder = CONCAT('conn:', CONNECTION_ID(), ':', UUID());
    END IF;
    RETURN @dlock_session_holder;
END//

/*
 * _si_off / _si_restore: innodb_snapshot_isolation off for the routine (see
 * the header), and the caller's setting back.  An error no handler may catch
 * inside a function (a lock wait timeout, a deadlock, KILL) skips the
 * restore: @dlock_si_caller keeps the caller's setting until the session's
 * next dlock call restores it.  Every public function calls it first: it
 * also refuses (55000) a session whose sql_select_limit is 0, which
 * MariaDB applies to the SELECT ... INTO of functions (not procedures).
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._si_off() RETURNS BOOLEAN
    NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
BEGIN
    DECLARE v BOOLEAN DEFAULT @@session.innodb_snapshot_isolation;
    IF @@session.sql_select_limit = 0 THEN
        SIGNAL SQLSTATE '55000' SET MESSAGE_TEXT = 'dlock cannot run with sql_select_limit = 0 (its functions would read no rows): SET sql_select_limit = DEFAULT';
    END IF;
    IF @dlock_si_caller IS NOT NULL THEN
        SET v = @dlock_si_caller;
    END IF;
    SET @dlock_si_caller = v;
    SET SESSION innodb_snapshot_isolation = OFF;
    RETURN v;
END//

CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._si_restore(IN p BOOLEAN)
    NO SQL SQL SECURITY DEFINER
BEGIN
    SET SESSION innodb_snapshot_isolation = p;
    SET @dlock_si_caller = NULL;
END//

-- _slot: the creation gate of a resource (see the header).
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._slot(p_resource LONGBLOB) RETURNS SMALLINT
    DETERMINISTIC NO SQL SQL SECURITY DEFINER
    RETURN CRC32(p_resource) % 4096//

/*
 * _xid: the InnoDB id of the caller's transaction (MariaDB shows a routine
 * no other way to tell its own transaction from an earlier one of the same
 * connection: see the header); NULL outside a transaction (autocommit),
 * where no marker is written or read.  Inserts a row of dlock.xids, whose
 * ROW START InnoDB sets to that id, reads it back FOR SYSTEM_TIME ALL (a
 * session's system_versioning_asof must not hide it) and deletes it: a
 * new key (UUID_SHORT(), unique over the server's life, and no
 * AUTO_INCREMENT that insert_id could steer), then a record lock on a row
 * no other transaction ever sees; the same transaction deleting its own
 * row leaves no history.  MariaDB binary-logs every change of a
 * transaction-precise versioned table as a statement, even with
 * binlog_format ROW, and writes that statement event in the middle of the
 * calling statement's unfinished row events, which stops a replica (error
 * 1595): the SAVEPOINT first makes the server finish those row events
 * (a savepoint's own event is written after them).  So call _xid in a
 * statement of its own (SET v = dlock._xid()), never inside an UPDATE.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._xid() RETURNS BIGINT UNSIGNED
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_id BIGINT UNSIGNED;
    DECLARE v BIGINT UNSIGNED;
    IF NOT dlock._in_xact() THEN
        RETURN NULL;
    END IF;
    SET v_id = UUID_SHORT();
    SAVEPOINT dlock_xid;
    INSERT INTO dlock.xids (id) VALUES (v_id);
    SELECT trx_start INTO v FROM dlock.xids FOR SYSTEM_TIME ALL AS mine
     WHERE id = v_id AND trx_end = 18446744073709551615;
    DELETE FROM dlock.xids WHERE id = v_id AND trx_end = 18446744073709551615;
    RETURN v;
END//

/*
 * _in_xact: is the caller inside an explicit transaction (or running with
 * autocommit off), whose locks outlive this statement?
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._in_xact() RETURNS BOOLEAN
    NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
    RETURN @@session.in_transaction = 1 OR @@session.autocommit = 0//

/*
 * _unpin: for _take, when the row it has just locked turns out busy (it
 * changed hands after the plain read: a REPEATABLE READ snapshot older
 * than that change, or a commit in between).  Inside a transaction the
 * lock would stay to its end and hold up the holder's renew and unlock:
 * instead the row is read again with innodb_snapshot_isolation on, which
 * fails with error 1020 and rolls the caller's transaction back (its locks
 * with it) when the row changed after the caller's snapshot, as MariaDB
 * 11.6+ does by default for every locking read.  In autocommit mode the
 * lock ends with the statement: nothing to do.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._unpin(IN p_resource LONGBLOB)
    READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_one INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    -- Not in READ COMMITTED: there the row changed hands within this very
    -- call, and MariaDB 11.8 fails the re-read with 1020 too (036 saw a
    -- try_lock do so); the lock then stays to the end of the transaction,
    -- as the README says.
    IF dlock._in_xact() AND @@session.tx_isolation <> 'READ-COMMITTED' THEN
        SET SESSION innodb_snapshot_isolation = ON;
        SELECT 1 INTO v_one FROM dlock.leases AS recheck WHERE resource = p_resource AND tail = 0 FOR UPDATE;
        SET SESSION innodb_snapshot_isolation = OFF;
    END IF;
END//

/*
 * _unpin_pin: for assert_fence, when the pin it has just taken (a shared
 * lock on the resource's row of dlock.pins) shows another fence: as
 * _unpin, the row read again with innodb_snapshot_isolation on, error 1020
 * and the caller's REPEATABLE READ transaction rolled back, so that a
 * refused assert_fence pins nothing.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._unpin_pin(IN p_resource LONGBLOB)
    READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_one INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    IF dlock._in_xact() THEN
        SET SESSION innodb_snapshot_isolation = ON;
        SELECT 1 INTO v_one FROM dlock.pins AS repin WHERE resource = p_resource AND tail = 0 LOCK IN SHARE MODE;
        SET SESSION innodb_snapshot_isolation = OFF;
    END IF;
END//

/*
 * _unpin_gate: for _take, when the creation gate it has just locked was
 * changed after the caller's snapshot (rows of its slot created or deleted
 * since, not just this resource's creation): as _unpin, error 1020 and the
 * caller's REPEATABLE READ transaction rolled back, its locks with it,
 * rather than an INSERT that could wait for the row's lock, or a gate kept
 * locked for nothing.  Elsewhere nothing, and _take answers busy: in
 * autocommit mode the gate's lock ends with the statement; in READ
 * COMMITTED (where only a change committed during the call gets here) it
 * stays to the end of the transaction, so new resources of that slot are
 * busy meanwhile, as after a creation.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._unpin_gate(IN p_resource LONGBLOB)
    READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_one INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    IF dlock._in_xact() THEN
        SET SESSION innodb_snapshot_isolation = ON;
        SELECT 1 INTO v_one FROM dlock.gates AS regate WHERE slot = dlock._slot(p_resource) FOR UPDATE;
        SET SESSION innodb_snapshot_isolation = OFF;
    END IF;
END//

/*
 * _reaper_wait: for _take, when the row is locked by another transaction:
 * if that is the reaper's (it holds its slot's row of dlock.reapers from
 * before it locks the row until its one-statement transaction commits),
 * wait for it; otherwise return at once.  A share lock on that row of
 * dlock.reapers, kept to the end of the caller's transaction (the reaper
 * passes by the slot meanwhile).  Never a wait for a user's transaction:
 * only the reaper locks those rows exclusively, never waits while it holds
 * one (SKIP LOCKED), and an interrupted reaper statement rolls back, its
 * lock with it (no named locks: see the header).
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._reaper_wait(IN p_resource LONGBLOB)
    READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_one INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    SELECT 1 INTO v_one FROM dlock.reapers AS waiting
     WHERE slot = dlock._slot(p_resource) LOCK IN SHARE MODE;
END//

/*
 * _mark: after a change of a holding inside a transaction (an acquisition,
 * re-entry, renewal, or an unlock that leaves a count), the transaction
 * holds the row's lock to its end: mark it as this transaction's (xconn,
 * xtrx; xfence NULL), so that its own lock() of another holder raises
 * 40P01 instead of waiting for itself.  Callers hold the row's lock.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._mark(IN p_resource LONGBLOB)
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_xid BIGINT UNSIGNED;
    IF dlock._in_xact() THEN
        SET v_xid = dlock._xid();    -- a statement of its own (see _xid)
        UPDATE dlock.leases SET xconn = CONNECTION_ID(), xtrx = v_xid, xfence = NULL
         WHERE resource = p_resource AND tail = 0;
    END IF;
END//

/*
 * _take: one attempt at an acquisition, without waiting for anyone: for
 * holder p_holder (a lease of p_lease_us) or, p_holder NULL, for the
 * caller's transaction (xact_lock).  Returns the fence; 0 when the
 * resource is busy (another transaction has its row or its gate, or, for
 * a lease, a live lease of another holder); -1 for xact_lock when a live
 * lease holds it; -2 when the row this transaction's snapshot shows cannot
 * be locked: another transaction has it, or it was deleted since the
 * snapshot (the procedures then try to create it, see _create); -3 for a
 * lease when the caller's own transaction holds the resource's xact_lock
 * or changed another holder's holding of it (see _mark): only its end
 * frees it (try_lock NULL, lock 40P01).  xact_lock again in
 * the transaction that holds it returns that lock's fence.  Locks nothing
 * it does not change; where the row changed hands between the plain read
 * and the lock, see _unpin; where rows of the resource's creation gate
 * slot were created or deleted after the caller's snapshot, _unpin_gate;
 * where the reaper has the row, _reaper_wait.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._take(
    p_resource LONGBLOB, p_holder LONGBLOB, p_me VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
    p_lease_us BIGINT) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_seen INT DEFAULT 0;
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_free INT DEFAULT 0;
    DECLARE v_dup INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_owner VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
    DECLARE v_fence BIGINT;
    DECLARE v_exp DATETIME(6);
    DECLARE v_now DATETIME(6);
    DECLARE v_xconn BIGINT UNSIGNED;
    DECLARE v_xtrx BIGINT UNSIGNED;
    DECLARE v_xfence BIGINT;
    DECLARE v_busy BIGINT DEFAULT IF(p_holder IS NULL, -1, 0);
    DECLARE v_gen BIGINT;
    DECLARE v_gen_now BIGINT;
    DECLARE v_last VARBINARY(1000);
    DECLARE v_exists INT DEFAULT 0;
    DECLARE v_xid BIGINT UNSIGNED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = 1;
    SELECT 1, holder, owner, expires_at, xconn, xtrx, xfence
      INTO v_seen, v_h, v_owner, v_exp, v_xconn, v_xtrx, v_xfence
      FROM dlock.leases AS seen WHERE resource = p_resource AND tail = 0;
    -- This transaction's own xact_lock (a marker of an earlier transaction
    -- of this connection names another id and counts for nothing).
    IF v_xfence IS NOT NULL AND v_xconn = CONNECTION_ID() THEN
        IF v_xtrx = dlock._xid() THEN
            RETURN IF(p_holder IS NULL, v_xfence, -3);
        END IF;
    END IF;
    IF v_seen = 0 THEN
        -- A new row, under its gate: no other transaction is inserting it.
        -- The gate's gen as this transaction's snapshot shows it, then as
        -- it is: if they differ, rows of this slot were created or deleted
        -- after the snapshot, and an INSERT of one that exists would wait,
        -- in its duplicate-key check, for any transaction that has it
        -- locked.  Exactly one change since, of this resource: its
        -- creation (a row the snapshot does not show was created before it
        -- could be deleted), so the row exists, locked below without
        -- waiting; anything else, see _unpin_gate.
        SELECT gen INTO v_gen FROM dlock.gates AS gate_seen
         WHERE slot = dlock._slot(p_resource);
        SELECT 1, gen, last INTO v_free, v_gen_now, v_last FROM dlock.gates AS gate
         WHERE slot = dlock._slot(p_resource) FOR UPDATE SKIP LOCKED;
        IF v_free = 0 THEN
            RETURN 0;
        ELSEIF v_gen_now = v_gen + 1 AND v_last = p_resource THEN
            SET v_exists = 1;    -- created since the snapshot
        ELSEIF v_gen_now <> v_gen THEN
            CALL dlock._unpin_gate(p_resource);    -- error 1020 in a REPEATABLE READ transaction
            RETURN 0;
        ELSE
            -- released_at set: reaping deletes an unused row an hour later.
            INSERT INTO dlock.leases (resource, tail, released_at) VALUES (p_resource, 0, dlock._now());
            IF v_dup = 0 THEN
                INSERT INTO dlock.leases (resource, tail) VALUES (p_resource, 1);
                INSERT IGNORE INTO dlock.pins (resource, tail) VALUES (p_resource, 0), (p_resource, 1);
                UPDATE dlock.gates SET gen = gen + 1, last = p_resource WHERE slot = dlock._slot(p_resource);
            END IF;
        END IF;
    ELSEIF v_h IS NOT NULL AND v_exp > dlock._now()
           AND NOT (p_holder IS NOT NULL AND v_h = p_holder AND v_owner = p_me) THEN
        IF p_holder IS NOT NULL AND v_xconn = CONNECTION_ID() THEN
            IF v_xtrx = dlock._xid() THEN
                RETURN -3;    -- this transaction changed that holding
            END IF;
        END IF;
        RETURN v_busy;    -- plainly busy: nothing locked
    END IF;
    SELECT 1, holder, owner, fence, expires_at INTO v_found, v_h, v_owner, v_fence, v_exp
      FROM dlock.leases AS skipping WHERE resource = p_resource AND tail = 0 FOR UPDATE SKIP LOCKED;
    IF v_found = 0 AND (v_seen = 1 OR v_exists = 1) THEN
        -- Maybe the reaper, freeing this expired lease (or deleting the
        -- row) in a statement of its own: wait for it, then once more.
        CALL dlock._reaper_wait(p_resource);
        SELECT 1, holder, owner, fence, expires_at INTO v_found, v_h, v_owner, v_fence, v_exp
          FROM dlock.leases AS again WHERE resource = p_resource AND tail = 0 FOR UPDATE SKIP LOCKED;
    END IF;
    IF v_found = 0 THEN
        RETURN IF(v_seen = 1, -2, 0);
    END IF;
    SET v_now = dlock._now();    -- the clock once the row is ours
    IF v_h IS NOT NULL AND v_exp > v_now THEN
        IF v_h = p_holder AND v_owner = p_me THEN
            UPDATE dlock.leases
               SET count = count + 1, renewed_at = v_now,
                   expires_at = GREATEST(expires_at, v_now + INTERVAL p_lease_us MICROSECOND)
             WHERE resource = p_resource AND tail = 0;
            CALL dlock._mark(p_resource);
            RETURN v_fence;
        END IF;
        CALL dlock._unpin(p_resource);
        RETURN v_busy;    -- taken since the plain read
    ELSEIF v_h IS NOT NULL OR p_holder IS NOT NULL THEN
        -- A change of holder: not while assert_fence pins an expired one.
        SET v_free = 0;
        SELECT 1 INTO v_free FROM dlock.pins AS pinning
         WHERE resource = p_resource AND tail = 0 FOR UPDATE SKIP LOCKED;
        IF v_free = 0 THEN
            RETURN v_busy;
        END IF;
    END IF;
    SET v_fence = dlock._fence(GREATEST(IFNULL(v_fence, 0), IFNULL(v_xfence, 0)));
    IF p_holder IS NULL THEN
        IF v_h IS NOT NULL THEN
            UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = v_now
             WHERE resource = p_resource AND tail = 0;
            UPDATE dlock.pins SET fence = NULL WHERE resource = p_resource AND tail = 0;
        END IF;
        -- The marker of this transaction's xact_lock (in autocommit mode
        -- the lock ends with the statement: none).
        IF dlock._in_xact() THEN
            SET v_xid = dlock._xid();    -- a statement of its own (see _xid)
            UPDATE dlock.leases SET xconn = CONNECTION_ID(), xtrx = v_xid, xfence = v_fence
             WHERE resource = p_resource AND tail = 0;
        END IF;
        RETURN v_fence;
    END IF;
    UPDATE dlock.leases
       SET holder = p_holder, owner = p_me, count = 1, fence = v_fence,
           lease_us = p_lease_us, acquired_at = v_now, renewed_at = v_now,
           expires_at = v_now + INTERVAL p_lease_us MICROSECOND, released_at = NULL
     WHERE resource = p_resource AND tail = 0;
    UPDATE dlock.pins SET fence = v_fence WHERE resource = p_resource AND tail = 0;
    CALL dlock._mark(p_resource);
    RETURN v_fence;
END//

/*
 * _create: for lock and xact_lock when _take says -2: insert the row the
 * snapshot shows but the table no longer has (reaped since), under its
 * gate and without waiting (a procedure can catch the lock wait timeout).
 * Nothing happens when another transaction has the row or the gate.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._create(IN p_resource LONGBLOB)
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_gate INT DEFAULT 0;
    DECLARE v_there INT DEFAULT 0;
    DECLARE v_gen BIGINT;
    DECLARE v_gen_now BIGINT;
    DECLARE v_last VARBINARY(1000);
    DECLARE v_wait BIGINT DEFAULT @@session.innodb_lock_wait_timeout;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    DECLARE CONTINUE HANDLER FOR 1062, 1205 BEGIN END;  -- there, or busy: _take will see
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
        BEGIN SET SESSION innodb_lock_wait_timeout = v_wait; RESIGNAL; END;
    -- Only when the row is gone: an INSERT that finds it there (1062)
    -- keeps a shared lock on it to the end of the transaction, even in
    -- READ COMMITTED, and the holder's renew and unlock would wait for it.
    -- The row as a plain read shows it (the snapshot in REPEATABLE READ,
    -- the latest in READ COMMITTED) and the gate as that read shows it,
    -- then the gate as it is: shown, and nothing created or deleted in the
    -- slot since, it is there (held by another transaction: nothing to
    -- do); its own deletion since (and nothing else), gone: insert; shown
    -- and anything else since, unknown: as _unpin_gate.
    SELECT gen INTO v_gen FROM dlock.gates AS gate_seen WHERE slot = dlock._slot(p_resource);
    SELECT COUNT(*) INTO v_there FROM dlock.leases AS seen WHERE resource = p_resource AND tail = 0;
    SELECT 1, gen, last INTO v_gate, v_gen_now, v_last FROM dlock.gates AS gate
     WHERE slot = dlock._slot(p_resource) FOR UPDATE SKIP LOCKED;
    IF v_gate = 1 AND v_there = 1 AND v_gen_now = v_gen THEN
        SET v_gate = 0;    -- there
    ELSEIF v_gate = 1 AND v_there = 1 AND NOT (v_gen_now = v_gen + 1 AND v_last = p_resource) THEN
        CALL dlock._unpin_gate(p_resource);    -- error 1020 in a REPEATABLE READ transaction
        SET v_gate = 0;
    END IF;
    IF v_gate = 1 THEN
        SET SESSION innodb_lock_wait_timeout = 0;
        INSERT INTO dlock.leases (resource, tail, released_at) VALUES (p_resource, 0, dlock._now());
        IF ROW_COUNT() = 1 THEN
            INSERT INTO dlock.leases (resource, tail) VALUES (p_resource, 1);
            INSERT IGNORE INTO dlock.pins (resource, tail) VALUES (p_resource, 0), (p_resource, 1);
            UPDATE dlock.gates SET gen = gen + 1, last = p_resource WHERE slot = dlock._slot(p_resource);
        END IF;
        SET SESSION innodb_lock_wait_timeout = v_wait;
    END IF;
END//

/*
 * try_lock: the fence if acquired or re-entered, NULL if another holder has
 * the resource or another transaction is changing it.  Never waits.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.try_lock(
    p_resource LONGBLOB, p_holder LONGBLOB, p_lease_arg LONGBLOB) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_lease DOUBLE DEFAULT dlock._seconds('lease', p_lease_arg);
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE v_fence BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('try_lock', TRUE, TRUE, p_resource, v_holder, p_lease, NULL);
    SET v_fence = dlock._take(p_resource, v_holder, dlock._me(),
                              IFNULL(ROUND(p_lease * 1000000), 30000000));
    CALL dlock._si_restore(v_si);
    RETURN IF(v_fence > 0, v_fence, NULL);
END//

/*
 * lock: like try_lock, but polls (every 5 ms rising to 100 ms) for up to
 * p_wait seconds (NULL: no limit).  A procedure, because in autocommit mode
 * each of its statements commits on its own: no attempt holds a lock or a
 * snapshot while it sleeps (a function would hold its whole statement open).
 * Returns one row, `fence`, NULL on timeout.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock.lock(
    IN p_resource LONGBLOB, IN p_holder LONGBLOB, IN p_lease_arg LONGBLOB, IN p_wait_arg LONGBLOB)
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_lease DOUBLE DEFAULT dlock._seconds('lease', p_lease_arg);
    DECLARE p_wait DOUBLE DEFAULT dlock._seconds('wait', p_wait_arg);
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE v_me VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin DEFAULT dlock._me();
    DECLARE v_fence BIGINT;
    DECLARE v_deadline DATETIME(6);
    DECLARE v_nap DOUBLE DEFAULT 0.005;
    DECLARE v_left DOUBLE;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('lock', TRUE, TRUE, p_resource, v_holder, p_lease, p_wait);
    IF p_wait IS NOT NULL THEN
        SET v_deadline = SYSDATE(6) + INTERVAL ROUND(LEAST(p_wait, 31557600000) * 1000000) MICROSECOND;
    END IF;
    poll: LOOP
        SET v_fence = dlock._take(p_resource, v_holder, v_me, IFNULL(ROUND(p_lease * 1000000), 30000000));
        IF v_fence = -2 THEN
            CALL dlock._create(p_resource);
            SET v_fence = dlock._take(p_resource, v_holder, v_me, IFNULL(ROUND(p_lease * 1000000), 30000000));
        END IF;
        IF v_fence > 0 THEN
            LEAVE poll;
        ELSEIF v_fence = -3 THEN
            SIGNAL SQLSTATE '40P01' SET MESSAGE_TEXT =
                'deadlock detected: this transaction holds the resource (its xact_lock, or a holding it took, re-entered or renewed) and only its end lets go: lock() would wait for its own transaction (HINT: call lock() before, or outside, that transaction)';
        END IF;
        IF v_deadline IS NOT NULL THEN
            SET v_left = TIMESTAMPDIFF(MICROSECOND, SYSDATE(6), v_deadline) / 1000000;
            IF v_left <= 0 THEN
                LEAVE poll;
            END IF;
        END IF;
        -- SLEEP returns 1 when KILL QUERY (or a client's cancel) interrupts
        -- it; the procedure would otherwise go on polling.
        IF SLEEP(LEAST(v_nap, IFNULL(v_left, v_nap))) = 1 THEN
            SIGNAL SQLSTATE '70100' SET MESSAGE_TEXT = 'dlock: the wait was interrupted';
        END IF;
        SET v_nap = LEAST(v_nap * 2, 0.1);
    END LOOP;
    CALL dlock._si_restore(v_si);
    SELECT IF(v_fence > 0, v_fence, NULL) AS fence;
END//

/*
 * _mine: for unlock and renew: the plain read of a holding, and the same
 * checks once the row is locked.  0 when p_holder holds the resource
 * (under fence p_fence when given), NULL when it does not; 42501 when the
 * holding of that holder text belongs to another user.  p_locked: 0, the
 * plain read; 1, the read that locks the row (waiting for it: only the
 * holder gets this far); 2, for renew, which waits for no change of
 * holder: when another transaction has the row, NULL at once if that
 * transaction is changing who holds it (a takeover of an expired lease the
 * caller's snapshot still shows live, a release, a break: it has the row of
 * dlock.pins, tested with a shared lock, SKIP LOCKED), else the wait for
 * it (the holder's own other transaction renewing or re-entering; the
 * shared lock on the pins row is then kept, like a pin, to the end of the
 * caller's transaction).
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._mine(
    p_resource LONGBLOB, p_holder LONGBLOB, p_fence BIGINT, p_locked TINYINT) RETURNS INT
    NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_owner VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
    DECLARE v_fence BIGINT;
    DECLARE v_exp DATETIME(6);
    DECLARE v_pin INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    IF p_locked = 2 THEN
        SELECT 1, holder, owner, fence, expires_at INTO v_found, v_h, v_owner, v_fence, v_exp
          FROM dlock.leases AS skipping WHERE resource = p_resource AND tail = 0 FOR UPDATE SKIP LOCKED;
        IF v_found = 0 THEN
            SELECT 1 INTO v_pin FROM dlock.pins AS pinning
             WHERE resource = p_resource AND tail = 0 LOCK IN SHARE MODE SKIP LOCKED;
            IF v_pin = 0 THEN
                RETURN NULL;    -- changing hands: not waited for
            END IF;
            SELECT 1, holder, owner, fence, expires_at INTO v_found, v_h, v_owner, v_fence, v_exp
              FROM dlock.leases AS locked WHERE resource = p_resource AND tail = 0 FOR UPDATE;
        END IF;
    ELSEIF p_locked = 1 THEN
        SELECT 1, holder, owner, fence, expires_at INTO v_found, v_h, v_owner, v_fence, v_exp
          FROM dlock.leases AS locked WHERE resource = p_resource AND tail = 0 FOR UPDATE;
    ELSE
        SELECT 1, holder, owner, fence, expires_at INTO v_found, v_h, v_owner, v_fence, v_exp
          FROM dlock.leases AS seen WHERE resource = p_resource AND tail = 0;
    END IF;
    -- Refused after locking the row (p_locked > 0, v_found = 1): it changed
    -- after the plain read (a stale REPEATABLE READ snapshot).  The lock
    -- would stay to the end of the caller's transaction and hold up the new
    -- holder: _unpin, error 1020 and the transaction rolled back instead.
    IF v_found = 0 OR v_h IS NULL OR v_h <> p_holder OR v_exp <= dlock._now() THEN
        IF p_locked > 0 AND v_found = 1 THEN CALL dlock._unpin(p_resource); END IF;
        RETURN NULL;
    ELSEIF v_owner <> dlock._me() THEN
        IF p_locked > 0 THEN CALL dlock._unpin(p_resource); END IF;
        SIGNAL SQLSTATE '42501' SET MESSAGE_TEXT = 'permission denied: the holding belongs to another user';
    ELSEIF p_fence IS NOT NULL AND p_fence <> v_fence THEN
        IF p_locked > 0 THEN CALL dlock._unpin(p_resource); END IF;
        RETURN NULL;
    END IF;
    RETURN 0;
END//

/*
 * unlock: the count left, 0 when released; NULL if this holder does not
 * hold the resource (expired, someone else's, another fence).  42501 if
 * the holder text is held by another user.  Locks the row only when the
 * plain read says the caller holds it.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.unlock(
    p_resource LONGBLOB, p_holder LONGBLOB, p_fence_arg LONGBLOB) RETURNS INT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_fence BIGINT DEFAULT dlock._integer('fence', p_fence_arg);
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE v_count INT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('unlock', TRUE, TRUE, p_resource, v_holder, NULL, NULL);
    IF dlock._mine(p_resource, v_holder, p_fence, 0) IS NULL
       OR dlock._mine(p_resource, v_holder, p_fence, 1) IS NULL THEN
        CALL dlock._si_restore(v_si);
        RETURN NULL;
    END IF;
    SELECT count INTO v_count FROM dlock.leases AS locked WHERE resource = p_resource AND tail = 0 FOR UPDATE;
    IF v_count > 1 THEN
        UPDATE dlock.leases SET count = count - 1 WHERE resource = p_resource AND tail = 0;
        CALL dlock._mark(p_resource);
    ELSE
        UPDATE dlock.pins SET fence = NULL WHERE resource = p_resource AND tail = 0;    -- waits for a pin
        UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = dlock._now()
         WHERE resource = p_resource AND tail = 0;
    END IF;
    CALL dlock._si_restore(v_si);
    RETURN v_count - 1;
END//

/*
 * renew: the new expiry (UTC), now + lease (NULL: the lease it was taken
 * with); NULL if the lease was lost or the fence is not the current one,
 * at once when another transaction is changing hands (see _mine).
 * An expired lease is never revived.  Changes nothing assert_fence pins.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.renew(
    p_resource LONGBLOB, p_holder LONGBLOB, p_lease_arg LONGBLOB, p_fence_arg LONGBLOB) RETURNS DATETIME(6)
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_lease DOUBLE DEFAULT dlock._seconds('lease', p_lease_arg);
    DECLARE p_fence BIGINT DEFAULT dlock._integer('fence', p_fence_arg);
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE v_lease_us BIGINT;
    DECLARE v_now DATETIME(6);
    DECLARE v_exp DATETIME(6);
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('renew', TRUE, TRUE, p_resource, v_holder, p_lease, NULL);
    IF dlock._mine(p_resource, v_holder, p_fence, 0) IS NULL
       OR dlock._mine(p_resource, v_holder, p_fence, 2) IS NULL THEN
        CALL dlock._si_restore(v_si);
        RETURN NULL;
    END IF;
    SELECT lease_us INTO v_lease_us FROM dlock.leases AS locked WHERE resource = p_resource AND tail = 0 FOR UPDATE;
    SET v_lease_us = IFNULL(ROUND(p_lease * 1000000), v_lease_us);
    SET v_now = dlock._now();
    SET v_exp = v_now + INTERVAL v_lease_us MICROSECOND;
    UPDATE dlock.leases SET lease_us = v_lease_us, renewed_at = v_now, expires_at = v_exp
     WHERE resource = p_resource AND tail = 0;
    CALL dlock._mark(p_resource);
    CALL dlock._si_restore(v_si);
    RETURN v_exp;
END//

/*
 * unlock_all: releases every live holding of this holder and user.  An
 * expired one is left alone (another transaction may be taking it over:
 * never waited for).
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.unlock_all(p_holder LONGBLOB) RETURNS INT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE v_me VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin DEFAULT dlock._me();
    DECLARE v_last VARBINARY(1000) DEFAULT '';
    DECLARE v_next VARBINARY(1000);
    DECLARE v_n INT DEFAULT 0;
    DECLARE v_now DATETIME(6);
    DECLARE v_one INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('unlock_all', TRUE, FALSE, NULL, v_holder, NULL, NULL);
    scan: LOOP
        SET v_next = NULL;
        SELECT resource INTO v_next FROM dlock.leases AS seen
         WHERE resource > v_last AND tail = 0 AND holder = v_holder AND owner = v_me
           AND expires_at > dlock._now()
         ORDER BY resource LIMIT 1;
        IF v_next IS NULL THEN
            LEAVE scan;
        END IF;
        SET v_last = v_next;
        SELECT 1 INTO v_one FROM dlock.leases AS locked WHERE resource = v_next AND tail = 0 FOR UPDATE;
        SET v_now = dlock._now();
        UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = v_now
         WHERE resource = v_next AND tail = 0 AND holder = v_holder AND owner = v_me AND expires_at > v_now;
        IF ROW_COUNT() = 1 THEN
            SET v_n = v_n + 1;
            UPDATE dlock.pins SET fence = NULL WHERE resource = v_next AND tail = 0;    -- waits for a pin
        ELSE
            CALL dlock._unpin(v_next);    -- not ours after all: see _mine
        END IF;
    END LOOP;
    CALL dlock._si_restore(v_si);
    RETURN v_n;
END//

/*
 * _reap_one: frees the resource if its lease has expired (1), deletes it if
 * free for an hour (0; not while another transaction holds its creation
 * gate, whose gen it moves).  Skips a row another transaction holds, and a
 * holding assert_fence pins.  First locks its slot's row of dlock.reapers
 * (SKIP LOCKED: an acquirer waiting there, see _reaper_wait, or another
 * reaper, makes it pass by), kept until this statement commits.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._reap_one(p_resource VARBINARY(1000)) RETURNS INT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_free INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_fence BIGINT;
    DECLARE v_exp DATETIME(6);
    DECLARE v_rel DATETIME(6);
    DECLARE v_now DATETIME(6);
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    SELECT 1 INTO v_free FROM dlock.reapers AS reaping
     WHERE slot = dlock._slot(p_resource) FOR UPDATE SKIP LOCKED;
    IF v_free = 0 THEN
        RETURN 0;
    END IF;
    SET v_free = 0;
    SELECT 1, holder, fence, expires_at, released_at INTO v_found, v_h, v_fence, v_exp, v_rel
      FROM dlock.leases AS skipping WHERE resource = p_resource AND tail = 0 FOR UPDATE SKIP LOCKED;
    SET v_now = dlock._now();
    IF v_found = 0 OR NOT ((v_h IS NOT NULL AND v_exp <= v_now)
                           OR (v_h IS NULL AND v_rel < v_now - INTERVAL 1 HOUR)) THEN
        RETURN 0;
    END IF;
    SELECT 1 INTO v_free FROM dlock.pins AS pinning
     WHERE resource = p_resource AND tail = 0 FOR UPDATE SKIP LOCKED;
    IF v_free = 0 THEN
        RETURN 0;    -- pinned (or being changed)
    ELSEIF v_h IS NOT NULL THEN
        UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = v_now
         WHERE resource = p_resource AND tail = 0;
        UPDATE dlock.pins SET fence = NULL WHERE resource = p_resource AND tail = 0;
        RETURN 1;
    END IF;
    -- A deletion moves the gate's gen (see _take): not while another
    -- transaction holds the gate.
    SET v_free = 0;
    SELECT 1 INTO v_free FROM dlock.gates AS gate
     WHERE slot = dlock._slot(p_resource) FOR UPDATE SKIP LOCKED;
    IF v_free = 0 THEN
        RETURN 0;
    END IF;
    DELETE FROM dlock.leases WHERE resource = p_resource AND tail IN (0, 1);
    DELETE FROM dlock.pins WHERE resource = p_resource AND tail IN (0, 1);
    UPDATE dlock.gates SET gen = gen + 1, last = p_resource WHERE slot = dlock._slot(p_resource);
    RETURN 0;
END//

/*
 * _reap: one round; each statement is its own transaction in autocommit
 * mode (the event's), so a round holds at most one row at a time.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock._reap(OUT p_reaped INT)
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_last VARBINARY(1000) DEFAULT '';
    DECLARE v_next VARBINARY(1000);
    DECLARE v_now DATETIME(6);
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
        BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    SET p_reaped = 0;
    scan: LOOP
        SET v_next = NULL;
        SET v_now = dlock._now();
        SELECT resource INTO v_next FROM dlock.leases
         WHERE resource > v_last AND tail = 0
           AND ((holder IS NOT NULL AND expires_at <= v_now)
                OR (holder IS NULL AND released_at < v_now - INTERVAL 1 HOUR))
         ORDER BY resource LIMIT 1;
        IF v_next IS NULL THEN
            LEAVE scan;
        END IF;
        SET v_last = v_next;
        -- One statement, its own transaction: the row and its slot's
        -- reaper gate (see _reap_one) are unlocked when it commits.
        SET p_reaped = p_reaped + dlock._reap_one(v_next);
    END LOOP;
    CALL dlock._si_restore(v_si);
END//

/*
 * reap: frees every expired lease now; one row, `reaped`.  Only in
 * autocommit mode: inside a transaction (or with autocommit off) every row
 * it freed or deleted would stay locked to the end of the caller's
 * transaction (a procedure cannot commit apart from it), so an expired
 * lease would not be free at once, and a REPEATABLE READ scan's gap locks
 * would hold up new resources.  Refused there with SQLSTATE 25001, before
 * it reads or locks anything.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock.reap()
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_n INT;
    IF @@session.in_transaction = 1 OR @@session.autocommit = 0 THEN
        SIGNAL SQLSTATE '25001' SET MESSAGE_TEXT =
            'dlock.reap() cannot run inside a transaction: the rows it frees would stay locked until the transaction ends; call it in autocommit mode';
    END IF;
    CALL dlock._check('reap', TRUE, FALSE, NULL, NULL, NULL, NULL);
    CALL dlock._reap(v_n);
    SELECT v_n AS reaped;
END//

-- _seen: for check_fence: notes p in @dlock_pinned; false.
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._seen(p BIGINT) RETURNS BOOLEAN
    NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
BEGIN
    SET @dlock_pinned = p;
    RETURN FALSE;
END//

/*
 * check_fence: is that fence the current, unexpired holding?  A plain
 * read, which locks nothing: at REPEATABLE READ it answers from the
 * snapshot, the transaction's or, in autocommit, the statement's.  (A
 * locking read kept its lock to the end of the caller's statement: any
 * user could hold up the holder's release with one slow statement;
 * 083_check_fence_pin.)  Where that read may show a change not committed
 * (a READ UNCOMMITTED transaction), a match is confirmed on the
 * resource's row of dlock.pins with a share lock that skips a row
 * another transaction is changing hands (false then, never a wait); the
 * read's condition rejects the row, so that InnoDB lets go of its lock at
 * once: check_fence, open to every user, never pins (assert_fence does,
 * for the holder).  The isolation level MariaDB shows is the session's
 * (@@tx_isolation), so a READ UNCOMMITTED set for one transaction only
 * (SET TRANSACTION without SESSION) is not seen.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.check_fence(
    p_resource LONGBLOB, p_fence_arg LONGBLOB) RETURNS BOOLEAN
    NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_fence BIGINT DEFAULT dlock._integer('fence', p_fence_arg);
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();    -- also refuses sql_select_limit = 0
    DECLARE v_n INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('check_fence', FALSE, TRUE, p_resource, NULL, NULL, NULL);
    IF p_fence IS NULL THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'fence must not be null';
    END IF;
    SELECT COUNT(*) INTO v_n FROM dlock.leases AS seen
     WHERE resource = p_resource AND tail = 0 AND fence = p_fence AND holder IS NOT NULL
       AND expires_at > dlock._now();
    IF v_n > 0 AND @@session.tx_isolation = 'READ-UNCOMMITTED' THEN
        -- A locked match sets @dlock_pinned (_seen), then the condition
        -- rejects the row: in READ UNCOMMITTED InnoDB lets go of a row its
        -- condition rejects, so nothing stays pinned (anyone may call
        -- check_fence).  `tail + 0`: a scan of the resource's rows (a point
        -- lookup would keep the lock); _seen, a stored function, is
        -- evaluated only on rows locked (not pushed down to InnoDB, which
        -- would see a row SKIP LOCKED then passes by).  No snapshot there:
        -- the row evaluated is the latest.
        SET @dlock_pinned = NULL;
        SELECT COUNT(*) INTO v_n FROM dlock.pins AS pinning
         WHERE resource = p_resource AND tail + 0 = 0 AND fence = p_fence
           AND dlock._seen(fence)
         LOCK IN SHARE MODE SKIP LOCKED;
        SET v_n = IF(@dlock_pinned <=> p_fence, 1, 0);
        SET @dlock_pinned = NULL;
    END IF;
    CALL dlock._si_restore(v_si);
    RETURN v_n > 0;
END//

/*
 * assert_fence: 55P03 unless check_fence holds; then a shared lock on the
 * resource's row of dlock.pins, read as it is (a locking read) and still
 * showing that fence, pins the holding until the caller's transaction ends:
 * no takeover, expiry, break or release by anyone; the holder's renew still
 * goes through.  Only the user who holds it may pin it (42501, and nothing
 * locked).
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.assert_fence(
    p_resource LONGBLOB, p_fence_arg LONGBLOB) RETURNS BOOLEAN
    NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_fence BIGINT DEFAULT dlock._integer('fence', p_fence_arg);
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_pinned BIGINT;
    DECLARE v_pin INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_owner VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
    DECLARE v_fence BIGINT;
    DECLARE v_exp DATETIME(6);
    DECLARE v_msg VARCHAR(1200);
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('assert_fence', FALSE, TRUE, p_resource, NULL, NULL, NULL);
    IF p_fence IS NULL THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'fence must not be null';
    END IF;
    SELECT 1, holder, owner, fence, expires_at INTO v_found, v_h, v_owner, v_fence, v_exp
      FROM dlock.leases AS seen WHERE resource = p_resource AND tail = 0;
    IF v_found = 1 AND v_h IS NOT NULL AND v_fence = p_fence AND v_exp > dlock._now() THEN
        IF v_owner <> dlock._me() THEN
            SIGNAL SQLSTATE '42501' SET MESSAGE_TEXT = 'permission denied: the holding belongs to another user';
        END IF;
        SELECT 1, fence INTO v_pin, v_pinned FROM dlock.pins AS pinning
         WHERE resource = p_resource AND tail = 0 LOCK IN SHARE MODE;
    END IF;
    IF v_pin = 1 AND NOT (v_pinned <=> p_fence) THEN
        -- The pin just taken shows another holding: the plain read was a
        -- stale snapshot.  Refused, and the shared lock must not stay.
        CALL dlock._unpin_pin(p_resource);
    END IF;
    IF v_pinned IS NULL OR v_pinned <> p_fence THEN
        SET v_msg = CONCAT('fence ', p_fence, ' is not the current holding of resource ',
                           dlock._show(p_resource));
        SIGNAL SQLSTATE '55P03' SET MESSAGE_TEXT = v_msg;
    END IF;
    CALL dlock._si_restore(v_si);
    RETURN TRUE;
END//

-- break_lock: force release, for administrators (EXECUTE granted by hand).
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.break_lock(p_resource LONGBLOB) RETURNS BOOLEAN
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_exists INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('break_lock', TRUE, TRUE, p_resource, NULL, NULL, NULL);
    SELECT COUNT(*) INTO v_exists FROM dlock.leases AS seen
     WHERE resource = p_resource AND tail = 0 AND holder IS NOT NULL;
    IF v_exists > 0 THEN
        SELECT holder INTO v_h FROM dlock.leases AS locked WHERE resource = p_resource AND tail = 0 FOR UPDATE;
    END IF;
    IF v_h IS NOT NULL THEN
        UPDATE dlock.pins SET fence = NULL WHERE resource = p_resource AND tail = 0;    -- waits for a pin
        UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = dlock._now()
         WHERE resource = p_resource AND tail = 0;
    END IF;
    CALL dlock._si_restore(v_si);
    RETURN v_h IS NOT NULL;
END//

/*
 * xact_lock: a lock held until the caller's transaction commits or rolls
 * back (the row's record lock, as SELECT ... FOR UPDATE); one row, `fence`,
 * NULL when p_wait (seconds; NULL: no limit) runs out.  It polls other
 * transactions' locks like lock(), holding nothing while it sleeps.  A
 * procedure: MariaDB honours SKIP LOCKED only at its first execution within
 * one statement, so a function could not retry.  A resource under a live
 * lease makes it return NULL at once: it would wait for a lease, not for a
 * transaction (and the transaction may hold that lease itself).
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock.xact_lock(IN p_resource LONGBLOB, IN p_wait_arg LONGBLOB)
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_wait DOUBLE DEFAULT dlock._seconds('wait', p_wait_arg);
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE v_fence BIGINT;
    DECLARE v_deadline DATETIME(6);
    DECLARE v_left DOUBLE;
    DECLARE v_nap DOUBLE DEFAULT 0.005;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('xact_lock', TRUE, TRUE, p_resource, NULL, NULL, p_wait);
    IF p_wait IS NOT NULL THEN
        SET v_deadline = SYSDATE(6) + INTERVAL ROUND(LEAST(p_wait, 31557600000) * 1000000) MICROSECOND;
    END IF;
    poll: LOOP
        SET v_fence = dlock._take(p_resource, NULL, NULL, NULL);
        IF v_fence = -2 THEN
            CALL dlock._create(p_resource);
            SET v_fence = dlock._take(p_resource, NULL, NULL, NULL);
        END IF;
        IF v_fence > 0 OR v_fence = -1 THEN
            LEAVE poll;
        END IF;
        IF v_deadline IS NOT NULL THEN
            SET v_left = TIMESTAMPDIFF(MICROSECOND, SYSDATE(6), v_deadline) / 1000000;
            IF v_left <= 0 THEN
                LEAVE poll;
            END IF;
        END IF;
        -- SLEEP returns 1 when KILL QUERY (or a client's cancel) interrupts
        -- it; the procedure would otherwise go on polling.
        IF SLEEP(LEAST(v_nap, IFNULL(v_left, v_nap))) = 1 THEN
            SIGNAL SQLSTATE '70100' SET MESSAGE_TEXT = 'dlock: the wait was interrupted';
        END IF;
        SET v_nap = LEAST(v_nap * 2, 0.1);
    END LOOP;
    CALL dlock._si_restore(v_si);
    SELECT IF(v_fence > 0, v_fence, NULL) AS fence;
END//

-- try_xact_lock: one attempt; the fence or NULL at once.
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.try_xact_lock(p_resource LONGBLOB) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_si BOOLEAN DEFAULT dlock._si_off();
    DECLARE v_fence BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN CALL dlock._si_restore(v_si); RESIGNAL; END;
    CALL dlock._check('try_xact_lock', TRUE, TRUE, p_resource, NULL, NULL, NULL);
    SET v_fence = dlock._take(p_resource, NULL, NULL, NULL);
    CALL dlock._si_restore(v_si);
    RETURN IF(v_fence > 0, v_fence, NULL);
END//

DELIMITER ;

/*
 * _holdings_after: the next 1000 live holdings (tail 0, a holder) after
 * resource p_after, in resource order, as a JSON array (binary columns in
 * hex); for the view dlock.locks.  Its read is a plain SELECT in a routine
 * that changes nothing: consistent, no lock, whatever statement reads the
 * view (InnoDB reads the tables of the statement itself with shared locks
 * in an INSERT ... SELECT under REPEATABLE READ).  Refused (0A000) in a
 * SERIALIZABLE transaction, where every read locks, and (55000) in a
 * session that binary-logs in STATEMENT or MIXED format (see _check).
 * group_concat_max_len (JSON_ARRAYAGG's limit) is raised for the read.
 */
DELIMITER //
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._holdings_after(p_after VARBINARY(1000)) RETURNS LONGTEXT CHARACTER SET utf8mb4
    NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_len BIGINT UNSIGNED DEFAULT @@session.group_concat_max_len;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
        BEGIN SET SESSION group_concat_max_len = v_len; RESIGNAL; END;
    CALL dlock._check('locks', FALSE, FALSE, NULL, NULL, NULL, NULL);
    SET SESSION group_concat_max_len = 67108864;
    SELECT JSON_ARRAYAGG(JSON_OBJECT('r', HEX(resource), 'h', HEX(holder), 'c', count, 'f', fence,
                                     'l', lease_us, 'a', acquired_at, 'n', renewed_at,
                                     'e', expires_at, 'o', owner) ORDER BY resource)
      INTO v
      FROM (SELECT * FROM dlock.leases AS seen
             WHERE resource > p_after AND tail = 0 AND holder IS NOT NULL
             ORDER BY resource LIMIT 1000) AS batch;
    SET SESSION group_concat_max_len = v_len;
    RETURN v;
END//
DELIMITER ;

/*
 * Current holdings; expired ones stay listed (expired = 1) until reaped.
 * Read 1000 holdings at a time through _holdings_after (a recursive walk
 * in resource order, at most max_recursive_iterations + 1 batches), never
 * from dlock.leases in the reader's own statement: a user's SELECT ... FOR
 * UPDATE, INSERT ... SELECT or SERIALIZABLE read of the view locks none of
 * the table's rows.
 */
CREATE ALGORITHM = TEMPTABLE DEFINER = 'dlock'@'localhost' SQL SECURITY DEFINER VIEW dlock.locks AS
    WITH RECURSIVE walk (j) AS (
        SELECT dlock._holdings_after(x'')
        UNION ALL
        SELECT dlock._holdings_after(UNHEX(JSON_VALUE(walk.j, '$[999].r'))) FROM walk
         WHERE JSON_LENGTH(walk.j) = 1000)
    SELECT CAST(UNHEX(t.r) AS CHAR(1000) CHARACTER SET utf8mb4) COLLATE utf8mb4_bin AS resource,
           CAST(UNHEX(t.h) AS CHAR(255) CHARACTER SET utf8mb4) COLLATE utf8mb4_bin AS holder,
           t.c AS count, t.f AS fence, t.l / 1000000 AS lease,
           CAST(t.a AS DATETIME(6)) AS acquired_at,
           CAST(t.n AS DATETIME(6)) AS renewed_at,
           CAST(t.e AS DATETIME(6)) AS expires_at,
           t.o COLLATE utf8mb4_nopad_bin AS owner,
           CAST(t.e AS DATETIME(6)) <= UTC_TIMESTAMP(6) AS expired
      FROM walk w,
           JSON_TABLE(w.j, '$[*]' COLUMNS (
               r VARCHAR(2000) CHARACTER SET utf8mb4 PATH '$.r',
               h VARCHAR(510) CHARACTER SET utf8mb4 PATH '$.h',
               c INT PATH '$.c', f BIGINT PATH '$.f', l BIGINT PATH '$.l',
               a VARCHAR(32) CHARACTER SET utf8mb4 PATH '$.a',
               n VARCHAR(32) CHARACTER SET utf8mb4 PATH '$.n',
               e VARCHAR(32) CHARACTER SET utf8mb4 PATH '$.e',
               o VARCHAR(128) CHARACTER SET utf8mb4 PATH '$.o')) AS t
     WHERE w.j IS NOT NULL;

/*
 * Lazy expiry plus this event (needs event_scheduler = ON).  On a read-only
 * server it does nothing: its definer cannot write there, and every failed
 * run would write lines to the error log, every second.  A replica gets the
 * event from the binary log as SLAVESIDE_DISABLED, and it stays so when the
 * replica is promoted: dlock.on_promotion() (below) enables it there.
 */
DELIMITER //
CREATE DEFINER = 'dlock'@'localhost' EVENT dlock.reap
    ON SCHEDULE EVERY 1 SECOND ON COMPLETION PRESERVE ENABLE
    COMMENT 'dlock: frees expired leases'
    DO BEGIN
        IF NOT @@global.read_only THEN
            CALL dlock._reap(@dlock_reaped);
        END IF;
    END//
DELIMITER ;

/*
 * on_promotion: for an operator (or a failover script) on a replica just
 * promoted to primary (writable): enables the dlock.reap event, which the
 * replica got as SLAVESIDE_DISABLED, and reaps once; one row, the event's
 * `status` and `reaped`.  ALTER EVENT commits, so only in autocommit mode
 * (25001); on a read-only server 25006.  EXECUTE is granted to nobody, as
 * for break_lock.  Its ALTER EVENT replicates to the new primary's own
 * replicas, where the event is SLAVESIDE_DISABLED again.
 */
DELIMITER //
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock.on_promotion()
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_n INT;
    IF @@session.in_transaction = 1 OR @@session.autocommit = 0 THEN
        SIGNAL SQLSTATE '25001' SET MESSAGE_TEXT =
            'dlock.on_promotion() cannot run inside a transaction (ALTER EVENT commits it): call it in autocommit mode';
    END IF;
    CALL dlock._check('on_promotion', TRUE, FALSE, NULL, NULL, NULL, NULL);
    ALTER EVENT dlock.reap ENABLE;
    CALL dlock._reap(v_n);
    SELECT STATUS AS status, v_n AS reaped FROM information_schema.EVENTS
     WHERE EVENT_SCHEMA = 'dlock' AND EVENT_NAME = 'reap';
END//
DELIMITER ;

/* What users may do: call the public routines, read the view. */
GRANT EXECUTE ON FUNCTION dlock.version TO PUBLIC;
GRANT EXECUTE ON FUNCTION dlock.session_holder TO PUBLIC;
GRANT EXECUTE ON FUNCTION dlock.try_lock TO PUBLIC;
GRANT EXECUTE ON PROCEDURE dlock.lock TO PUBLIC;
GRANT EXECUTE ON FUNCTION dlock.unlock TO PUBLIC;
GRANT EXECUTE ON FUNCTION dlock.renew TO PUBLIC;
GRANT EXECUTE ON FUNCTION dlock.unlock_all TO PUBLIC;
GRANT EXECUTE ON PROCEDURE dlock.reap TO PUBLIC;
GRANT EXECUTE ON FUNCTION dlock.check_fence TO PUBLIC;
GRANT EXECUTE ON FUNCTION dlock.assert_fence TO PUBLIC;
GRANT EXECUTE ON PROCEDURE dlock.xact_lock TO PUBLIC;
GRANT EXECUTE ON FUNCTION dlock.try_xact_lock TO PUBLIC;
GRANT SELECT ON dlock.locks TO PUBLIC;

-- Settings dlock relies on but cannot set: shown when they are off.
SELECT 'dlock 0.1 installed' AS dlock,
       IF(@@global.innodb_flush_log_at_trx_commit = 1, 'ok',
          'WARNING: innodb_flush_log_at_trx_commit is not 1: acquisitions may be lost in a crash') AS durability,
       IF(@@global.event_scheduler = 'ON', 'ok',
          'note: event_scheduler is off: expired leases are freed lazily and by CALL dlock.reap()') AS reaping,
       IF(EXISTS (SELECT 1 FROM mysql.user WHERE User = ''),
          'WARNING: anonymous accounts exist (User = '''' in mysql.user): whoever logs in through one chooses the user name dlock takes for the owner of holdings, and can act on that user''s holdings: DROP USER them',
          'ok') AS accounts;
