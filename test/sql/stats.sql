-- Promises: none
-- dlock.stats() counts what commits (issue 33): acquisitions, re-entries,
-- releases and renewals of a statement that fails, of a transaction rolled
-- back or of a subtransaction rolled back count nothing.
SELECT acquired AS a0, reentered AS e0, released AS r0, renewed AS n0 FROM dlock.stats() \gset
-- A statement that raises after a loop of try_lock and unlock.
DO $$
BEGIN
    PERFORM dlock.try_lock('st/' || i, 'h') FROM generate_series(1, 100) i;
    PERFORM dlock.try_lock('st/1', 'h');
    PERFORM dlock.renew('st/2', 'h');
    PERFORM dlock.unlock('st/' || i, 'h') FROM generate_series(1, 50) i;
    RAISE EXCEPTION 'the statement fails';
END $$;
-- A transaction rolled back.
BEGIN;
SELECT count(dlock.try_lock('st/' || i, 'h')) AS taken FROM generate_series(1, 10) i;
ROLLBACK;
SELECT acquired - :a0 AS acquired, reentered - :e0 AS reentered,
       released - :r0 AS released, renewed - :n0 AS renewed FROM dlock.stats();
-- What commits counts; a subtransaction rolled back inside it does not.
BEGIN;
SELECT count(dlock.try_lock('st/' || i, 'h')) AS taken FROM generate_series(1, 3) i;
SAVEPOINT s;
SELECT count(dlock.try_lock('st/' || i, 'h')) AS taken FROM generate_series(4, 10) i;
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
SELECT dlock.try_lock('st/1', 'h') IS NOT NULL AS reentered;
RELEASE SAVEPOINT t;
SELECT dlock.renew('st/2', 'h') IS NOT NULL AS renewed;
COMMIT;
SELECT dlock.unlock_all('h') AS released;
SELECT acquired - :a0 AS acquired, reentered - :e0 AS reentered,
       released - :r0 AS released, renewed - :n0 AS renewed FROM dlock.stats();
-- Committed subtransactions' counts join their parent's (one entry a
-- statistic): a loop of exception blocks counts each, and a savepoint
-- rolled back drops what its committed children counted.
SELECT acquired AS a0, reentered AS e0, released AS r0 FROM dlock.stats() \gset
DO $$
BEGIN
    FOR i IN 1 .. 200 LOOP
        BEGIN
            PERFORM dlock.try_lock('sx/' || (i % 20), 'h');
        EXCEPTION WHEN others THEN NULL;
        END;
    END LOOP;
END $$;
BEGIN;
SAVEPOINT a;
SELECT dlock.try_lock('sx/a', 'h') IS NOT NULL AS taken;
SAVEPOINT b;
SELECT dlock.try_lock('sx/b', 'h') IS NOT NULL AS taken;
SELECT dlock.try_lock('sx/a', 'h') IS NOT NULL AS reentered;
RELEASE SAVEPOINT b;
ROLLBACK TO SAVEPOINT a;
SAVEPOINT c;
SELECT dlock.try_lock('sx/c', 'h') IS NOT NULL AS taken;
SAVEPOINT d;
SELECT dlock.try_lock('sx/c', 'h') IS NOT NULL AS reentered;
RELEASE SAVEPOINT d;
RELEASE SAVEPOINT c;
COMMIT;
SELECT dlock.unlock_all('h') AS released;
SELECT acquired - :a0 AS acquired, reentered - :e0 AS reentered,
       released - :r0 AS released FROM dlock.stats();
