"""A ``security.protocol`` the Kafka listener does not speak, met through the CLI (issue 22.4).

Against the shared PLAINTEXT broker, ``walcast run`` configured for TLS (``SSL``,
``SASL_SSL``) used to wait for ever, saying only that Kafka did not answer; now it stops in
seconds with one line naming ``kafka.security_protocol``, what was configured and what the
listener speaks, exit code 6. The reverse (a plaintext client at a TLS listener) runs
against a TLS listener of this module's own: it does what Kafka's SSL listener does with a
plaintext client (the TLS handshake fails on the client's first request and the connection
is closed; librdkafka 2.x reports the very same ``Disconnected … in state
APIVERSION_QUERY`` lines for both).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.capture.integration.test_bad_input import MARK, Run, walcast

pytestmark = pytest.mark.integration


def run(pg_dsn: str, kafka: str, *extra: str, env: dict[str, str] | None = None) -> Run:
    """``walcast run --create-slot`` with an (empty) publication: PostgreSQL's side passes
    every check, which come first (issue 38.4), and Kafka is met before the slot is made."""
    name = f"wc_kafka_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {name}")
    try:
        return walcast(
            "run", "--dsn", pg_dsn, "--slot", name, "--create-slot", "--publication", name,
            "--bootstrap-servers", kafka, "--format", "json", "--metrics-port", "0", *extra,
            env=env, timeout=60,
        )  # fmt: skip
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (name,)
            ).fetchone()
            conn.execute(f"DROP PUBLICATION {name}")
        assert left == (0,), "the slot was created before Kafka was checked"


SASL = {
    "WALCAST__KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
    "WALCAST__KAFKA__SASL_USERNAME": "walcast",
    "WALCAST__KAFKA__SASL_PASSWORD_ENV": "MY_KAFKA_PASSWORD",
    "MY_KAFKA_PASSWORD": f"Kf7{MARK}pw",
}


@pytest.mark.parametrize(
    ("protocol", "extra_env", "flags"),
    [
        ("SSL", {}, ()),
        ("SASL_SSL", SASL, ()),
        ("SASL_SSL", SASL, ("--exactly-once",)),
    ],
    ids=["ssl", "sasl_ssl", "sasl_ssl-exactly-once"],
)
def test_run_configured_for_tls_at_a_plaintext_listener_stops_in_one_line(
    pg_dsn: str,
    kafka_bootstrap: str,
    protocol: str,
    extra_env: dict[str, str],
    flags: tuple[str, ...],
) -> None:
    env = {"WALCAST__KAFKA__SECURITY_PROTOCOL": protocol, **extra_env}
    done = run(pg_dsn, kafka_bootstrap, *flags, env=env)
    line = done.error_line(
        f"kafka.security_protocol is '{protocol}' but the broker at {kafka_bootstrap} answers "
        "in plaintext (librdkafka: SSL handshake failed",
        'set kafka.security_protocol = "PLAINTEXT"',
        "kafka.bootstrap_servers at the broker's SSL listener",
        json_logs=True,
    )
    assert ("SASL_PLAINTEXT" in line) == (protocol == "SASL_SSL")
    assert done.done.returncode == 6
    assert done.seconds < 30
    assert '"kafka_unreachable' not in done.done.stderr  # not taken for an outage


# -- a plaintext client at a TLS listener ------------------------------------------------------


@pytest.fixture(scope="module")
def tls_listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a TLS listener that ends a connection whose first bytes are not TLS."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is needed to make the test listener's certificate"
    where = tmp_path_factory.mktemp("tls")
    key, cert = where / "key.pem", where / "cert.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def serve(conn: socket.socket) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_side=True)
        conn.settimeout(5)
        try:
            while data := conn.recv(65536):
                incoming.write(data)
                try:
                    tls.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError:
                    break  # not TLS: close the connection, as Kafka's SSL listener does
                finally:
                    if pending := outgoing.read():
                        conn.sendall(pending)
        except OSError:
            pass
        finally:
            conn.close()

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_run_in_plaintext_at_a_tls_listener_stops_in_one_line(
    pg_dsn: str, tls_listener: str
) -> None:
    done = run(pg_dsn, tls_listener)
    done.error_line(
        f"kafka.security_protocol is not set (plaintext) but the broker at {tls_listener} "
        "closes every plaintext connection before answering, as a TLS listener does "
        "(librdkafka: Disconnected",
        "in state APIVERSION_QUERY)",
        'set kafka.security_protocol = "SSL"',
        json_logs=True,
    )
    assert done.done.returncode == 6
    assert done.seconds < 30
    explicit = run(pg_dsn, tls_listener, env={"WALCAST__KAFKA__SECURITY_PROTOCOL": "PLAINTEXT"})
    explicit.error_line("kafka.security_protocol is 'PLAINTEXT' but the broker", json_logs=True)


def test_consume_at_a_tls_listener_names_it(tls_listener: str) -> None:
    done = walcast("consume", "--bootstrap-servers", tls_listener, "--topic", "t")
    done.error_line(
        f"--bootstrap-servers: the broker at {tls_listener} closes every plaintext connection",
        "walcast consume connects in plaintext only while WALCAST__KAFKA__SECURITY_PROTOCOL",
        "point --bootstrap-servers at the broker's PLAINTEXT listener",
    )
    assert done.done.returncode == 6
    assert done.seconds < 30


def test_produce_test_stream_at_a_tls_listener_names_it(tls_listener: str) -> None:
    done = walcast(
        "produce-test-stream", "--format", "json", "--count", "3", "--kafka", tls_listener,
        "--topic", "t",
    )  # fmt: skip
    done.error_line(
        f"--kafka: the broker at {tls_listener} closes every plaintext connection",
        "walcast produce-test-stream connects in plaintext only while",
    )
    assert done.done.returncode == 6


def test_the_listener_fixture_speaks_tls(tls_listener: str) -> None:
    """The fixture is a TLS listener indeed: a TLS client completes its handshake."""
    host, port = tls_listener.rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        assert tls.version() is not None
