-- Extra traffic recorded by bench/fuzz_record.py after the scenario's changes (schema
-- walcast_it is renamed by the recorder). The recorder reads with logical_decoding_work_mem
-- = 64kB, so the 1,500-row transactions below are streamed in chunks (v2+).
SET search_path = walcast_it;

CREATE TABLE dom_arr (id integer PRIMARY KEY, a positive_int[], t short_text[]);
CREATE TABLE wide (id integer PRIMARY KEY, n numeric, note text);
CREATE TABLE huge_numeric (id integer PRIMARY KEY, n numeric);

INSERT INTO dom_arr VALUES (1, '{1,2,3}', '{a,"b c"}'), (2, '{}', NULL), (3, NULL, '{NULL}');
INSERT INTO huge_numeric VALUES (1, repeat('9', 131072)::numeric);
INSERT INTO wide VALUES (1, 1.5, 'ünïcödé ☕ 日本語'),
                        (2, ('-' || repeat('1234', 100) || '.' || repeat('5', 40))::numeric, NULL);
UPDATE wide SET note = 'changed ✓' WHERE id = 1;
DELETE FROM wide WHERE id = 2;

SELECT FROM pg_logical_emit_message(false, 'walcast.test', 'not transactional');
BEGIN;
INSERT INTO accounts VALUES (10, 'carol', 1.00);
SELECT FROM pg_logical_emit_message(true, 'walcast.test', '\x00ff62696e617279'::bytea);
COMMIT;

-- Streamed and committed, with a subtransaction that aborts in the middle.
BEGIN;
INSERT INTO bulk SELECT g, repeat('s', 40), -1 FROM generate_series(500001, 501500) AS g;
SAVEPOINT sp;
INSERT INTO bulk SELECT g, 'aborted sub', -2 FROM generate_series(510001, 511500) AS g;
ROLLBACK TO SAVEPOINT sp;
UPDATE bulk SET grp = -3 WHERE id BETWEEN 500001 AND 500100;
DELETE FROM bulk WHERE id BETWEEN 500101 AND 500150;
TRUNCATE dom_arr;
COMMIT;

-- Streamed and aborted: never emitted.
BEGIN;
INSERT INTO bulk SELECT g, repeat('x', 40), -9 FROM generate_series(600001, 601500) AS g;
ROLLBACK;

-- Two-phase: one prepared transaction committed, one rolled back.
BEGIN;
INSERT INTO accounts VALUES (11, 'dave', 2.00);
PREPARE TRANSACTION 'walcast_fuzz_commit';
COMMIT PREPARED 'walcast_fuzz_commit';
BEGIN;
INSERT INTO accounts VALUES (12, 'eve', 3.00);
PREPARE TRANSACTION 'walcast_fuzz_rollback';
ROLLBACK PREPARED 'walcast_fuzz_rollback';

INSERT INTO accounts VALUES (7, 'the end', 0);
