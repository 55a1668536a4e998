-- Tables of the PostgreSQL → walcast run → Kafka → Spark end-to-end test.
DROP SCHEMA IF EXISTS walcast_e2e CASCADE;
CREATE SCHEMA walcast_e2e;
SET search_path = walcast_e2e;

CREATE TABLE customers (
    id       bigint PRIMARY KEY,
    name     text NOT NULL,
    email    varchar(100),
    balance  numeric(12, 2),
    vip      boolean,
    born     date,
    updated  timestamptz,
    tags     jsonb,
    photo    bytea,
    score    double precision
);

-- No primary key: REPLICA IDENTITY FULL, duplicates allowed.
CREATE TABLE events (
    at   timestamptz NOT NULL,
    kind text,
    n    integer
);
ALTER TABLE events REPLICA IDENTITY FULL;

CREATE TABLE orders (
    id          integer PRIMARY KEY,
    customer_id bigint NOT NULL,
    total       numeric(10, 2),
    note        text
);

-- Extreme values, and a large column kept out of line (TOAST): an UPDATE that changes
-- the key sends no value for it ("unchanged TOAST"), which the new key's row must keep.
CREATE TABLE docs (
    id     bigint PRIMARY KEY,
    body   text,
    born   date,
    at     timestamptz,
    score  double precision,
    amount numeric
);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
