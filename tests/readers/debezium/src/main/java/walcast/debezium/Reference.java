package walcast.debezium;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.io.BufferedWriter;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * The real Debezium PostgreSQL connector (3.6.1.Final, {@code plugin.name=pgoutput}), run by
 * its embedded engine with Kafka Connect's {@code JsonConverter}: the reference that walcast's
 * {@code debezium} format is compared with, event by event.
 *
 * <p>It reads an existing slot and publication (the test creates both before its workload, so
 * that walcast and Debezium decode the same WAL; {@code publication.autocreate.mode=disabled}),
 * and writes each record Debezium emits as one line
 *
 * <pre>{"topic":"&lt;destination&gt;","key":&lt;key JSON or null&gt;,"value":&lt;value JSON or null&gt;}</pre>
 *
 * where key and value are JsonConverter's output inserted verbatim (byte for byte, so a reader
 * can compare the exact text). It stops after {@code --max-records} records, or when no record
 * but heartbeats came for {@code --idle-timeout-ms} once the connector is polling, or at
 * {@code --timeout-ms} in all (exit 3: a hung connector is a failure, not a short result).
 * A failed connector exits 1 with its error on stderr.
 *
 * <p>Settings: the connector's own defaults (decimal.handling.mode=precise,
 * time.precision.mode=adaptive, binary.handling.mode=bytes, hstore.handling.mode=json,
 * interval.handling.mode=numeric, tombstones.on.delete=true, skipped.operations=t, ...) unless
 * a {@code --property key=value} says otherwise; {@code --property} also reaches the engine and
 * the converters (e.g. {@code converter.schemas.enable}). Offsets go to a file store
 * ({@code --offsets}, a temporary file by default). The password comes from PGPASSWORD, never
 * from the command line.
 *
 * <pre>
 * java -cp classes-debezium:debezium-jars/* walcast.debezium.Reference \
 *     --host H --port P --user U --dbname D --slot S --publication P \
 *     [--topic-prefix walcast] [--snapshot-mode no_data] [--schemas false] \
 *     [--max-records N] [--idle-timeout-ms 10000] [--timeout-ms 600000] \
 *     [--output FILE] [--offsets FILE] [--property key=value]...
 * </pre>
 */
public final class Reference {
    private static final String HEARTBEAT_TOPIC = "__debezium-heartbeat";

    private Reference() {}

