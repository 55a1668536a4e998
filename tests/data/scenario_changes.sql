-- The capture scenario's changes, run after the slots exist. Every statement commits on
-- its own unless inside an explicit transaction. Covers: all types, insert/update/
-- delete/truncate, REPLICA IDENTITY DEFAULT and FULL, a primary-key change, an
-- unchanged out-of-line TOAST value, a rolled-back transaction, a savepoint rollback,
-- one transaction over two tables and a 100k-row transaction. The streamed transactions
-- are in scenario_stream.sql (they need a low logical_decoding_work_mem).
SET search_path = walcast_it;

INSERT INTO all_types VALUES (
    1, 32767, 2147483647, 9223372036854775807, 12345678901234567890.123456789,
    1234567890123456789012345678.0123456789, 3.4028235e38, 1.7976931348623157e308, true,
    E'tab\there, newline\nhere, quote '' "dq" back\\slash, | pipe ; semi , comma ü 日本',
    'varchar value', 'ab', '\x00ff00deadbeef'::bytea, '2024-02-29', '23:59:59.999999',
    '13:45:01.5+05:30', '2024-02-29 13:45:01.123456', '2024-02-29 13:45:01.123456+02',
    '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '{"b": 2, "a": [1, "x"], "a": 3}', '{"b": 2, "a": [1, "x", null, true]}', '192.168.0.1/24',
    '10.1.0.0/16', '08:00:2b:01:02:03', '{1,NULL,-3}', '{"a b","c,d","e\"f",NULL,"NULL",""}',
    '{1.50,NaN,-0.001}', '{"2024-01-01 00:00:00+00","infinity"}', '{{1,2},{3,4}}', 'happy',
    '{sad,"it''s \"fine\""}', 42, 'short', '(1.5,-2)', 12.34, 'a fat cat', B'10110'
);
INSERT INTO all_types VALUES (
    2, -32768, -2147483648, -9223372036854775808, 'NaN', -0.0000000001, 'NaN', '-Infinity',
    false, '', '', '     ', ''::bytea, '0044-03-15 BC', '00:00:00', '00:00:00-03:30',
    '4713-01-01 00:00:00 BC', '-infinity', '-1 days +02:03:00', '00000000-0000-0000-0000-000000000000',
    '[]', '{}', '::ffff:1.2.3.4', '2001:db8::/32', 'ff:ff:ff:ff:ff:ff', '{}', '{}', '{}', '{}',
    '{}', 'sad', '{}', 1, '', '(0,0)', -0.01, '', B''
);
INSERT INTO all_types VALUES (
    3, 0, 0, 0, 'Infinity', 0, 'Infinity', 1e-300, NULL, NULL, NULL, NULL, NULL, 'infinity',
    '24:00:00', '24:00:00+00', 'infinity', '294276-12-31 23:59:59.999999+00', '-178000000 years',
    NULL, 'null', '"str"', '2001:db8::1', '::/0', NULL, '{{NULL}}', '{"\\","{}"}',
    '{-Infinity}', NULL, '[0:1]={7,8}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
);
INSERT INTO all_types (id, c_float4, c_float8, c_numeric, c_interval, c_date, c_tstz)
VALUES (4, 0.1, 1e15, 0.000001, '00:00:00.000001', '2000-01-01', '2000-01-01 00:00:00+00'),
       (5, '-0', '-0', 100, '1 mon -1 days', '1999-12-31', '1970-01-01 00:00:00.5+00'),
       (6, 1e-5, 123456789012345680000, -1e-20, '-00:00:01', '0001-01-01', '0001-01-01 00:00:00+00');

-- Update without key change (DEFAULT: no old image), then with a key change ('K').
UPDATE all_types SET c_text = 'changed', c_int4 = NULL WHERE id = 1;
UPDATE all_types SET id = 100 WHERE id = 2;
DELETE FROM all_types WHERE id = 3;

-- REPLICA IDENTITY FULL: old rows carry every column.
INSERT INTO events_full VALUES ('2024-01-01 10:00:00+00', 'login', '{"u": 1}', 1),
                               ('2024-01-01 10:05:00+00', NULL, NULL, 2);
UPDATE events_full SET kind = 'logout', n = n + 10 WHERE n = 1;
DELETE FROM events_full WHERE n = 2;

-- Out-of-line TOAST: body is ~40 kB, stored externally; updating title leaves it unchanged.
INSERT INTO docs VALUES (1, 'first', repeat('lorem ipsum dolor sit amet ', 1500));
UPDATE docs SET title = 'first, renamed' WHERE id = 1;
UPDATE docs SET body = 'short now' WHERE id = 1;
DELETE FROM docs WHERE id = 1;

-- A rolled-back transaction never appears.
BEGIN;
INSERT INTO accounts VALUES (99, 'ghost', 0);
ROLLBACK;

-- One transaction over two tables, with a savepoint rolled back in the middle.
BEGIN;
INSERT INTO accounts VALUES (1, 'alice', 100.00), (2, 'bob', 50.00);
SAVEPOINT s1;
INSERT INTO ledger (account_id, amount, note) VALUES (1, 999.99, 'rolled back');
ROLLBACK TO SAVEPOINT s1;
UPDATE accounts SET balance = balance - 25.50 WHERE id = 1;
UPDATE accounts SET balance = balance + 25.50 WHERE id = 2;
INSERT INTO ledger (account_id, amount, note) VALUES (1, -25.50, 'to bob'), (2, 25.50, 'from alice');
COMMIT;

-- TRUNCATE of two tables in one statement, then of one.
INSERT INTO events_full VALUES ('2024-01-02 00:00:00+00', 'x', NULL, 3);
TRUNCATE events_full, ledger;
TRUNCATE accounts;

-- A 100k-row transaction.
INSERT INTO bulk SELECT g, 'row ' || g, g % 7 FROM generate_series(1, 100000) AS g;
