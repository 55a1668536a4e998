"""compose.yaml, the Dockerfile and the wheel: what can be checked without a Docker engine.

The compose file must be valid YAML with the services and settings the README promises,
its walcast and Spark commands must be accepted by walcast's own parser and configuration,
and the Spark job must read the topics walcast writes. The daemon image installs walcast
from a wheel: the wheel is built and installed in a fresh venv, and its entry point runs
from outside the repository. The image's HEALTHCHECK program runs here as Docker would run
it, against a /healthz of the test's own: it asks the daemon (``walcast run``) and passes
every other container of the image (one-shot ``docker compose run --rm walcast status``).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from capture.cli import _run_cli_values, build_parser
from capture.config import reading
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parent.parent


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def dockerfile() -> str:
    return (REPO / "Dockerfile").read_text()


def test_compose_has_the_four_services() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "kafka", "walcast", "spark"}
    postgres, kafka = services["postgres"], services["kafka"]
    assert "wal_level=logical" in postgres["command"]
    assert postgres["image"].startswith("postgres:")
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}  # KRaft
    assert not any("ZOOKEEPER" in key for key in env)
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert "HOST://localhost:29092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert "127.0.0.1:29092:29092" in kafka["ports"]
    for name in ("walcast", "spark"):
        target = services[name]["build"]["target"]
        assert re.search(rf"^FROM \S+ AS {target}$", dockerfile(), re.MULTILINE), target


def test_the_walcast_service_is_a_valid_run() -> None:
    walcast = compose()["services"]["walcast"]
    env = {str(k): str(v) for k, v in walcast["environment"].items()}
    args = build_parser().parse_args(walcast["command"])
    assert args.command == "run"
    config = reading.load(None, _run_cli_values(args), env)
    assert (config.metrics_host, config.metrics_port) == ("0.0.0.0", 9187)
    assert f"127.0.0.1:{config.metrics_port}:{config.metrics_port}" in walcast["ports"]
    assert "password" not in config.source.dsn  # the password reaches libpq as PGPASSWORD
    assert config.source.create_slot
    assert config.source.create_publication
    assert [o.format for o in config.outputs] == ["canal", "dts-avro"]
    dependencies = walcast["depends_on"]
    assert dependencies["postgres"]["condition"] == "service_healthy"
    assert dependencies["kafka"]["condition"] == "service_healthy"
    schema = compose()["configs"]["shop-schema"]["content"]
    for table in config.source.publish_tables:
        assert f"CREATE TABLE {table} " in schema, table


def test_the_spark_job_reads_the_topics_walcast_writes() -> None:
    services = compose()["services"]
    walcast, spark = services["walcast"], services["spark"]
    config = reading.load(
        None,
        _run_cli_values(build_parser().parse_args(walcast["command"])),
        {str(k): str(v) for k, v in walcast["environment"].items()},
    )
    args = build_parser().parse_args(spark["command"])
    assert spark["command"][:2] == ["spark", "normalize"]
    assert args.format == "canal"
    canal = next(o for o in config.outputs if o.format == "canal")
    written = {
        canal.topic.format(format="canal", schema=t.split(".")[0], table=t.split(".")[1])
        for t in config.source.publish_tables
    }
    assert set(args.topic) == written
    assert args.layout_topic == config.schema_topic
    assert args.bootstrap_servers == config.bootstrap_servers
    assert args.output.startswith("/data/")
    assert "spark-data:/data" in spark["volumes"]


def daemon_stage() -> str:
    return dockerfile().split(" AS walcast", 1)[1].split("\nFROM ", 1)[0]


def healthcheck_command(*, keep_indent: bool = True) -> list[str]:
    """The daemon image's HEALTHCHECK CMD as Docker reads it: a line ending in a backslash
    goes on with the next one, whose leading whitespace BuildKit keeps today (a TODO of its
    parser would drop it: ``keep_indent=False``)."""
    lines = iter(daemon_stage().splitlines())
    for line in lines:
        if line.startswith("HEALTHCHECK "):
            logical = line
            while logical.endswith("\\"):
                following = next(lines)
                logical = logical[:-1] + (following if keep_indent else following.lstrip())
            command = json.loads(logical.split(" CMD ", 1)[1])
            assert isinstance(command, list)
            return [str(word) for word in command]
    raise AssertionError("no HEALTHCHECK in the daemon stage")


def test_dockerfile_serves_health_on_all_interfaces() -> None:
    daemon = daemon_stage()
    assert re.search(r"^EXPOSE 9187$", daemon, re.MULTILINE)
    assert "WALCAST__DAEMON__METRICS_HOST=0.0.0.0" in daemon
    command = healthcheck_command()
    assert command[:2] == ["python", "-c"]
    assert "/healthz" in command[2]
    assert 'ENTRYPOINT ["walcast"]' in daemon
    assert "pip install --no-cache-dir /tmp/wheels/*.whl" in daemon
    wheel_stage = dockerfile().split(" AS walcast", 1)[0]
    assert "COPY schemas ./schemas" in wheel_stage  # the wheel carries them (data files)


class HealthEndpoint:
    """A /healthz on 127.0.0.1 answering ``status`` (the daemon's, as the check sees it)."""

    def __init__(self, status: int) -> None:
        answer = status

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(answer if self.path == "/healthz" else 404)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_healthcheck(tmp_path: Path, pid1: str, port: int | str, *, keep_indent: bool = True) -> int:
    """Exit code of the image's check in a container whose PID 1 runs ``pid1`` (words)."""
    cmdline = tmp_path / "cmdline"
    cmdline.write_bytes(b"\0".join(w.encode() for w in pid1.split()) + b"\0")
    program = healthcheck_command(keep_indent=keep_indent)[2]
    assert program.count("/proc/1/cmdline") == 1
    program = program.replace("/proc/1/cmdline", str(cmdline))
    env = {**os.environ, "WALCAST__DAEMON__METRICS_PORT": str(port)}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, timeout=30, check=False
    )
    return done.returncode


