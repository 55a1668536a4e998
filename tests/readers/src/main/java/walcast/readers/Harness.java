package walcast.readers;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.File;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.math.BigDecimal;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.sql.Types;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import com.alibaba.fastjson2.JSONWriter;
import com.alibaba.otter.canal.protocol.FlatMessage;
import com.aliyun.dts.subscribe.clients.formats.avro.Record;
import com.aliyun.dts.subscribe.clients.record.DefaultUserRecord;
import com.aliyun.dts.subscribe.clients.record.RecordField;
import com.aliyun.dts.subscribe.clients.record.RecordSchema;
import com.aliyun.dts.subscribe.clients.record.RowImage;
import com.aliyun.dts.subscribe.clients.record.value.BinaryEncodingObject;
import com.aliyun.dts.subscribe.clients.record.value.DateTime;
import com.aliyun.dts.subscribe.clients.record.value.DecimalNumeric;
import com.aliyun.dts.subscribe.clients.record.value.FloatNumeric;
import com.aliyun.dts.subscribe.clients.record.value.IntegerNumeric;
import com.aliyun.dts.subscribe.clients.record.value.NoneValue;
import com.aliyun.dts.subscribe.clients.record.value.StringValue;
import com.aliyun.dts.subscribe.clients.record.value.TextEncodingObject;
import com.aliyun.dts.subscribe.clients.record.value.UnixTimestamp;
import com.aliyun.dts.subscribe.clients.record.value.Value;
import com.aliyun.dts.subscribe.clients.recordgenerator.AvroDeserializer;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.formats.common.TimestampFormat;
import org.apache.flink.formats.json.canal.CanalJsonDecodingFormat;
import org.apache.flink.formats.json.debezium.DebeziumJsonDecodingFormat;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.table.connector.format.ProjectableDecodingFormat;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.data.ArrayData;
import org.apache.flink.table.data.DecimalData;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.ArrayType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.utils.LogicalTypeParser;
import org.apache.flink.table.types.utils.TypeConversions;
import org.apache.flink.util.Collector;
import org.apache.flink.util.SimpleUserCodeClassLoader;
import org.apache.flink.util.UserCodeClassLoader;
import org.apache.kafka.common.TopicPartition;

/**
 * Feeds walcast's messages to the vendors' own readers and prints what each understood.
 *
 * <p>One JVM serves a whole test session. Each request is one JSON line on stdin:
 * {@code {"reader": ..., "input": path, "output": path, "options": {...}}}. The harness reads
 * every message of {@code input} (one per line: JSON text for canal, base64 for DTS Avro),
 * writes one JSON line per message to {@code output} (what the reader understood, or
 * {@code {"error": "..."}} when it rejected the message), then answers on stdout with one
 * line {@code {"ok": true, "read": n, "failed": m}} (or {@code {"ok": false, "error": ...}} for
 * a bad request). Logging of the libraries goes to stderr.
 *
 * <p>Readers:
 *
 * <ul>
 *   <li>{@code flink-canal}: Flink's {@link CanalJsonDecodingFormat} (the {@code canal-json}
 *       format of Flink SQL) with the physical row type {@code options.rowType} (Flink SQL type
 *       text, {@code ROW<...>}) and the metadata {@code database}, {@code table},
 *       {@code event-timestamp}, {@code ingestion-timestamp}, {@code pk-names}. Output:
 *       {@code {"rows": [{"kind": "+I", "fields": [...], "meta": {...}}]}} with every field
 *       rendered by its Flink type (see {@link #flinkValue}).
 *   <li>{@code flink-debezium}: Flink's {@link DebeziumJsonDecodingFormat} (the {@code
 *       debezium-json} format of Flink SQL, {@code DebeziumJsonDeserializationSchema}, schema
 *       include off) likewise, with the metadata {@code source.database}, {@code
 *       source.schema}, {@code source.table}, {@code source.timestamp}. An empty line is a
 *       Kafka tombstone (a null value), which the format skips.
 *   <li>{@code canal-flatmessage}: {@code JSON.parseObject(message, FlatMessage.class)} with
 *       fastjson2, as canal 1.1.8's Kafka client reads its topics. Values stay canal's
 *       strings, except binary columns (sqlType BLOB, BINARY, VARBINARY, LONGVARBINARY), which
 *       canal's client adapter turns into bytes with {@code value.getBytes(ISO_8859_1)}: they
 *       are rendered as the hex of those bytes.
 *   <li>{@code dts-sdk}: the DTS subscription SDK's {@link AvroDeserializer} and {@link
 *       DefaultUserRecord} (operation, schema fields, before and after images as the SDK's
 *       {@link Value}s, see {@link #dtsValue}).
 *   <li>{@code avro-generic}: Apache Avro Java's GenericDatumReader with {@code
 *       options.schema} (the vendor's Record.avsc), in a class loader holding only the Avro
 *       jars of {@code options.avroClasspath} (see {@code walcast.readers.avro.GenericReader}).
 * </ul>
 */
