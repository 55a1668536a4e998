-- Changes of the end-to-end test, after the initial load of e2e_existing.sql's rows:
-- inserts, updates (one changing the primary key),
-- deletes, REPLICA IDENTITY FULL updates/deletes of duplicate rows, a TRUNCATE followed
-- by new rows, column types widened, columns added and renamed, a rolled-back transaction and one transaction over
-- two tables.
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

-- Type changes (issue 32): widenings, a key column's among them; the changes after each
-- are encoded with the new layout, those before it with the old one.
ALTER TABLE orders ALTER COLUMN total TYPE numeric(14, 2), ALTER COLUMN id TYPE bigint;
UPDATE orders SET total = 123456789012.34 WHERE id = 101;
INSERT INTO orders VALUES (3000000000, 2, 0.01, 'a bigint key');
ALTER TABLE events ALTER COLUMN n TYPE bigint;
INSERT INTO events VALUES ('2024-05-01 00:00:00+00', 'wide', 3000000000);
ALTER TABLE customers ALTER COLUMN email TYPE varchar(200);
UPDATE customers SET email = repeat('x', 150) WHERE id = 2;

-- Columns added (issue 32): with a non-volatile DEFAULT, which PostgreSQL gives the rows
-- stored before without writing them (no change carries it), and without one; then
-- changes of rows stored before, in the keyless table too (found by their whole image).
ALTER TABLE customers ADD COLUMN tier text NOT NULL DEFAULT 'basic';
UPDATE customers SET tier = 'gold' WHERE id = 3;
ALTER TABLE events ADD COLUMN origin text DEFAULT 'app', ADD COLUMN weight integer;
UPDATE events SET weight = 5 WHERE kind = 'changed';
DELETE FROM events WHERE kind = 'k2';

-- Columns renamed (issue 32): the stored rows keep their values under the new name (the
-- keyless table's rows are found by them); then the old name is used again by a new column,
-- which the rows stored before read as its DEFAULT, not as the renamed column's values.
ALTER TABLE orders RENAME COLUMN note TO remark;
UPDATE orders SET remark = 'renamed' WHERE id = 102;
ALTER TABLE orders ADD COLUMN note text DEFAULT 'new note';
UPDATE orders SET note = 'set' WHERE id = 103;
ALTER TABLE events RENAME COLUMN origin TO via;
UPDATE events SET weight = 6 WHERE kind = 'changed';

-- Key moves of rows with an unchanged TOASTed body: loaded rows, and a streamed one.
UPDATE docs SET id = 10 WHERE id = 1;
UPDATE docs SET id = 20, score = 2.5 WHERE id = 2;
INSERT INTO docs VALUES (5, repeat('toast five ', 800), '0001-01-02', '2999-01-01 12:00:00.5+00', 'Infinity', 'NaN');
UPDATE docs SET id = 6 WHERE id = 5;
BEGIN;
UPDATE docs SET id = 30 WHERE id = 3;
UPDATE docs SET id = 31, amount = 0 WHERE id = 30;
COMMIT;
