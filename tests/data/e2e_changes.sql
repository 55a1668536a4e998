-- Changes of the end-to-end test, after the initial load of e2e_existing.sql's rows:
-- inserts, updates (one changing the primary key),
-- deletes, REPLICA IDENTITY FULL updates/deletes of duplicate rows, a TRUNCATE followed
-- by new rows, a rolled-back transaction and one transaction over two tables.
SET search_path = walcast_e2e;

UPDATE customers SET balance = balance + 100, updated = updated + INTERVAL '1 day' WHERE id % 5 = 0;
UPDATE customers SET email = NULL WHERE id = 7;
UPDATE customers SET id = 500 WHERE id = 8;
DELETE FROM customers WHERE id IN (9, 10, 11);

UPDATE events SET kind = 'changed' WHERE n = 1;
DELETE FROM events WHERE kind = 'k0' AND n = 2;

BEGIN;
INSERT INTO customers VALUES (999, 'ghost', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
ROLLBACK;

BEGIN;
UPDATE customers SET balance = balance - 10 WHERE id = 1;
INSERT INTO orders VALUES (41, 1, 10.00, 'paid with balance');
COMMIT;

TRUNCATE orders;
INSERT INTO orders SELECT g, 2, 1.25 * g, NULL FROM generate_series(100, 104) AS g;
UPDATE orders SET note = 'after truncate' WHERE id = 100;

-- Key moves of rows with an unchanged TOASTed body: loaded rows, and a streamed one.
UPDATE docs SET id = 10 WHERE id = 1;
UPDATE docs SET id = 20, score = 2.5 WHERE id = 2;
INSERT INTO docs VALUES (5, repeat('toast five ', 800), '0001-01-02', '2999-01-01 12:00:00.5+00', 'Infinity', 'NaN');
UPDATE docs SET id = 6 WHERE id = 5;
BEGIN;
UPDATE docs SET id = 30 WHERE id = 3;
UPDATE docs SET id = 31, amount = 0 WHERE id = 30;
COMMIT;
