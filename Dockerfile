# walcast images (compose.yaml builds both):
#
#   docker build -t walcast .                       the daemon: walcast run | tail | status | ...
#   docker build --target spark -t walcast-spark .  the Spark jobs: walcast spark normalize | ...
#
# The daemon image installs walcast from a wheel (as `pip install walcast` would) and serves
# /metrics and /healthz on 0.0.0.0:9187 (WALCAST__DAEMON__METRICS_HOST; a config file's
# metrics_host is overridden by this variable, set it to change the address). The
# HEALTHCHECK asks /healthz, which `walcast run` serves: 200 while it streams and Kafka
# confirms deliveries, 503 when degraded. It asks only when the container runs `walcast
# run` (its PID 1's command line), on WALCAST__DAEMON__METRICS_PORT (9187; 0: nothing to
# ask): a one-shot container of the same image (`docker compose run --rm walcast status`,
# `consume`, `tail`) serves no /healthz and is never marked unhealthy.
#
#   docker run --rm walcast run --dsn "host=db dbname=app user=cdc" --slot walcast \
#       --publication walcast --bootstrap-servers kafka:9092 --format canal
#   docker run --rm -v $PWD/walcast.toml:/etc/walcast.toml walcast run --config /etc/walcast.toml
#
# Debian bookworm is pinned: it ships the OpenJDK 17 the Spark image needs.

FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY capture ./capture
COPY pipeline ./pipeline
# the vendor schemas go into the wheel as data files (<prefix>/share/walcast/schemas)
COPY schemas ./schemas
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim-bookworm AS walcast
RUN useradd --system --create-home --uid 10001 walcast
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-cache-dir /tmp/wheels/*.whl && rm -rf /tmp/wheels
USER walcast
ENV PYTHONUNBUFFERED=1 \
    WALCAST__DAEMON__METRICS_HOST=0.0.0.0
EXPOSE 9187
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; \
        words = open('/proc/1/cmdline', 'rb').read().decode(errors='replace').split(chr(0)); \
        at = next((i for i, w in enumerate(words) if w.rsplit('/', 1)[-1] == 'walcast'), len(words)); \
        rest = words[at + 1:]; \
        command = next((w for i, w in enumerate(rest) if not w.startswith('-') and (i == 0 or rest[i - 1] != '--log-level')), ''); \
        port = os.environ.get('WALCAST__DAEMON__METRICS_PORT') or '9187'; \
        command != 'run' or port == '0' or urllib.request.urlopen('http://127.0.0.1:' + port + '/healthz', timeout=4)"]
ENTRYPOINT ["walcast"]
CMD ["--help"]

# The Spark jobs: Java 17, pyspark and the connector jars, fetched from Maven Central at
# build time (scripts/fetch-spark-jars), so a running job downloads nothing. Installed in
# place (editable) so that the jobs find schemas/ and scripts/ next to the code.
FROM python:3.11-slim-bookworm AS spark
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven procps \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --uid 10001 walcast
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY capture ./capture
COPY pipeline ./pipeline
COPY schemas ./schemas
COPY scripts/fetch-spark-jars ./scripts/fetch-spark-jars
ENV WALCAST_CACHE_DIR=/opt/walcast-cache \
    PYTHONUNBUFFERED=1
RUN pip install --no-cache-dir -e '.[spark]' \
    && scripts/fetch-spark-jars \
    && rm -rf /root/.m2 \
    && apt-get purge -y maven && apt-get autoremove -y \
    && mkdir -p /data && chown walcast /data
USER walcast
VOLUME ["/data"]
ENTRYPOINT ["walcast"]
CMD ["spark", "--help"]
