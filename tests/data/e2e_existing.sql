-- Rows the end-to-end test's tables hold before walcast starts: its initial load
-- (walcast run --create-slot, --snapshot initial by default) must bring them.
SET search_path = walcast_e2e;

INSERT INTO customers
SELECT g, 'customer ' || g, 'c' || g || '@example.com', (g * 13.37)::numeric(12, 2), g % 3 = 0,
       DATE '1970-01-01' + g * 97, TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * INTERVAL '1 hour 1.5 seconds',
       jsonb_build_object('n', g, 'tags', jsonb_build_array('a', g)), decode(lpad(to_hex(g), 6, '0'), 'hex'),
       g / 7.0
FROM generate_series(1, 60) AS g;
INSERT INTO customers VALUES (61, 'quote '' "dq" back\slash, comma; pipe|', NULL, NULL, NULL, NULL, NULL, NULL, '\x00', NULL),
                             (62, E'new\nline\ttab', '', -0.01, false, '2000-02-29', '2000-02-29 23:59:59.999999+00', '[]', '\x', 1e-300);

INSERT INTO events SELECT TIMESTAMPTZ '2024-02-01 00:00:00+00' + (g % 5) * INTERVAL '1 minute', 'k' || (g % 4), g % 3
FROM generate_series(1, 30) AS g;

INSERT INTO orders SELECT g, (g % 60) + 1, (g * 2.5)::numeric(10, 2), 'order ' || g FROM generate_series(1, 40) AS g;

INSERT INTO docs VALUES
    (1, repeat('toast one ', 600), '0001-01-01', '0001-01-01 00:00:00+00', 'NaN', 'NaN'),
    (2, repeat('toast two ', 700), '2999-12-31', '2999-12-31 23:59:59.999999+00', 'Infinity', 1e-20),
    (3, repeat('toast three ', 500), '1999-12-31', '1970-01-01 00:00:00+00', '-Infinity', -123456789012345678901234567890.123456789),
    (4, NULL, NULL, NULL, NULL, NULL);
