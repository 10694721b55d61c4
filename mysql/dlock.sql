/*
 * mysql/dlock.sql: dlock 0.1 for MariaDB (10.6 and later; tested on 10.11)
 * and MySQL 8 (written for it where the dialects agree; untested there).
 *
 *     mariadb < mysql/dlock.sql           (as an administrator, once)
 *
 * Creates database `dlock`: the lock table, the fence counter, the routines
 * users call, the view `dlock.locks` and the event `dlock.reap`.  A later
 * version ships mysql/dlock--0.1--X.sql, run the same way, which checks
 * dlock.version() first; this script refuses to run over an existing
 * installation (CREATE DATABASE fails).
 *
 * Shared state and what protects it:
 * - dlock.leases, one row per resource.  Every change of a holding happens
 *   under that row's InnoDB record lock, taken by the routine that changes
 *   it and held to the end of the caller's transaction.  Routines look for
 *   a row with a plain (non-locking) read first and lock it only when it
 *   exists, so no routine ever takes a gap lock (the REPEATABLE READ trap:
 *   two sessions holding gap locks and inserting deadlock).  Acquirers lock
 *   with SKIP LOCKED: they never wait for another transaction.  Each kind of
 *   read has its own table alias (seen, locked, skipping): inside a stored
 *   function all statements share the tables opened for the calling
 *   statement, and a SKIP LOCKED read through the same alias as an earlier
 *   plain read of the table silently waits instead (MariaDB 10.11); and
 *   SKIP LOCKED holds only at its first execution within one statement, so
 *   everything that retries (lock, xact_lock, reaping) is a procedure whose
 *   every attempt is a statement of its own.
 * - dlock.fences, an AUTO_INCREMENT counter: InnoDB hands out its values
 *   outside transactions (never reused after a rollback) and never lowers
 *   it while the server runs.  A fence is drawn only after the resource's
 *   row is locked, under a named lock (dlock.fence_lock's) held for the
 *   draw only.  A fence is never below the clock: when the counter is
 *   behind (milliseconds since 2020-01-01 UTC) << 22, the draw raises it
 *   there by inserting that value, which InnoDB applies at once, whatever
 *   becomes of the transaction.  So a fence drawn at millisecond t is in
 *   [t << 22, (t + 1) << 22) (fewer than 2^22 draws a millisecond), and
 *   whatever sets the counter back (a crash that loses the redo of an
 *   acquisition never committed, a restore from a dump, which carries the
 *   counter as it was, a re-installation, a replica's promotion) is undone
 *   by the next draw, at a later millisecond: the same assumption about
 *   clocks as PostgreSQL dlock's epochs (README, "Fence format").
 * - Users get EXECUTE on the public routines and SELECT on dlock.locks and
 *   nothing else.  The routines run as `dlock`@`localhost` (SQL SECURITY
 *   DEFINER), a locked account that owns nothing outside this database.
 *   Inside them CURRENT_USER() is that account, so the owner of a holding
 *   is the user name part of USER(), the name the client logged in with:
 *   the same as CURRENT_USER()'s user part for every account but an
 *   anonymous one (User = ''), through which a client names itself; the
 *   install warns when such accounts exist (README, "MySQL and MariaDB").
 * - Time: all lease arithmetic uses SYSDATE(6), the clock at the call (NOW()
 *   is the start of the statement), converted to UTC; times are stored and
 *   shown in UTC.
 */

SET SESSION sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO';

SET NAMES utf8mb4;
CREATE DATABASE dlock CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;

DELIMITER //
-- Preflight: refuse clearly what would install but not work.
CREATE PROCEDURE dlock._preflight()
BEGIN
    IF @@global.log_bin = 1 AND @@global.log_bin_trust_function_creators = 0 THEN
        SIGNAL SQLSTATE '55000' SET MESSAGE_TEXT =
            'binary logging is on: set log_bin_trust_function_creators = 1 (dlock''s functions write and read the clock), then DROP DATABASE dlock and run this script again';
    END IF;
    IF @@global.log_bin = 1 AND @@global.binlog_format = 'STATEMENT' THEN
        SIGNAL SQLSTATE '55000' SET MESSAGE_TEXT =
            'binlog_format = STATEMENT would replay dlock calls with the replica''s clock: use ROW or MIXED, then DROP DATABASE dlock and run this script again';
    END IF;