    public static void main(String[] args) throws Exception {
        // Debezium and Kafka log through slf4j; the harness keeps stdout for records.
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        Map<String, String> options = new LinkedHashMap<>();
        List<String> extra = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            String name = args[i];
            if (!name.startsWith("--") || i + 1 >= args.length) {
                usage("expected --name value, got " + name);
            }
            String value = args[++i];
            if (name.equals("--property")) {
                if (!value.contains("=")) {
                    usage("--property takes key=value, got " + value);
                }
                extra.add(value);
            } else {
                options.put(name.substring(2), value);
            }
        }
        for (String required : List.of("host", "port", "user", "dbname", "slot", "publication")) {
            if (!options.containsKey(required)) {
                usage("--" + required + " is required");
            }
        }
        int status;
        try {
            status = run(options, extra);
        } catch (Throwable error) {
            System.err.println("debezium-reference: " + describe(error));
            status = 1;
        }
        // Engine threads may linger after a failure: the exit status is the whole answer.
        System.exit(status);
    }

    private static void usage(String problem) {
        System.err.println("debezium-reference: " + problem);
        System.err.println(
                "usage: Reference --host H --port P --user U --dbname D --slot S --publication P"
                        + " [--topic-prefix X] [--snapshot-mode M] [--schemas true|false]"
                        + " [--max-records N] [--idle-timeout-ms MS] [--timeout-ms MS]"
                        + " [--output FILE] [--offsets FILE] [--property key=value]...");
        System.exit(2);
    }

    static Properties settings(Map<String, String> options, List<String> extra, Path offsets) {
        Properties props = new Properties();
        props.setProperty("name", "walcast-debezium-reference");
        props.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
        props.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        props.setProperty("offset.storage.file.filename", offsets.toString());
        props.setProperty("offset.flush.interval.ms", "1000");
        props.setProperty("database.hostname", options.get("host"));
        props.setProperty("database.port", options.get("port"));
        props.setProperty("database.user", options.get("user"));
        String password = System.getenv("PGPASSWORD");
        if (password != null) {
            props.setProperty("database.password", password);
        }
        props.setProperty("database.dbname", options.get("dbname"));
        props.setProperty("topic.prefix", options.getOrDefault("topic-prefix", "walcast"));
        props.setProperty("plugin.name", "pgoutput");
        props.setProperty("slot.name", options.get("slot"));
        props.setProperty("publication.name", options.get("publication"));
        props.setProperty("publication.autocreate.mode", "disabled");
        props.setProperty("snapshot.mode", options.getOrDefault("snapshot-mode", "no_data"));
        // Json format: JsonConverter for key and value, configured from converter.*
        props.setProperty("converter.schemas.enable", options.getOrDefault("schemas", "false"));
        for (String pair : extra) {
            int eq = pair.indexOf('=');
            props.setProperty(pair.substring(0, eq), pair.substring(eq + 1));
        }
        return props;
    }

    private static final class State {
        final long maxRecords;
        long written;
        volatile long lastRecordNanos = System.nanoTime();
        volatile boolean polling;
        volatile boolean finished;
        volatile String error;

        State(long maxRecords) {
            this.maxRecords = maxRecords;
        }

        synchronized boolean full() {
            return maxRecords > 0 && written >= maxRecords;
        }
    }

    static int run(Map<String, String> options, List<String> extra) throws Exception {
        long maxRecords = Long.parseLong(options.getOrDefault("max-records", "0"));
        long idleMillis = Long.parseLong(options.getOrDefault("idle-timeout-ms", "10000"));
        long totalMillis = Long.parseLong(options.getOrDefault("timeout-ms", "600000"));
        Path offsets;
        if (options.containsKey("offsets")) {
            offsets = Path.of(options.get("offsets"));
        } else {
            offsets = Files.createTempFile("walcast-debezium-offsets", ".dat");
            offsets.toFile().deleteOnExit();
        }
        Properties props = settings(options, extra, offsets);
        Writer out =
                new BufferedWriter(
                        new OutputStreamWriter(
                                options.containsKey("output")
                                        ? new FileOutputStream(options.get("output"))
                                        : new FileOutputStream(java.io.FileDescriptor.out),
                                StandardCharsets.UTF_8),
                        1 << 16);
        State state = new State(maxRecords);

        DebeziumEngine.ChangeConsumer<ChangeEvent<String, String>> consumer =
                new DebeziumEngine.ChangeConsumer<>() {
                    @Override
                    public void handleBatch(
                            List<ChangeEvent<String, String>> records,
                            DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer)
                            throws InterruptedException {
                        try {
                            synchronized (state) {
                                for (ChangeEvent<String, String> record : records) {
                                    if (state.full()) {
                                        break;
                                    }
                                    write(out, record);
                                    state.written++;
                                    if (!record.destination().startsWith(HEARTBEAT_TOPIC)) {
                                        state.lastRecordNanos = System.nanoTime();
                                    }
                                }
                                out.flush();
                            }
                        } catch (IOException e) {
                            state.error = "writing a record: " + e;
                            return;
                        }
                        for (ChangeEvent<String, String> record : records) {
                            committer.markProcessed(record);
                        }
                        committer.markBatchFinished();
                    }

                    @Override
                    public boolean supportsTombstoneEvents() {
                        return true;
                    }
                };

        DebeziumEngine<ChangeEvent<String, String>> engine =
                DebeziumEngine.create(Json.class)
                        .using(props)
                        .using(
                                new DebeziumEngine.ConnectorCallback() {
                                    @Override
                                    public void pollingStarted() {
                                        state.lastRecordNanos = System.nanoTime();
                                        state.polling = true;
                                    }
                                })
                        .using(
                                (success, message, error) -> {
                                    if (!success && state.error == null) {
                                        state.error =
                                                message + (error == null ? "" : ": " + describe(error));
                                    }
                                    state.finished = true;
                                })
                        .notifying(consumer)
                        .build();

        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(totalMillis);
        int status = 0;
        String reason;
        while (true) {
            if (state.error != null) {
                reason = "error";
                status = 1;
                break;
            }
            if (state.full()) {
                reason = "max-records";
                break;
            }
            if (state.finished) {
                reason = "engine stopped";
                break;
            }
            long now = System.nanoTime();
            if (state.polling && now - state.lastRecordNanos > TimeUnit.MILLISECONDS.toNanos(idleMillis)) {
                reason = "idle";
                break;
            }
            if (now > deadline) {
                reason = "timeout";
                status = 3;
                break;
            }
            Thread.sleep(50);
        }
        try {
            engine.close();
        } catch (IllegalStateException alreadyStopped) {
            // a failed engine has shut itself down
        }
        executor.shutdown();
        if (!executor.awaitTermination(60, TimeUnit.SECONDS)) {
            System.err.println("debezium-reference: the engine did not stop within 60 s");
            status = status == 0 ? 4 : status;
        }
        synchronized (state) {
            out.flush();
            if (options.containsKey("output")) {
                out.close();
            }
        }
        if (state.error != null) {
            System.err.println("debezium-reference: connector failed: " + state.error);
            status = 1;
        }
        System.err.printf("debezium-reference: %d records, stopped by %s%n", state.written, reason);
        return status;
    }

    private static String describe(Throwable error) {
        StringBuilder text = new StringBuilder(error.toString());
        for (Throwable cause = error.getCause(); cause != null && cause != cause.getCause(); cause = cause.getCause()) {
            text.append(" <- ").append(cause);
        }
        return text.toString();
    }

    private static void write(Writer out, ChangeEvent<String, String> record) throws IOException {
        out.write("{\"topic\":");
        quote(out, record.destination());
        out.write(",\"key\":");
        out.write(record.key() == null ? "null" : record.key());
        out.write(",\"value\":");
        out.write(record.value() == null ? "null" : record.value());
        out.write("}\n");
    }

    private static void quote(Writer out, String text) throws IOException {
        out.write('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '"' || c == '\\') {
                out.write('\\');
                out.write(c);
            } else if (c < 0x20) {
                out.write(String.format("\\u%04x", (int) c));
            } else {
                out.write(c);
            }
        }
        out.write('"');
    }
}