public final class Harness {
    private static final JSONWriter.Feature[] WRITE = {JSONWriter.Feature.WriteMapNullValue};

    private Harness() {}

    public static void main(String[] args) throws Exception {
        // Library log lines must never reach the protocol stream.
        PrintStream protocol = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader requests = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = requests.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JSONObject answer = new JSONObject();
            try {
                JSONObject request = JSON.parseObject(line);
                int[] counts = run(request);
                answer.put("ok", true);
                answer.put("read", counts[0]);
                answer.put("failed", counts[1]);
            } catch (Throwable t) {
                answer.put("ok", false);
                answer.put("error", describe(t));
            }
            protocol.println(answer.toJSONString());
        }
    }

    private static int[] run(JSONObject request) throws Exception {
        String reader = request.getString("reader");
        String input = request.getString("input");
        String output = request.getString("output");
        JSONObject options = request.getJSONObject("options");
        if (options == null) {
            options = new JSONObject();
        }
        switch (reader) {
            case "flink-canal":
                return lines(input, output, new FlinkReader(options.getString("rowType"),
                        new CanalJsonDecodingFormat(null, null, false, TimestampFormat.SQL), FlinkReader.CANAL));
            case "flink-debezium":
                return lines(input, output, new FlinkReader(options.getString("rowType"),
                        new DebeziumJsonDecodingFormat(false, false, TimestampFormat.SQL), FlinkReader.DEBEZIUM));
            case "canal-flatmessage":
                return lines(input, output, Harness::flatMessage);
            case "dts-sdk":
                return lines(input, output, Harness::dtsRecord);
            case "avro-generic":
                return avroGeneric(options, input, output);
            default:
                throw new IllegalArgumentException("unknown reader " + reader);
        }
    }

    interface MessageReader {
        Object read(String message) throws Exception;
    }

    private static int[] lines(String input, String output, MessageReader reader) throws Exception {
        int read = 0;
        int failed = 0;
        try (BufferedReader in = Files.newBufferedReader(Paths.get(input), StandardCharsets.UTF_8);
                BufferedWriter out = Files.newBufferedWriter(Paths.get(output), StandardCharsets.UTF_8)) {
            String line;
            while ((line = in.readLine()) != null) {
                Object result;
                try {
                    result = reader.read(line);
                    read++;
                } catch (Throwable t) {
                    JSONObject error = new JSONObject();
                    error.put("error", describe(t));
                    result = error;
                    failed++;
                }
                out.write(JSON.toJSONString(result, WRITE));
                out.write('\n');
            }
        }
        return new int[] {read, failed};
    }

    static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (sb.length() > 0) {
                sb.append(" <- ");
            }
            String message = String.valueOf(c.getMessage());
            if (message.length() > 300) {
                message = message.substring(0, 300) + "...";
            }
            sb.append(c.getClass().getName()).append(": ").append(message);
            if (c.getCause() == c) {
                break;
            }
        }
        return sb.toString();
    }

    // ---------------------------------------------------------------- Flink canal-json

    /** A Flink JSON changelog format (canal-json, debezium-json) with its metadata. */
    static final class FlinkReader implements MessageReader {
        static final List<String> CANAL =
                List.of("database", "table", "event-timestamp", "ingestion-timestamp", "pk-names");
        static final List<String> DEBEZIUM =
                List.of("source.database", "source.schema", "source.table", "source.timestamp");
        final List<String> metadata;
        final DeserializationSchema<RowData> schema;
        final List<LogicalType> types = new ArrayList<>();
        final int physical;

        FlinkReader(String rowType, ProjectableDecodingFormat<DeserializationSchema<RowData>> format,
                List<String> metadata) throws Exception {
            this.metadata = metadata;
            RowType row = (RowType) LogicalTypeParser.parse(rowType, Harness.class.getClassLoader());
            DataType physicalType = TypeConversions.fromLogicalToDataType(row);
            Map<String, DataType> readable = format.listReadableMetadata();
            format.applyReadableMetadata(metadata);
            int[][] projection = new int[row.getFieldCount()][];
            for (int i = 0; i < projection.length; i++) {
                projection[i] = new int[] {i};
            }
            schema = format.createRuntimeDecoder(new Context(), physicalType, projection);
            schema.open(new Init());
            types.addAll(row.getChildren());
            physical = types.size();
            for (String key : metadata) {
                types.add(readable.get(key).getLogicalType());
            }
        }

        @Override
        public Object read(String message) throws Exception {
            List<RowData> rows = new ArrayList<>();
            schema.deserialize(message.getBytes(StandardCharsets.UTF_8), new Collector<RowData>() {
                @Override
                public void collect(RowData record) {
                    rows.add(record);
                }

                @Override
                public void close() {}
            });
            JSONArray out = new JSONArray();
            for (RowData row : rows) {
                if (row.getArity() != types.size()) {
                    throw new IllegalStateException("row arity " + row.getArity() + " != " + types.size());
                }
                List<Object> fields = new ArrayList<>();
                Map<String, Object> meta = new LinkedHashMap<>();
                for (int i = 0; i < types.size(); i++) {
                    Object value = flinkValue(row, i, types.get(i));
                    if (i < physical) {
                        fields.add(value);
                    } else {
                        meta.put(metadata.get(i - physical), value);
                    }
                }
                Map<String, Object> item = new LinkedHashMap<>();
                item.put("kind", row.getRowKind().shortString());
                item.put("fields", fields);
                item.put("meta", meta);
                out.add(item);
            }
            JSONObject result = new JSONObject();
            result.put("rows", out);
            return result;
        }
    }

    /**
     * A Flink internal value, rendered unambiguously by its type: BOOLEAN as a JSON bool;
     * TINYINT..BIGINT as a number; FLOAT/DOUBLE as {@code "f32:<bits hex>"}/{@code
     * "f64:<bits hex>"}; DECIMAL as its plain text with the type's scale; CHAR/VARCHAR as the
     * string; BINARY/VARBINARY as hex; DATE as epoch days; TIME as milliseconds of the day;
     * TIMESTAMP/TIMESTAMP_LTZ as epoch microseconds (a string {@code "<micros>+<nanos>n"} if
     * the value has sub-microsecond nanos); ARRAY as a list; null as null.
     */
    static Object flinkValue(RowData row, int pos, LogicalType type) {
        if (row.isNullAt(pos)) {
            return null;
        }
        switch (type.getTypeRoot()) {
            case BOOLEAN:
                return row.getBoolean(pos);
            case TINYINT:
                return (long) row.getByte(pos);
            case SMALLINT:
                return (long) row.getShort(pos);
            case INTEGER:
            case DATE:
            case TIME_WITHOUT_TIME_ZONE:
                return (long) row.getInt(pos);
            case BIGINT:
                return row.getLong(pos);
            case FLOAT:
                return String.format("f32:%08x", Float.floatToRawIntBits(row.getFloat(pos)));
            case DOUBLE:
                return String.format("f64:%016x", Double.doubleToRawLongBits(row.getDouble(pos)));
            case DECIMAL: {
                org.apache.flink.table.types.logical.DecimalType d =
                        (org.apache.flink.table.types.logical.DecimalType) type;
                DecimalData value = row.getDecimal(pos, d.getPrecision(), d.getScale());
                return value.toBigDecimal().toPlainString();
            }
            case CHAR:
            case VARCHAR:
                return row.getString(pos).toString();
            case BINARY:
            case VARBINARY:
                return hex(row.getBinary(pos));
            case TIMESTAMP_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE: {
                TimestampData ts = row.getTimestamp(pos, 9);
                long micros = Math.addExact(Math.multiplyExact(ts.getMillisecond(), 1000L), ts.getNanoOfMillisecond() / 1000);
                int nanos = ts.getNanoOfMillisecond() % 1000;
                return nanos == 0 ? (Object) micros : micros + "+" + nanos + "n";
            }
            case ARRAY: {
                ArrayData array = row.getArray(pos);
                LogicalType element = ((ArrayType) type).getElementType();
                ArrayData.ElementGetter getter = ArrayData.createElementGetter(element);
                List<Object> out = new ArrayList<>();
                for (int i = 0; i < array.size(); i++) {
                    out.add(array.isNullAt(i) ? null
                            : flinkValue(GenericRowData.of(getter.getElementOrNull(array, i)), 0, element));
                }
                return out;
            }
            case ROW: {
                List<LogicalType> fields = type.getChildren();
                RowData nested = row.getRow(pos, fields.size());
                List<Object> out = new ArrayList<>();
                for (int i = 0; i < fields.size(); i++) {
                    out.add(flinkValue(nested, i, fields.get(i)));
                }
                return out;
            }
            default:
                throw new IllegalArgumentException("no rendering for Flink type " + type);
        }
    }

    static final class Context implements DynamicTableSource.Context {
        @Override
        @SuppressWarnings("unchecked")
        public <T> TypeInformation<T> createTypeInformation(DataType producedDataType) {
            return (TypeInformation<T>) TypeInformation.of(RowData.class);
        }

        @Override
        @SuppressWarnings("unchecked")
        public <T> TypeInformation<T> createTypeInformation(LogicalType producedLogicalType) {
            return (TypeInformation<T>) TypeInformation.of(RowData.class);
        }

        @Override
        public DynamicTableSource.DataStructureConverter createDataStructureConverter(DataType producedDataType) {
            throw new UnsupportedOperationException("not needed by canal-json or debezium-json");
        }
    }

    static final class Init implements DeserializationSchema.InitializationContext {
        @Override
        public MetricGroup getMetricGroup() {
            throw new UnsupportedOperationException("no metrics in the harness");
        }

        @Override
        public UserCodeClassLoader getUserCodeClassLoader() {
            return SimpleUserCodeClassLoader.create(Harness.class.getClassLoader());
        }
    }

    // ---------------------------------------------------------------- canal FlatMessage

    static Object flatMessage(String message) {
        FlatMessage m = JSON.parseObject(message, FlatMessage.class);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", m.getId());
        out.put("database", m.getDatabase());
        out.put("table", m.getTable());
        out.put("pkNames", m.getPkNames());
        out.put("isDdl", m.getIsDdl());
        out.put("type", m.getType());
        out.put("es", m.getEs());
        out.put("ts", m.getTs());
        out.put("sql", m.getSql());
        out.put("gtid", m.getGtid());
        out.put("sqlType", m.getSqlType());
        out.put("mysqlType", m.getMysqlType());
        out.put("data", flatRows(m.getData(), m.getSqlType()));
        out.put("old", flatRows(m.getOld(), m.getSqlType()));
        return out;
    }

    private static List<Object> flatRows(List<Map<String, String>> rows, Map<String, Integer> sqlTypes) {
        if (rows == null) {
            return null;
        }
        List<Object> out = new ArrayList<>();
        for (Map<String, String> row : rows) {
            if (row == null) {
                out.add(null);
                continue;
            }
            Map<String, Object> values = new LinkedHashMap<>();
            for (Map.Entry<String, String> e : row.entrySet()) {
                String value = e.getValue();
                Integer sqlType = sqlTypes == null ? null : sqlTypes.get(e.getKey());
                if (value != null && sqlType != null && isBinary(sqlType)) {
                    values.put(e.getKey(), hex(value.getBytes(StandardCharsets.ISO_8859_1)));
                } else {
                    values.put(e.getKey(), value);
                }
            }
            out.add(values);
        }
        return out;
    }

    private static boolean isBinary(int sqlType) {
        return sqlType == Types.BLOB || sqlType == Types.BINARY || sqlType == Types.VARBINARY
                || sqlType == Types.LONGVARBINARY;
    }

    // ---------------------------------------------------------------- DTS subscription SDK

    private static final AvroDeserializer DTS_DESERIALIZER = new AvroDeserializer();

    static Object dtsRecord(String line) {
        byte[] datum = Base64.getDecoder().decode(line.trim());
        Record record = DTS_DESERIALIZER.deserialize(datum);
        DefaultUserRecord user = new DefaultUserRecord(new TopicPartition("walcast", 0), 0L, record, null);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("op", String.valueOf(user.getOperationType()));
        out.put("id", user.getId());
        out.put("sourceTimestamp", user.getSourceTimestamp());
        out.put("objectName", String.valueOf(record.getObjectName()));
        RecordSchema schema = user.getSchema();
        List<Object> fields = new ArrayList<>();
        if (schema != null) {
            out.put("database", schema.getDatabaseName().isPresent() ? schema.getDatabaseName().get() : null);
            out.put("schema", schema.getSchemaName().isPresent() ? schema.getSchemaName().get() : null);
            out.put("table", schema.getTableName().isPresent() ? schema.getTableName().get() : null);
            out.put("schemaIdentifier", schema.getSchemaIdentifier());
            for (RecordField f : schema.getFields()) {
                Map<String, Object> field = new LinkedHashMap<>();
                field.put("name", f.getFieldName());
                field.put("type", f.getRawDataTypeNum());
                field.put("primary", f.isPrimary());
                fields.add(field);
            }
        }
        out.put("fields", fields);
        out.put("before", dtsImage(user.getBeforeImage()));
        out.put("after", dtsImage(user.getAfterImage()));
        return out;
    }

    private static Object dtsImage(RowImage image) {
        if (image == null) {
            return null;
        }
        List<Object> out = new ArrayList<>();
        for (Value<?> value : image.getValues()) {
            out.add(dtsValue(value));
        }
        return out;
    }

    /**
     * An SDK {@link Value}, rendered by its class: {@code {"int": text}}, {@code {"dec": plain
     * text}}, {@code {"float": Java text of the double}}, {@code {"str": text, "charset": ...}},
     * {@code {"unix": seconds, "micro": micro}}, {@code {"datetime": {...segments}}}, {@code
     * {"obj": ObjectType, "hex"|"text": ...}}, {@code {"none": true}}, else {@code {"other":
     * class, "text": toString()}}; SQL NULL as null.
     */
    static Object dtsValue(Value<?> value) {
        if (value == null) {
            return null;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        if (value instanceof IntegerNumeric) {
            out.put("int", ((IntegerNumeric) value).getData().toString());
        } else if (value instanceof DecimalNumeric) {
            BigDecimal d = ((DecimalNumeric) value).getData();
            out.put("dec", d == null ? null : d.toPlainString());
        } else if (value instanceof FloatNumeric) {
            out.put("float", Double.toString(((FloatNumeric) value).getData()));
        } else if (value instanceof StringValue) {
            StringValue s = (StringValue) value;
            out.put("str", s.toString());
            out.put("charset", s.getCharset());
        } else if (value instanceof UnixTimestamp) {
            UnixTimestamp ts = (UnixTimestamp) value;
            out.put("unix", ts.getTimestampSec());
            out.put("micro", ts.getMicro());
        } else if (value instanceof DateTime) {
            DateTime dt = (DateTime) value;
            Map<String, Object> segments = new LinkedHashMap<>();
            segments.put("year", dt.isSet(DateTime.SEG_YEAR) ? dt.getYear() : null);
            segments.put("month", dt.isSet(DateTime.SEG_MONTH) ? dt.getMonth() : null);
            segments.put("day", dt.isSet(DateTime.SEG_DAY) ? dt.getDay() : null);
            segments.put("hour", dt.isSet(DateTime.SEG_HOUR) ? dt.getHour() : null);
            segments.put("minute", dt.isSet(DateTime.SEG_MINITE) ? dt.getMinute() : null);
            segments.put("second", dt.isSet(DateTime.SEG_SECOND) ? dt.getSecond() : null);
            segments.put("nanos", dt.isSet(DateTime.SEG_NAONS) ? dt.getNaons() : null);
            // the SDK sets a TimestampWithTimeZone's zone without marking its segment
            segments.put("timezone", dt.getTimeZone());
            out.put("datetime", segments);
        } else if (value instanceof BinaryEncodingObject) {
            BinaryEncodingObject b = (BinaryEncodingObject) value;
            out.put("obj", String.valueOf(b.getObjectType()));
            out.put("hex", hex(b.getData()));
        } else if (value instanceof TextEncodingObject) {
            TextEncodingObject t = (TextEncodingObject) value;
            out.put("obj", String.valueOf(t.getObjectType()));
            out.put("text", t.getData());
        } else if (value instanceof NoneValue) {
            out.put("none", true);
        } else {
            out.put("other", value.getClass().getSimpleName());
            out.put("text", value.toString());
        }
        return out;
    }

    // ---------------------------------------------------------------- Avro GenericDatumReader

    private static Method genericReader;

    private static int[] avroGeneric(JSONObject options, String input, String output) throws Exception {
        if (genericReader == null) {
            List<URL> urls = new ArrayList<>();
            for (String entry : options.getString("avroClasspath").split(File.pathSeparator)) {
                urls.add(new File(entry).toURI().toURL());
            }
            ClassLoader loader = new URLClassLoader(urls.toArray(new URL[0]), ClassLoader.getPlatformClassLoader());
            Class<?> reader = Class.forName("walcast.readers.avro.GenericReader", true, loader);
            genericReader = reader.getMethod("readAll", String.class, String.class, String.class);
        }
        return (int[]) genericReader.invoke(null, options.getString("schema"), input, output);
    }

    // ---------------------------------------------------------------- helpers

    static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            sb.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return sb.toString();
    }

    static String hex(ByteBuffer buffer) {
        if (buffer == null) {
            return null;
        }
        ByteBuffer b = buffer.duplicate();
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return hex(bytes);
    }
}
