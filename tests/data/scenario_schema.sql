-- The capture scenario's tables (schema walcast_it). Shared by the capture, encoder and
-- pipeline integration tests. Run before the slots are created.
DROP SCHEMA IF EXISTS walcast_it CASCADE;
CREATE SCHEMA walcast_it;
SET search_path = walcast_it;

CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'it''s "fine"');
CREATE DOMAIN positive_int AS integer CHECK (VALUE > 0);
CREATE DOMAIN short_text AS varchar(10);

-- Every value type users meet, REPLICA IDENTITY DEFAULT (primary key).
CREATE TABLE all_types (
    id          bigint PRIMARY KEY,
    c_int2      smallint,
    c_int4      integer,
    c_int8      bigint,
    c_numeric   numeric,
    c_num38     numeric(38, 10),
    c_float4    real,
    c_float8    double precision,
    c_bool      boolean,
    c_text      text,
    c_varchar   varchar(20),
    c_char      char(5),
    c_bytea     bytea,
    c_date      date,
    c_time      time,
    c_timetz    timetz,
    c_ts        timestamp,
    c_tstz      timestamptz,
    c_interval  interval,
    c_uuid      uuid,
    c_json      json,
    c_jsonb     jsonb,
    c_inet      inet,
    c_cidr      cidr,
    c_macaddr   macaddr,
    c_int_arr   integer[],
    c_text_arr  text[],
    c_num_arr   numeric[],
    c_ts_arr    timestamptz[],
    c_2d_arr    integer[][],
    c_mood      mood,
    c_mood_arr  mood[],
    c_posint    positive_int,
    c_short     short_text,
    c_point     point,
    c_money     money,
    c_tsvector  tsvector,
    c_bit       bit varying(16)
);

-- REPLICA IDENTITY FULL, no primary key.
CREATE TABLE events_full (
    at      timestamptz NOT NULL,
    kind    text,
    payload jsonb,
    n       integer
);
ALTER TABLE events_full REPLICA IDENTITY FULL;

-- A TOASTed column stored out of line (EXTERNAL keeps it uncompressed).
CREATE TABLE docs (
    id    integer PRIMARY KEY,
    title text,
    body  text
);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;

CREATE TABLE accounts (
    id      integer PRIMARY KEY,
    owner   text NOT NULL,
    balance numeric(12, 2) NOT NULL
);

CREATE TABLE ledger (
    id         bigserial PRIMARY KEY,
    account_id integer NOT NULL,
    amount     numeric(12, 2) NOT NULL,
    note       text
);

CREATE TABLE bulk (
    id   integer PRIMARY KEY,
    val  text,
    grp  integer
);