END//
DELIMITER ;
CALL dlock._preflight();
DROP PROCEDURE dlock._preflight;

-- The definer of every routine, view and event: never logs in.
CREATE USER IF NOT EXISTS 'dlock'@'localhost' ACCOUNT LOCK;
GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE, EVENT ON dlock.* TO 'dlock'@'localhost';

/*
 * One row per resource.  A release keeps the row (holder NULL) so that the
 * next acquisition updates it in place; reaping deletes rows free for an
 * hour.  Bytes compare as bytes (VARBINARY): case and trailing spaces
 * matter.  Times are UTC.
 */
CREATE TABLE dlock.leases (
    resource    VARBINARY(1000) NOT NULL PRIMARY KEY,
    holder      VARBINARY(255) NULL,
    owner       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    count       INT NOT NULL DEFAULT 0,
    fence       BIGINT NULL,
    lease_us    BIGINT NULL,            -- the lease, in microseconds
    acquired_at DATETIME(6) NULL,
    renewed_at  DATETIME(6) NULL,
    expires_at  DATETIME(6) NULL,
    released_at DATETIME(6) NULL
) ENGINE = InnoDB;

-- The fence counter (see the header).  Rows live for one statement.
CREATE TABLE dlock.fences (
    n BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE = InnoDB;
-- The name of the named lock _fence draws under (random; users cannot read it).
CREATE TABLE dlock.fence_lock (
    name VARCHAR(64) CHARACTER SET ascii NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
INSERT INTO dlock.fence_lock VALUES (CONCAT('dlock:', LEFT(SHA2(CONCAT(UUID(), RAND(), SYSDATE(6), CONNECTION_ID()), 256), 56)));
SET @dlock_first_fence = CAST(TIMESTAMPDIFF(MICROSECOND, '2020-01-01', UTC_TIMESTAMP(6)) DIV 1000 AS UNSIGNED) << 22;
SET @dlock_sql = CONCAT('ALTER TABLE dlock.fences AUTO_INCREMENT = ', @dlock_first_fence);
PREPARE dlock_stmt FROM @dlock_sql;
EXECUTE dlock_stmt;
DEALLOCATE PREPARE dlock_stmt;

DELIMITER //

CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.version() RETURNS VARCHAR(16)
    DETERMINISTIC NO SQL SQL SECURITY DEFINER
    RETURN '0.1'//

/*
 * _check: SIGNAL SQLSTATE 22023 naming the first bad argument, 25006 on a
 * read-only server when p_writes.  Arguments not checked are passed NULL
 * with their flag off.
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
    IF p_writes AND @@global.read_only THEN
        SET v_msg = CONCAT('cannot execute dlock.', p_fn, '() on a read-only server');
        SIGNAL SQLSTATE '25006' SET MESSAGE_TEXT = v_msg;
    END IF;
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
        OR NOT p_v REGEXP '^ *[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]{1,3})? *$' THEN
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
    ELSEIF LENGTH(p_v) > 40 OR NOT p_v REGEXP '^ *[-+]?[0-9]+ *$'
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
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._me() RETURNS VARCHAR(128) CHARACTER SET utf8mb4
    NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
    RETURN LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1)//

-- _now: the server clock at this moment (not the statement's start), UTC.
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._now() RETURNS DATETIME(6)
    NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
    RETURN SYSDATE(6) - INTERVAL TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()) SECOND//

/*
 * _fence: the next fence, never below the clock (see the header: the
 * counter, raised to (milliseconds since 2020-01-01 UTC) << 22 when it is
 * behind).  Callers hold the resource's row lock.  The draw and the raise
 * happen under the named lock of dlock.fence_lock, held for these few
 * statements only (not to the end of the transaction), so that no two
 * sessions insert the same explicit value (the second would wait for the
 * first's transaction).  Its name is random, made at install time, and
 * users cannot read it; a lock left by this session (a statement killed
 * in the middle) is released first.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._fence() RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v BIGINT;
    DECLARE v_clock BIGINT;
    DECLARE v_name VARCHAR(64);
    DECLARE v_left INT DEFAULT 10;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        DO RELEASE_LOCK(v_name);
        RESIGNAL;
    END;
    SELECT name INTO v_name FROM dlock.fence_lock;
    WHILE v_left > 0 AND IS_USED_LOCK(v_name) = CONNECTION_ID() DO
        DO RELEASE_LOCK(v_name);
        SET v_left = v_left - 1;
    END WHILE;
    IF IFNULL(GET_LOCK(v_name, 10), 0) <> 1 THEN
        SIGNAL SQLSTATE '55P03' SET MESSAGE_TEXT = 'dlock: could not draw a fence: the fence counter''s lock was not granted within 10 s';
    END IF;
    INSERT INTO dlock.fences () VALUES ();
    SET v = LAST_INSERT_ID();
    DELETE FROM dlock.fences WHERE n = v;
    SET v_clock = CAST(TIMESTAMPDIFF(MICROSECOND, '2020-01-01', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) << 22;
    IF v < v_clock THEN
        -- An explicit value above the counter raises it (InnoDB, at once,
        -- whatever becomes of this transaction).
        INSERT INTO dlock.fences (n) VALUES (v_clock);
        DELETE FROM dlock.fences WHERE n = v_clock;
        SET v = v_clock;
    END IF;
    DO RELEASE_LOCK(v_name);
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
 * try_lock: the fence if acquired or re-entered, NULL if another holder has
 * the resource or another transaction is changing it.  Never waits.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.try_lock(
    p_resource LONGBLOB, p_holder LONGBLOB, p_lease_arg LONGBLOB) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_lease DOUBLE DEFAULT dlock._seconds('lease', p_lease_arg);
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_me VARCHAR(128) CHARACTER SET utf8mb4 DEFAULT dlock._me();
    DECLARE v_lease_us BIGINT;
    DECLARE v_now DATETIME(6);
    DECLARE v_exists INT DEFAULT 0;
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_dup INT DEFAULT 0;
    DECLARE v_mine INT;
    DECLARE v_fence BIGINT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = 1;
    CALL dlock._check('try_lock', TRUE, TRUE, p_resource, v_holder, p_lease, NULL);
    SET v_lease_us = IFNULL(ROUND(p_lease * 1000000), 30000000);
    SET v_now = dlock._now();
    SELECT COUNT(*) INTO v_exists FROM dlock.leases AS seen WHERE resource = p_resource;
    IF v_exists = 0 THEN
        INSERT INTO dlock.leases (resource, holder, owner, count, lease_us,
                                  acquired_at, renewed_at, expires_at)
        VALUES (p_resource, v_holder, v_me, 1, v_lease_us, v_now, v_now,
                v_now + INTERVAL v_lease_us MICROSECOND);
        IF v_dup = 0 THEN
            SET v_fence = dlock._fence();
            UPDATE dlock.leases SET fence = v_fence WHERE resource = p_resource;
            RETURN v_fence;
        END IF;
    END IF;
    -- The row exists: lock it unless another transaction has it, and only
    -- if it is free, expired or ours (READ COMMITTED then keeps no lock on
    -- a busy row; REPEATABLE READ keeps it to the end of the transaction).
    SELECT 1, holder = v_holder AND owner = v_me AND expires_at > v_now, fence
      INTO v_found, v_mine, v_fence
      FROM dlock.leases AS skipping
     WHERE resource = p_resource
       AND (holder IS NULL OR expires_at <= v_now OR (holder = v_holder AND owner = v_me))
       FOR UPDATE SKIP LOCKED;
    IF v_found = 0 THEN
        RETURN NULL;
    ELSEIF v_mine THEN
        UPDATE dlock.leases
           SET count = count + 1, renewed_at = v_now,
               expires_at = GREATEST(expires_at, v_now + INTERVAL v_lease_us MICROSECOND)
         WHERE resource = p_resource;
        RETURN v_fence;
    END IF;
    SET v_fence = dlock._fence();
    UPDATE dlock.leases
       SET holder = v_holder, owner = v_me, count = 1, fence = v_fence,
           lease_us = v_lease_us, acquired_at = v_now, renewed_at = v_now,
           expires_at = v_now + INTERVAL v_lease_us MICROSECOND, released_at = NULL
     WHERE resource = p_resource;
    RETURN v_fence;
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
    DECLARE v_fence BIGINT;
    DECLARE v_deadline DATETIME(6);
    DECLARE v_nap DOUBLE DEFAULT 0.005;
    DECLARE v_left DOUBLE;
    CALL dlock._check('lock', TRUE, TRUE, p_resource, v_holder, p_lease, p_wait);
    IF p_wait IS NOT NULL THEN
        SET v_deadline = SYSDATE(6) + INTERVAL ROUND(LEAST(p_wait, 31557600000) * 1000000) MICROSECOND;
    END IF;
    poll: LOOP
        SET v_fence = dlock.try_lock(p_resource, v_holder, p_lease);
        IF v_fence IS NOT NULL THEN
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
    SELECT v_fence AS fence;
END//

/*
 * unlock: the count left, 0 when released; NULL if this holder does not
 * hold the resource (expired, someone else's, another fence).  42501 if
 * the holder text is held by another user.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.unlock(
    p_resource LONGBLOB, p_holder LONGBLOB, p_fence_arg LONGBLOB) RETURNS INT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_fence BIGINT DEFAULT dlock._integer('fence', p_fence_arg);
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_exists INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_owner VARCHAR(128) CHARACTER SET utf8mb4;
    DECLARE v_count INT;
    DECLARE v_fence BIGINT;
    DECLARE v_exp DATETIME(6);
    DECLARE v_now DATETIME(6);
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    CALL dlock._check('unlock', TRUE, TRUE, p_resource, v_holder, NULL, NULL);
    -- A plain read first: nothing to lock when this holder plainly does not
    -- hold it (so a stale call never gets in a takeover's way).
    SELECT COUNT(*) INTO v_exists FROM dlock.leases AS seen
     WHERE resource = p_resource AND holder = v_holder AND expires_at > dlock._now();
    IF v_exists = 0 THEN
        RETURN NULL;
    END IF;
    SELECT holder, owner, count, fence, expires_at INTO v_h, v_owner, v_count, v_fence, v_exp
      FROM dlock.leases AS locked WHERE resource = p_resource FOR UPDATE;
    SET v_now = dlock._now();
    IF v_h IS NULL OR v_h <> v_holder OR v_exp <= v_now THEN
        RETURN NULL;
    ELSEIF v_owner <> dlock._me() THEN
        SIGNAL SQLSTATE '42501' SET MESSAGE_TEXT = 'permission denied: the holding belongs to another user';
    ELSEIF p_fence IS NOT NULL AND p_fence <> v_fence THEN
        RETURN NULL;
    ELSEIF v_count > 1 THEN
        UPDATE dlock.leases SET count = count - 1 WHERE resource = p_resource;
        RETURN v_count - 1;
    END IF;
    UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = v_now
     WHERE resource = p_resource;
    RETURN 0;
END//

/*
 * renew: the new expiry (UTC), now + lease (NULL: the lease it was taken
 * with); NULL if the lease was lost or the fence is not the current one.
 * An expired lease is never revived.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.renew(
    p_resource LONGBLOB, p_holder LONGBLOB, p_lease_arg LONGBLOB, p_fence_arg LONGBLOB) RETURNS DATETIME(6)
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_lease DOUBLE DEFAULT dlock._seconds('lease', p_lease_arg);
    DECLARE p_fence BIGINT DEFAULT dlock._integer('fence', p_fence_arg);
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_exists INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_owner VARCHAR(128) CHARACTER SET utf8mb4;
    DECLARE v_fence BIGINT;
    DECLARE v_lease_us BIGINT;
    DECLARE v_exp DATETIME(6);
    DECLARE v_now DATETIME(6);
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    CALL dlock._check('renew', TRUE, TRUE, p_resource, v_holder, p_lease, NULL);
    -- A plain read first: nothing to lock when this holder plainly does not
    -- hold it (so a stale call never gets in a takeover's way).
    SELECT COUNT(*) INTO v_exists FROM dlock.leases AS seen
     WHERE resource = p_resource AND holder = v_holder AND expires_at > dlock._now();
    IF v_exists = 0 THEN
        RETURN NULL;
    END IF;
    SELECT holder, owner, fence, lease_us, expires_at INTO v_h, v_owner, v_fence, v_lease_us, v_exp
      FROM dlock.leases AS locked WHERE resource = p_resource FOR UPDATE;
    SET v_now = dlock._now();
    IF v_h IS NULL OR v_h <> v_holder OR v_exp <= v_now THEN
        RETURN NULL;
    ELSEIF v_owner <> dlock._me() THEN
        SIGNAL SQLSTATE '42501' SET MESSAGE_TEXT = 'permission denied: the holding belongs to another user';
    ELSEIF p_fence IS NOT NULL AND p_fence <> v_fence THEN
        RETURN NULL;
    END IF;
    SET v_lease_us = IFNULL(ROUND(p_lease * 1000000), v_lease_us);
    SET v_exp = v_now + INTERVAL v_lease_us MICROSECOND;
    UPDATE dlock.leases SET lease_us = v_lease_us, renewed_at = v_now, expires_at = v_exp
     WHERE resource = p_resource;
    RETURN v_exp;
END//

-- unlock_all: releases every live holding of this holder and user.
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.unlock_all(p_holder LONGBLOB) RETURNS INT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_holder LONGBLOB DEFAULT IFNULL(p_holder, dlock.session_holder());
    DECLARE v_me VARCHAR(128) CHARACTER SET utf8mb4 DEFAULT dlock._me();
    DECLARE v_last VARBINARY(1000) DEFAULT '';
    DECLARE v_next VARBINARY(1000);
    DECLARE v_n INT DEFAULT 0;
    DECLARE v_now DATETIME(6);
    DECLARE v_one INT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    CALL dlock._check('unlock_all', TRUE, FALSE, NULL, v_holder, NULL, NULL);
    scan: LOOP
        SET v_next = NULL;
        SELECT resource INTO v_next FROM dlock.leases AS seen
         WHERE resource > v_last AND holder = v_holder AND owner = v_me
         ORDER BY resource LIMIT 1;
        IF v_next IS NULL THEN
            LEAVE scan;
        END IF;
        SET v_last = v_next;
        SELECT 1 INTO v_one FROM dlock.leases AS locked WHERE resource = v_next FOR UPDATE;
        SET v_now = dlock._now();
        UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = v_now
         WHERE resource = v_next AND holder = v_holder AND owner = v_me AND expires_at > v_now;
        SET v_n = v_n + ROW_COUNT();
    END LOOP;
    RETURN v_n;
END//

/*
 * _reap_one: frees the resource if its lease has expired (1), deletes it if
 * free for an hour (0).  Skips a row another transaction holds.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._reap_one(p_resource VARBINARY(1000)) RETURNS INT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_exp DATETIME(6);
    DECLARE v_rel DATETIME(6);
    DECLARE v_now DATETIME(6);
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    SELECT 1, holder, expires_at, released_at INTO v_found, v_h, v_exp, v_rel
      FROM dlock.leases AS skipping WHERE resource = p_resource FOR UPDATE SKIP LOCKED;
    SET v_now = dlock._now();
    IF v_found = 0 THEN
        RETURN 0;
    ELSEIF v_h IS NOT NULL AND v_exp <= v_now THEN
        UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = v_now
         WHERE resource = p_resource;
        RETURN 1;
    ELSEIF v_h IS NULL AND v_rel < v_now - INTERVAL 1 HOUR THEN
        DELETE FROM dlock.leases WHERE resource = p_resource;
    END IF;
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
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    SET p_reaped = 0;
    scan: LOOP
        SET v_next = NULL;
        SET v_now = dlock._now();
        SELECT resource INTO v_next FROM dlock.leases
         WHERE resource > v_last
           AND ((holder IS NOT NULL AND expires_at <= v_now)
                OR (holder IS NULL AND released_at < v_now - INTERVAL 1 HOUR))
         ORDER BY resource LIMIT 1;
        IF v_next IS NULL THEN
            LEAVE scan;
        END IF;
        SET v_last = v_next;
        SET p_reaped = p_reaped + dlock._reap_one(v_next);
    END LOOP;
END//

-- reap: frees every expired lease now; one row, `reaped`.
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock.reap()
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_n INT;
    CALL dlock._check('reap', TRUE, FALSE, NULL, NULL, NULL, NULL);
    CALL dlock._reap(v_n);
    SELECT v_n AS reaped;
END//

-- check_fence: is that fence the current, unexpired holding?
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.check_fence(
    p_resource LONGBLOB, p_fence_arg LONGBLOB) RETURNS BOOLEAN
    NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_fence BIGINT DEFAULT dlock._integer('fence', p_fence_arg);
    DECLARE v_n INT;
    CALL dlock._check('check_fence', FALSE, TRUE, p_resource, NULL, NULL, NULL);
    IF p_fence IS NULL THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'fence must not be null';
    END IF;
    SELECT COUNT(*) INTO v_n FROM dlock.leases AS seen
     WHERE resource = p_resource AND fence = p_fence AND holder IS NOT NULL
       AND expires_at > dlock._now();
    RETURN v_n > 0;
END//

/*
 * assert_fence: 55P03 unless check_fence holds; then a shared lock on the
 * row pins the holding (no takeover, expiry, break or release by anyone,
 * and no renewal either) until the caller's transaction ends.  Only the
 * user who holds it may pin it (42501).
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.assert_fence(
    p_resource LONGBLOB, p_fence_arg LONGBLOB) RETURNS BOOLEAN
    NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_fence BIGINT DEFAULT dlock._integer('fence', p_fence_arg);
    DECLARE v_exists INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE v_owner VARCHAR(128) CHARACTER SET utf8mb4;
    DECLARE v_fence BIGINT;
    DECLARE v_exp DATETIME(6);
    DECLARE v_msg VARCHAR(1200);
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    CALL dlock._check('assert_fence', FALSE, TRUE, p_resource, NULL, NULL, NULL);
    IF p_fence IS NULL THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'fence must not be null';
    END IF;
    SELECT COUNT(*) INTO v_exists FROM dlock.leases AS seen WHERE resource = p_resource;
    IF v_exists > 0 THEN
        SELECT holder, owner, fence, expires_at INTO v_h, v_owner, v_fence, v_exp
          FROM dlock.leases AS locked WHERE resource = p_resource LOCK IN SHARE MODE;
    END IF;
    IF v_h IS NULL OR v_fence <> p_fence OR v_exp <= dlock._now() THEN
        SET v_msg = CONCAT('fence ', p_fence, ' is not the current holding of resource ',
                           dlock._show(p_resource));
        SIGNAL SQLSTATE '55P03' SET MESSAGE_TEXT = v_msg;
    ELSEIF v_owner <> dlock._me() THEN
        SIGNAL SQLSTATE '42501' SET MESSAGE_TEXT = 'permission denied: the holding belongs to another user';
    END IF;
    RETURN TRUE;
END//

-- break_lock: force release, for administrators (EXECUTE granted by hand).
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.break_lock(p_resource LONGBLOB) RETURNS BOOLEAN
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_exists INT DEFAULT 0;
    DECLARE v_h VARBINARY(255);
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    CALL dlock._check('break_lock', TRUE, TRUE, p_resource, NULL, NULL, NULL);
    SELECT COUNT(*) INTO v_exists FROM dlock.leases AS seen
     WHERE resource = p_resource AND holder IS NOT NULL;
    IF v_exists = 0 THEN
        RETURN FALSE;
    END IF;
    SELECT holder INTO v_h FROM dlock.leases AS locked WHERE resource = p_resource FOR UPDATE;
    IF v_h IS NULL THEN
        RETURN FALSE;
    END IF;
    UPDATE dlock.leases SET holder = NULL, owner = NULL, count = 0, released_at = dlock._now()
     WHERE resource = p_resource;
    RETURN TRUE;
END//

/*
 * _xact_try: one attempt at a transaction-scoped lock: the fence, 0 when
 * another transaction holds the row, -1 when a live lease holds it.
 */
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock._xact_try(p_resource LONGBLOB) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_exists INT;
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_dup INT DEFAULT 0;
    DECLARE v_leased INT;
    DECLARE v_now DATETIME(6);
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;  -- no row: the variables stay as they are
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = 1;
    SELECT COUNT(*) INTO v_exists FROM dlock.leases AS seen WHERE resource = p_resource;
    IF v_exists = 0 THEN
        -- released_at set: reaping deletes the row an hour later
        INSERT INTO dlock.leases (resource, released_at) VALUES (p_resource, dlock._now());
        IF v_dup = 0 THEN
            RETURN dlock._fence();
        END IF;
    END IF;
    SET v_now = dlock._now();
    SELECT 1, holder IS NOT NULL AND expires_at > v_now INTO v_found, v_leased
      FROM dlock.leases AS skipping WHERE resource = p_resource FOR UPDATE SKIP LOCKED;
    IF v_found = 0 THEN
        RETURN 0;
    ELSEIF v_leased THEN
        RETURN -1;
    END IF;
    RETURN dlock._fence();
END//

/*
 * xact_lock: a lock held until the caller's transaction commits or rolls
 * back (the row's record lock, as SELECT ... FOR UPDATE); one row, `fence`,
 * NULL when p_wait (seconds; NULL: no limit) runs out.  It polls other
 * transactions' locks like lock(), holding nothing while it sleeps.  A
 * procedure: MariaDB honours SKIP LOCKED only at its first execution within
 * one statement, so a function could not retry.  A resource under a live
 * lease makes it return NULL at once, because under REPEATABLE READ the
 * row lock it took to see the lease cannot be let go before the
 * transaction ends.
 */
CREATE DEFINER = 'dlock'@'localhost' PROCEDURE dlock.xact_lock(IN p_resource LONGBLOB, IN p_wait_arg LONGBLOB)
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE p_wait DOUBLE DEFAULT dlock._seconds('wait', p_wait_arg);
    DECLARE v_fence BIGINT;
    DECLARE v_deadline DATETIME(6);
    DECLARE v_left DOUBLE;
    DECLARE v_nap DOUBLE DEFAULT 0.005;
    CALL dlock._check('xact_lock', TRUE, TRUE, p_resource, NULL, NULL, p_wait);
    IF p_wait IS NOT NULL THEN
        SET v_deadline = SYSDATE(6) + INTERVAL ROUND(LEAST(p_wait, 31557600000) * 1000000) MICROSECOND;
    END IF;
    poll: LOOP
        SET v_fence = dlock._xact_try(p_resource);
        IF v_fence <> 0 THEN
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
    SELECT IF(v_fence > 0, v_fence, NULL) AS fence;
END//

-- try_xact_lock: one attempt; the fence or NULL at once.
CREATE DEFINER = 'dlock'@'localhost' FUNCTION dlock.try_xact_lock(p_resource LONGBLOB) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE v_fence BIGINT;
    CALL dlock._check('try_xact_lock', TRUE, TRUE, p_resource, NULL, NULL, NULL);
    SET v_fence = dlock._xact_try(p_resource);
    RETURN IF(v_fence > 0, v_fence, NULL);
END//

DELIMITER ;

/*
 * Current holdings; expired ones stay listed (expired = 1) until reaped.
 * TEMPTABLE: each query reads a copy, so a user's SELECT ... FOR UPDATE of
 * the view cannot lock the table's rows (MERGE would let it).
 */
CREATE ALGORITHM = TEMPTABLE DEFINER = 'dlock'@'localhost' SQL SECURITY DEFINER VIEW dlock.locks AS
    SELECT CONVERT(l.resource USING utf8mb4) COLLATE utf8mb4_bin AS resource,
           CONVERT(l.holder USING utf8mb4) COLLATE utf8mb4_bin AS holder,
           l.count, l.fence, l.lease_us / 1000000 AS lease,
           l.acquired_at, l.renewed_at, l.expires_at, l.owner,
           l.expires_at <= UTC_TIMESTAMP(6) AS expired
      FROM dlock.leases l
     WHERE l.holder IS NOT NULL;

/*
 * Lazy expiry plus this event (needs event_scheduler = ON).  On a read-only
 * server (a replica) it does nothing: its definer cannot write there, and
 * every failed run would write lines to the error log, every second.
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
