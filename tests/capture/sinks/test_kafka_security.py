"""capture.kafka.security without a broker: settings from the environment, the Java
client's options, and the one line for each refusal librdkafka reports (issue 34).

The same lines met through the CLI against a real secured broker are in
``tests/capture/integration/test_secured_kafka.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capture.errors import ConfigError
from capture.kafka.client import ProtocolWatch
from capture.kafka.security import SecurityRefusedError, client_settings, java_options, refusal

SASL = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "walcast", "sasl.password": "pw0"}
PREFIX = "sasl_plaintext://127.0.0.1:9092/bootstrap: "


def test_settings_come_from_the_environment_with_the_password_from_its_variable() -> None:
    env = {
        "WALCAST__KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "WALCAST__KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "WALCAST__KAFKA__SASL_USERNAME": "walcast",
        "WALCAST__KAFKA__SASL_PASSWORD_ENV": "MY_PW",
        "WALCAST__KAFKA__SSL_CA_LOCATION": "/ca.pem",
        "MY_PW": "s3cret",
    }
    assert client_settings(env) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "walcast",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/ca.pem",
    }
    assert client_settings({}) == {}


def test_the_password_from_a_file_and_a_missing_source_is_one_error(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    env = {
        "WALCAST__KAFKA__SASL_MECHANISM": "PLAIN",
        "WALCAST__KAFKA__SASL_PASSWORD_FILE": str(secret),
    }
    assert client_settings(env)["sasl.password"] == "from-file"
    with pytest.raises(ConfigError, match="SASL needs a password"):
        client_settings({"WALCAST__KAFKA__SASL_MECHANISM": "PLAIN"})
    with pytest.raises(ConfigError, match=r"NOPE .* is not set"):
        client_settings(
            {"WALCAST__KAFKA__SASL_MECHANISM": "PLAIN", "WALCAST__KAFKA__SASL_PASSWORD_ENV": "NOPE"}
        )


def test_java_options_carry_the_same_settings(tmp_path: Path) -> None:
    (tmp_path / "c.crt").write_text("CERT")
    (tmp_path / "c.key").write_text("KEY")
    options = java_options(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": "/ca.pem",
            "ssl.certificate.location": str(tmp_path / "c.crt"),
            "ssl.key.location": str(tmp_path / "c.key"),
            **SASL,
        }
    )
    assert options["kafka.security.protocol"] == "SSL"
    assert options["kafka.ssl.truststore.location"] == "/ca.pem"
    assert options["kafka.ssl.keystore.certificate.chain"] == "CERT"
    assert options["kafka.ssl.keystore.key"] == "KEY"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="walcast" password="pw0";'
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            (
                "SASL authentication error: Authentication failed during authentication due "
                "to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 3ms in state "
                "AUTH_REQ)"
            ),
            "refused the SASL login of kafka.sasl_username 'walcast' (SCRAM-SHA-512)",
        ),
        (
            (
                "SASL SCRAM-SHA-256 mechanism handshake failed: Broker: Unsupported SASL "
                "mechanism: broker's supported mechanisms: SCRAM-SHA-512 (after 1ms in state "
                "AUTH_HANDSHAKE)"
            ),
            (
                "kafka.sasl_mechanism is 'SCRAM-SHA-256' but the broker at 127.0.0.1:9092 offers "
                "only SCRAM-SHA-512"
            ),
        ),
        (
            (
                "Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate: SSL "
                "alert number 42 (after 0ms in state APIVERSION_QUERY)"
            ),
            "asks for a client certificate (mTLS) and walcast has none",
        ),
        (
            (
                "Failed to acquire idempotence PID from broker sasl_plaintext://127.0.0.1:9092/1: "
                "Broker: Cluster authorization failed"
            ),
            "denies User:walcast WRITE on Topic 'walcast.' (prefixed)",
        ),
    ],
)
def test_each_refusal_is_one_line_naming_the_setting(text: str, needle: str) -> None:
    found = refusal(PREFIX + text, SASL)
    assert isinstance(found, SecurityRefusedError)
    assert needle in found.message
    assert "pw0" not in found.message + (found.hint or "")
    watch = ProtocolWatch("SASL_PLAINTEXT", SASL)
    watch.note(PREFIX + text)
    assert watch.found is not None


def test_an_outage_is_no_refusal() -> None:
    text = "Connect to ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)"
    assert refusal(PREFIX + text, SASL) is None


@pytest.mark.parametrize(
    ("verified", "needle"),
    [
        ((None, "unable to get local issuer certificate"), "is not signed by a CA in"),
        ((None, None), "is not signed by a CA in"),
        ((None, "certificate has expired"), "does not verify: certificate has expired"),
        ((["kafka.example.invalid"], None), "is for kafka.example.invalid, not for 127.0.0.1"),
    ],
)
def test_an_unverified_broker_certificate_says_why(
    monkeypatch: pytest.MonkeyPatch, verified: tuple[list[str] | None, str | None], needle: str
) -> None:
    from capture.kafka import security  # noqa: PLC0415

    monkeypatch.setattr(security, "_names_if_trusted", lambda *_: verified)
    text = (
        "ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
        "certificate verify failed: broker certificate could not be verified (after 3ms in "
        "state SSL_HANDSHAKE)"
    )
    found = refusal(text, {"ssl.ca.location": "/ca.pem"})
    assert found is not None
    assert needle in found.message
