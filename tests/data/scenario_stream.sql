-- Streamed transactions: with logical_decoding_work_mem = 64kB on the walsender these
-- exceed the limit and are sent in chunks before they commit (protocol v2+, streaming on).
SET search_path = walcast_it;

-- Committed streamed transaction, with a subtransaction that aborts mid-stream.
BEGIN;
INSERT INTO bulk SELECT g, repeat('s', 50), -1 FROM generate_series(200001, 203000) AS g;
SAVEPOINT sp;
INSERT INTO bulk SELECT g, 'aborted sub', -2 FROM generate_series(210001, 213000) AS g;
ROLLBACK TO SAVEPOINT sp;
UPDATE bulk SET grp = -3 WHERE id BETWEEN 200001 AND 200500;
DELETE FROM bulk WHERE id BETWEEN 200501 AND 200600;
COMMIT;

-- Aborted streamed transaction: must never appear.
BEGIN;
INSERT INTO bulk SELECT g, repeat('x', 50), -9 FROM generate_series(300001, 304000) AS g;
ROLLBACK;

-- A last marker row, so a reader knows the scenario is complete.
INSERT INTO accounts VALUES (7, 'the end', 0);