DAEMONS = [
    "/usr/local/bin/python /usr/local/bin/walcast run --format canal",
    "/usr/local/bin/python /usr/local/bin/walcast --log-level debug run",
    "/usr/local/bin/python /usr/local/bin/walcast --log-level=debug run --config /etc/w.toml",
    "/sbin/docker-init -- walcast run",  # docker run --init
]
ONE_SHOTS = [
    "/usr/local/bin/python /usr/local/bin/walcast status --dsn host=postgres",
    "/usr/local/bin/python /usr/local/bin/walcast consume --topic run",
    "/usr/local/bin/python /usr/local/bin/walcast --log-level debug tail --slot run",
    "/usr/local/bin/python /usr/local/bin/walcast --help",
    "/bin/sh",  # docker run --entrypoint sh
]


@pytest.mark.parametrize("keep_indent", [True, False], ids=["indent-kept", "indent-dropped"])
@pytest.mark.parametrize("pid1", DAEMONS)
def test_the_healthcheck_asks_healthz_of_the_daemon(
    tmp_path: Path, pid1: str, keep_indent: bool
) -> None:
    for status, healthy in ((200, True), (503, False)):
        endpoint = HealthEndpoint(status)
        try:
            code = run_healthcheck(tmp_path, pid1, endpoint.port, keep_indent=keep_indent)
        finally:
            endpoint.close()
        assert (code == 0) is healthy, (status, code)
    assert run_healthcheck(tmp_path, pid1, free_port(), keep_indent=keep_indent) != 0
    assert run_healthcheck(tmp_path, pid1, 0, keep_indent=keep_indent) == 0  # no /healthz


@pytest.mark.parametrize("pid1", ONE_SHOTS)
def test_one_shot_containers_of_the_image_are_never_unhealthy(tmp_path: Path, pid1: str) -> None:
    # docker compose run --rm walcast status: nothing serves /healthz, nothing is asked.
    assert run_healthcheck(tmp_path, pid1, free_port()) == 0
    endpoint = HealthEndpoint(503)
    try:
        assert run_healthcheck(tmp_path, pid1, endpoint.port) == 0
    finally:
        endpoint.close()


def test_readme_documents_compose() -> None:
    readme = (REPO / "README.md").read_text()
    assert "docker compose up -d --build" in readme
    assert "localhost:9187" in readme
    assert "localhost:29092" in readme
    assert "docker compose down -v" in readme


@pytest.mark.integration
def test_the_wheel_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    for command in (
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
         str(wheels), str(REPO)],
        [sys.executable, "-m", "venv", str(venv)],
    ):  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = wheels.glob("walcast-*.whl")
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         str(wheel)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # The wheel ships the schemas as data files, under <prefix>/share/walcast/schemas.
    shared = venv / "share" / "walcast" / "schemas"
    assert sorted(p.name for p in shared.iterdir()) == sorted(
        p.name for p in (REPO / "schemas").iterdir()
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WALCAST", "PYTHON"))}
    env["WALCAST__DAEMON__METRICS_HOST"] = "0.0.0.0"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "walcast"), *args],
            capture_output=True, text=True, timeout=120, check=False, cwd=outside, env=env,
        )  # fmt: skip

    done = run("--help")
    assert done.returncode == 0, done.stderr
    for command in ("run", "tail", "status", "slot", "consume", "spark"):
        assert command in done.stdout
    done = run(
        *shlex.split(
            "run --print-config --dsn 'host=db user=cdc' --slot s --publication p "
            "--bootstrap-servers kafka:9092 --format canal"
        )
    )
    assert done.returncode == 0, done.stderr
    assert 'metrics_host = "0.0.0.0"' in done.stdout
    probe = "import capture, capture.consume as c; print(capture.__file__); print(c.schema_path(c.DTS_SCHEMA_FILE))"  # noqa: E501
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        capture_output=True, text=True, timeout=60, check=False, cwd=outside, env=env,
    )  # fmt: skip
    module, schema = where.stdout.split()
    assert module.startswith(str(venv)), module  # the wheel's code, not the checkout's
    assert schema == str(shared / "dts-avro-Record.avsc")
    # the Spark jobs' schema lookup finds the same files (no pyspark needed for it)
    probe = "from capture.schema_files import require_schema as r; print(r('canal.schema.json'))"
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        capture_output=True, text=True, timeout=60, check=False, cwd=outside, env=env,
    )  # fmt: skip
    assert where.stdout.strip() == str(shared / "canal.schema.json"), where.stderr
