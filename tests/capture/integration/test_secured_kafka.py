"""Kafka as companies run it: SASL, TLS and ACLs against a real secured broker (issue 34).

``scripts/local-services start kafka-secure`` (once per module) runs a broker with
SASL_PLAINTEXT and SASL_SSL (SCRAM-SHA-512), SSL with client certificates, a TLS listener
whose certificate names another host, and the StandardAuthorizer with nothing allowed. The
fixture grants the README's ``kafka-acls.sh`` block, parsed from README.md as written, and
nothing else: to ``User:walcast`` all of it; to ``User:reader`` only the Spark jobs' command;
to ``User:no-txn`` all but the transactional ids; to ``User:no-create`` all but CREATE.
Every command runs through the CLI.

* Each listener: ``produce-test-stream --kafka``, ``walcast run`` (at-least-once and
  ``--exactly-once``), ``walcast consume`` reading back what they wrote; no output line of
  any of them holds a password (``--log-level debug``).
* Least privilege: ``walcast spark normalize`` as ``User:reader`` through SASL_SSL (Spark's
  Kafka source and the layout reader), ``walcast spark materialize`` through mTLS.
* Each wrong setting: one line, exit 6, within seconds, no password, no traceback, no raw
  librdkafka line. The lines walcast printed (addresses and paths vary):

====================  ===========================================================================
wrong password        Kafka at 127.0.0.1:P refused the SASL login of kafka.sasl_username 'walcast'
                      (SCRAM-SHA-512): the password is wrong or the user does not exist (the broker
                      does not say which)
unknown user          the same, naming kafka.sasl_username 'ghost'
mechanism             kafka.sasl_mechanism is 'SCRAM-SHA-256' but the broker at 127.0.0.1:P
                      offers only SCRAM-SHA-512
TLS at plaintext      kafka.security_protocol is 'SASL_SSL' but the broker at 127.0.0.1:P answers
                      in plaintext (librdkafka: SSL handshake failed: ...)
plaintext at TLS      kafka.security_protocol is 'SASL_PLAINTEXT' but the broker at 127.0.0.1:P
                      closes every plaintext connection before answering, as a TLS listener does
untrusted CA          the certificate of the broker at 127.0.0.1:P is not signed by a CA in
                      kafka.ssl_ca_location (.../other-ca.pem)
other host            the certificate of the broker at 127.0.0.1:P is for kafka.example.invalid,
                      not for 127.0.0.1 (signed by a CA in kafka.ssl_ca_location (...), but issued
                      for another host)
expired client cert   the broker at 127.0.0.1:P refused walcast's client certificate
                      kafka.ssl_certificate_location (.../expired.crt): it expired on <date>
no client cert        the broker at 127.0.0.1:P asks for a client certificate (mTLS) and walcast
                      has none (TLS: ssl/tls alert bad certificate)
missing WRITE         Kafka at 127.0.0.1:P denies User:nobody WRITE on Topic 'walcast.' (prefixed)
                      (an idempotent producer needs WRITE on a topic, or IDEMPOTENT_WRITE on the
                      cluster): a missing ACL
missing CREATE        Kafka at 127.0.0.1:P denies User:no-create CREATE on Topic
                      'walcast.json.public.<table>' (it does not exist, and walcast makes a topic
                      with its first write): a missing ACL
missing txn id        Kafka at 127.0.0.1:P denies User:no-txn WRITE and DESCRIBE on TransactionalId
                      'walcast-<system id>-walcast-<slot>': a missing ACL
====================  ===========================================================================

Each hint names what to do (the setting, or the ``kafka-acls.sh`` line granting the ACL).
"""

from __future__ import annotations

import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from tests.support import scenario as sc

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
SERVICES = REPO / "scripts" / "local-services"
MARK = "Wr0ngPw"
"""Part of every wrong password tried: never printed."""


# -- the broker and its ACLs -----------------------------------------------------------------


def readme_acl_commands() -> list[list[str]]:
    """The ``kafka-acls.sh`` commands of the README's ACL block, each as its words."""
    text = (REPO / "README.md").read_text()
    section = text.split("### Kafka with SASL, TLS and ACLs", 1)[1]
    block = next(b for b in section.split("```sh")[1:] if "kafka-acls.sh" in b)
    block = block.split("```", 1)[0].replace("\\\n", " ")
    return [
        shlex.split(line.split("#", 1)[0])
        for line in block.splitlines()
        if line.strip().startswith("kafka-acls.sh")
    ]


def bindings(words: list[str], principal: str) -> list[object]:
    """The ACL bindings ``kafka-acls.sh --add`` would make from ``words``, for ``principal``."""
    from confluent_kafka.admin import (  # noqa: PLC0415
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    kinds = {
        "--topic": ResourceType.TOPIC,
        "--group": ResourceType.GROUP,
        "--transactional-id": ResourceType.TRANSACTIONAL_ID,
    }
    operations, resources = [], []
    pattern = ResourcePatternType.LITERAL
    assert "--add" in words, words
    for i, word in enumerate(words):
        value = words[i + 1] if i + 1 < len(words) else ""
        if word == "--operation":
            operations.append(AclOperation[value.upper()])
        elif word == "--resource-pattern-type":
            pattern = ResourcePatternType[value.upper()]
        elif word in kinds:
            resources.append((kinds[word], value))
        elif word == "--cluster":
            resources.append((ResourceType.BROKER, "kafka-cluster"))
        elif word == "--allow-principal":
            assert value == "User:walcast", words
    assert operations, words
    assert resources, words
    return [
        AclBinding(kind, name, pattern, principal, "*", op, AclPermissionType.ALLOW)
        for kind, name in resources
        for op in operations
    ]


@dataclass
class Broker:
    """The secured broker: its exports (``env kafka-secure``) and the passwords in use."""

    exports: dict[str, str]
    passwords: dict[str, str] = field(default_factory=dict)

    def listener(self, name: str) -> str:
        return self.exports[f"WALCAST_TEST_KAFKA_{name}"]

    def __getitem__(self, name: str) -> str:
        return self.exports[f"WALCAST_TEST_KAFKA_{name}"]

    def sasl(self, listener: str, user: str = "walcast", **extra: str) -> dict[str, str]:
        """The client environment for SASL (SCRAM-SHA-512) through ``listener``."""
        env = {
            "WALCAST__KAFKA__SECURITY_PROTOCOL": listener,
            "WALCAST__KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
            "WALCAST__KAFKA__SASL_USERNAME": user,
            "WALCAST__KAFKA__SASL_PASSWORD_ENV": "MY_KAFKA_PASSWORD",
            "MY_KAFKA_PASSWORD": self.passwords.get(user, f"{MARK}-none"),
        }
        if listener == "SASL_SSL":
            env["WALCAST__KAFKA__SSL_CA_LOCATION"] = self["CA"]
        return {**env, **extra}

    def mtls(self, cert: str = "CLIENT", **extra: str) -> dict[str, str]:
        """The client environment for TLS with a client certificate (``CLIENT``, ``EXPIRED``)."""
        env = {
            "WALCAST__KAFKA__SECURITY_PROTOCOL": "SSL",
            "WALCAST__KAFKA__SSL_CA_LOCATION": self["CA"],
            "WALCAST__KAFKA__SSL_CERTIFICATE_LOCATION": self[f"{cert}_CERT"],
            "WALCAST__KAFKA__SSL_KEY_LOCATION": self[f"{cert}_KEY"],
        }
        return {**env, **extra}

    def client(self, listener: str, user: str = "walcast") -> dict[str, str]:
        """The environment of a working client of ``listener``, as ``user``."""
        return self.mtls() if listener == "SSL" else self.sasl(listener, user)

    def assert_no_secret(self, text: str) -> None:
        for user, password in self.passwords.items():
            assert password not in text, f"the password of {user} was printed"
        assert MARK not in text, "a wrong password was printed"
        key = Path(self["CLIENT_KEY"]).read_text().splitlines()[1]  # handed to Spark inline
        assert key not in text, "the client key was printed"


@pytest.fixture(scope="module")
def broker() -> Broker:
    from confluent_kafka.admin import (  # noqa: PLC0415
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    done = subprocess.run(
        [str(SERVICES), "start", "kafka-secure"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"local-services start kafka-secure failed:\n{done.stderr[-3000:]}")
    exports = {}
    for line in done.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        exports[name] = shlex.split(value)[0]
    found = Broker(exports)
    for user in ("admin", "walcast", "nobody"):
        found.passwords[user] = found[f"{user.upper()}_PASSWORD"]
    found.passwords["reader"] = uuid.uuid4().hex
    found.passwords["no-txn"] = uuid.uuid4().hex
    found.passwords["no-create"] = uuid.uuid4().hex
    admin = AdminClient(
        {
            "bootstrap.servers": found.listener("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": found.passwords["admin"],
        }
    )
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    for future in admin.delete_acls([every]).values():
        future.result(timeout=30)
    upserts = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
            found.passwords[user].encode(),
        )
        for user in ("reader", "no-txn", "no-create")
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=30)
    commands = readme_acl_commands()
    assert len(commands) >= 4, commands
    granted: list[object] = []
    for words in commands:
        granted += bindings(words, "User:walcast")
        if "--transactional-id" not in words:
            granted += bindings(words, "User:no-txn")
        no_create = " ".join(words).replace("--operation Create", "").split()
        if "--operation" in no_create:
            granted += bindings(no_create, "User:no-create")
    granted += bindings(commands[-1], "User:reader")  # the Spark jobs' command only
    unique = list(dict.fromkeys(granted))
    for future in admin.create_acls(unique).values():
        future.result(timeout=30)
    time.sleep(1)  # ACLs reach the authorizer through the metadata log
    return found


# -- helpers ---------------------------------------------------------------------------------


@dataclass
class Table:
    """A table with three rows and a publication of it; dropped with its slots."""

    dsn: str
    name: str = field(default_factory=lambda: f"sec_{uuid.uuid4().hex[:8]}")
    slots: list[str] = field(default_factory=list)

    @property
    def topic(self) -> str:
        return f"walcast.json.public.{self.name}"

    def create(self) -> Table:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {self.name} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {self.name} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
            conn.execute(f"CREATE PUBLICATION {self.name} FOR TABLE {self.name}")
        return self

    def drop(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for slot in self.slots:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (slot,),
                )
            conn.execute(f"DROP PUBLICATION IF EXISTS {self.name}")
            conn.execute(f"DROP TABLE IF EXISTS {self.name}")

    def run(
        self, bootstrap: str, env: dict[str, str], *flags: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``walcast run --snapshot initial-only`` on a new slot: loads the table, exits."""
        slot = f"{self.name}_{len(self.slots)}"
        self.slots.append(slot)
        return sc.walcast(
            "--log-level", "debug", "run", "--dsn", self.dsn, "--slot", slot, "--create-slot",
            "--publication", self.name, "--bootstrap-servers", bootstrap, "--format", "json",
            "--metrics-port", "0", "--snapshot", "initial-only", *flags,
            env=env, timeout=timeout,
        )  # fmt: skip


@pytest.fixture
def table(pg_dsn: str) -> Iterator[Table]:
    made = Table(pg_dsn).create()
    try:
        yield made
    finally:
        made.drop()


def one_line(done: subprocess.CompletedProcess[str], broker: Broker, *needles: str) -> str:
    """The one-line-error contract: exit 6, one ``walcast: error:`` line, the rest JSON."""
    output = done.stdout + done.stderr
    broker.assert_no_secret(output)
    assert "Traceback" not in output, output
    assert done.returncode == 6, output
    errors = [line for line in done.stderr.splitlines() if line.startswith("walcast: error: ")]
    assert len(errors) == 1, done.stderr
    for line in done.stderr.splitlines():
        assert line in errors or line.startswith("{"), f"a raw line on the terminal: {line}"
    for needle in needles:
        assert needle in errors[0], errors[0]
    assert "(hint: " in errors[0], errors[0]
    return errors[0]


# -- every client through each listener ------------------------------------------------------


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL", "SSL"])
def test_every_client_works_through_the_listener(
    broker: Broker, table: Table, listener: str
) -> None:
    bootstrap = broker.listener(listener)
    env = broker.client(listener)
    outputs = []
    test_topic = f"walcast.test.{table.name}"
    made = sc.walcast(
        "--log-level", "debug", "produce-test-stream", "--format", "json", "--count", "3",
        "--tables", "1", "--kafka", bootstrap, "--topic", test_topic, env=env, timeout=120,
    )  # fmt: skip
    outputs.append(made.stdout + made.stderr)
    assert made.returncode == 0, made.stderr[-3000:]
    loaded = table.run(bootstrap, env)
    outputs.append(loaded.stdout + loaded.stderr)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    exactly_once = table.run(bootstrap, env, "--exactly-once")
    outputs.append(exactly_once.stdout + exactly_once.stderr)
    assert exactly_once.returncode == 0, exactly_once.stderr[-3000:]
    assert '"exactly_once_ready"' in exactly_once.stderr
    read = sc.walcast(
        "--log-level", "debug", "consume", "--bootstrap-servers", bootstrap,
        "--topic", table.topic, "--topic", test_topic, "--max-messages", "9",
        "--idle-timeout", "30", env=env, timeout=120,
    )  # fmt: skip
    outputs.append(read.stdout + read.stderr)
    assert read.returncode == 0, read.stderr[-3000:]
    values = read.stdout.splitlines()
    assert sum('"op":"snapshot"' in v for v in values) == 6, read.stdout  # twice 3 rows
    assert len(values) == 9, read.stdout
    for text in outputs:
        broker.assert_no_secret(text)


# -- least privilege: the Spark jobs -------------------------------------------------------------


@pytest.mark.spark
def test_spark_jobs_read_with_only_the_readme_acls(
    broker: Broker, table: Table, tmp_path: Path
) -> None:
    loaded = table.run(broker.listener("SASL_SSL"), broker.sasl("SASL_SSL"))
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    normalized = tmp_path / "normalized"
    done = sc.walcast(
        "spark", "normalize", "--bootstrap-servers", broker.listener("SASL_SSL"),
        "--topic", table.topic, "--format", "json", "--output", str(normalized),
        "--checkpoint", str(tmp_path / "ck1"), "--available-now",
        env=broker.sasl("SASL_SSL", user="reader"), timeout=600,
    )  # fmt: skip
    broker.assert_no_secret(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3 changes written" in done.stdout + done.stderr
    state = tmp_path / "state"
    done = sc.walcast(
        "spark", "materialize", "--input", str(normalized), "--output", str(state),
        "--checkpoint", str(tmp_path / "ck2"), "--bootstrap-servers", broker.listener("SSL"),
        "--available-now", "--parquet", env=broker.mtls(), timeout=600,
    )  # fmt: skip
    broker.assert_no_secret(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(state.rglob(f"*{table.name}*")), "no current-state table"


# -- every wrong setting: one line -----------------------------------------------------------


def wrong(broker: Broker, case: str) -> tuple[str, dict[str, str], tuple[str, ...]]:
    """Listener, client environment and the needles of the line, for a wrong setting."""
    ca = {"WALCAST__KAFKA__SSL_CA_LOCATION": broker["CA"]}
    cases: dict[str, tuple[str, dict[str, str], tuple[str, ...]]] = {
        "wrong-password": (
            "SASL_PLAINTEXT",
            broker.sasl("SASL_PLAINTEXT", MY_KAFKA_PASSWORD=f"{MARK}-1"),
            ("refused the SASL login of kafka.sasl_username 'walcast' (SCRAM-SHA-512)",),
        ),
        "unknown-user": (
            "SASL_PLAINTEXT",
            broker.sasl("SASL_PLAINTEXT", user="ghost"),
            ("refused the SASL login of kafka.sasl_username 'ghost'",),
        ),
        "mechanism": (
            "SASL_PLAINTEXT",
            broker.sasl("SASL_PLAINTEXT", WALCAST__KAFKA__SASL_MECHANISM="SCRAM-SHA-256"),
            ("kafka.sasl_mechanism is 'SCRAM-SHA-256'", "offers only SCRAM-SHA-512"),
        ),
        "tls-at-plaintext": (
            "SASL_PLAINTEXT",
            broker.sasl("SASL_PLAINTEXT", WALCAST__KAFKA__SECURITY_PROTOCOL="SASL_SSL", **ca),
            ("kafka.security_protocol is 'SASL_SSL'", "answers in plaintext"),
        ),
        "plaintext-at-tls": (
            "SASL_SSL",
            broker.sasl("SASL_SSL", WALCAST__KAFKA__SECURITY_PROTOCOL="SASL_PLAINTEXT"),
            ("kafka.security_protocol is 'SASL_PLAINTEXT'", "as a TLS listener does"),
        ),
        "untrusted-ca": (
            "SASL_SSL",
            broker.sasl("SASL_SSL", WALCAST__KAFKA__SSL_CA_LOCATION=broker["OTHER_CA"]),
            ("is not signed by a CA in kafka.ssl_ca_location", "other-ca.pem"),
        ),
        "other-host": (
            "WRONGHOST",
            {"WALCAST__KAFKA__SECURITY_PROTOCOL": "SSL", **ca},
            ("is for kafka.example.invalid, not for 127.0.0.1",),
        ),
        "expired-client-certificate": (
            "SSL",
            broker.mtls("EXPIRED"),
            ("refused walcast's client certificate kafka.ssl_certificate_location", "expired"),
        ),
        "no-client-certificate": (
            "SSL",
            {"WALCAST__KAFKA__SECURITY_PROTOCOL": "SSL", **ca},
            ("asks for a client certificate (mTLS)", "kafka.ssl_certificate_location"),
        ),
        "missing-create-acl": (
            "SASL_SSL",
            broker.sasl("SASL_SSL", user="no-create"),
            ("denies User:no-create CREATE on Topic 'walcast.", "--operation Create"),
        ),
        "missing-write-acl": (
            "SASL_PLAINTEXT",
            broker.sasl("SASL_PLAINTEXT", user="nobody"),
            ("denies User:nobody WRITE on Topic 'walcast.' (prefixed)", "--operation Write"),
        ),
    }
    return cases[case]


WRONG = [
    "wrong-password",
    "unknown-user",
    "mechanism",
    "tls-at-plaintext",
    "plaintext-at-tls",
    "untrusted-ca",
    "other-host",
    "expired-client-certificate",
    "no-client-certificate",
    "missing-write-acl",
    "missing-create-acl",
]


@pytest.mark.parametrize("case", WRONG)
def test_walcast_run_with_a_wrong_setting_stops_in_one_line(
    broker: Broker, table: Table, case: str
) -> None:
    listener, env, needles = wrong(broker, case)
    started = time.monotonic()
    done = table.run(broker.listener(listener), env, timeout=90)
    one_line(done, broker, *needles)
    assert time.monotonic() - started < 45


def test_a_missing_transactional_id_acl_is_named(broker: Broker, table: Table) -> None:
    done = table.run(
        broker.listener("SASL_SSL"), broker.sasl("SASL_SSL", user="no-txn"), "--exactly-once"
    )
    one_line(
        done,
        broker,
        "denies User:no-txn WRITE and DESCRIBE on TransactionalId 'walcast-",
        "--operation Write --operation Describe --transactional-id",
    )


@pytest.mark.parametrize("case", ["wrong-password", "untrusted-ca", "no-client-certificate"])
def test_consume_and_the_spark_preflight_say_the_same_line(broker: Broker, case: str) -> None:
    listener, env, needles = wrong(broker, case)
    bootstrap = broker.listener(listener)
    done = sc.walcast(
        "consume", "--bootstrap-servers", bootstrap, "--topic", "walcast.x", env=env, timeout=60
    )
    one_line(done, broker, *needles)
    done = sc.walcast(
        "spark", "normalize", "--bootstrap-servers", bootstrap, "--topic", "walcast.x",
        "--format", "json", "--output", "/nonexistent/o", "--checkpoint", "/nonexistent/c",
        env=env, timeout=120,
    )  # fmt: skip
    one_line(done, broker, *needles)


def test_a_topic_hidden_by_a_missing_acl_is_not_called_missing(broker: Broker) -> None:
    env = broker.sasl("SASL_PLAINTEXT", user="reader")
    bootstrap = broker.listener("SASL_PLAINTEXT")
    done = sc.walcast(
        "consume", "--bootstrap-servers", bootstrap, "--topic", "other.topic", env=env, timeout=60
    )
    one_line(done, broker, "denies User:reader DESCRIBE on Topic 'other.topic'")
