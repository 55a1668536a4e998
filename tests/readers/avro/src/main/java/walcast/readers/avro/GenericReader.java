package walcast.readers.avro;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Base64;
import java.util.Collection;
import java.util.Map;
import java.util.TreeMap;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;

/**
 * Apache Avro Java's {@link GenericDatumReader} over DTS Avro messages.
 *
 * <p>Runs in a class loader of its own (only Avro and its dependencies), called by
 * {@code walcast.readers.Harness} through {@link #readAll}. Each input line is one message, a
 * raw Avro binary datum of the vendor schema's top-level {@code Record} type in base64; each
 * output line is what the reader decoded, as JSON: records as objects with their fields in
 * schema order plus {@code "@type"} (the full name), enums as their symbol, bytes as
 * {@code {"@hex": "..."}}, doubles and floats as Java's round-trip text, longs and ints as
 * numbers. A datum that does not decode, or leaves bytes unread, gives
 * {@code {"error": "..."}}.
 */
public final class GenericReader {
    private GenericReader() {}

    /** Reads every message of {@code input} and writes one JSON line each to {@code output}. */
    public static int[] readAll(String schemaPath, String input, String output) throws Exception {
        Schema union = new Schema.Parser().parse(new File(schemaPath));
        Schema record = null;
        for (Schema s : union.getTypes()) {
            if (s.getFullName().equals("com.alibaba.dts.formats.avro.Record")) {
                record = s;
            }
        }
        if (record == null) {
            throw new IllegalArgumentException(schemaPath + " has no type com.alibaba.dts.formats.avro.Record");
        }
        GenericDatumReader<Object> reader = new GenericDatumReader<>(record);
        int read = 0;
        int failed = 0;
        try (BufferedReader in = Files.newBufferedReader(Paths.get(input), StandardCharsets.UTF_8);
                BufferedWriter out = Files.newBufferedWriter(Paths.get(output), StandardCharsets.UTF_8)) {
            String line;
            BinaryDecoder decoder = null;
            while ((line = in.readLine()) != null) {
                StringBuilder sb = new StringBuilder();
                try {
                    byte[] datum = Base64.getDecoder().decode(line.trim());
                    decoder = DecoderFactory.get().binaryDecoder(datum, decoder);
                    Object value = reader.read(null, decoder);
                    if (!decoder.isEnd()) {
                        throw new IllegalStateException("bytes left after the Record datum");
                    }
                    render(value, sb);
                    read++;
                } catch (Exception e) {
                    sb.setLength(0);
                    sb.append("{\"error\":");
                    string(e.getClass().getName() + ": " + e.getMessage(), sb);
                    sb.append('}');
                    failed++;
                }
                out.write(sb.toString());
                out.write('\n');
            }
        }
        return new int[] {read, failed};
    }

    private static void render(Object value, StringBuilder sb) {
        if (value == null) {
            sb.append("null");
        } else if (value instanceof GenericRecord) {
            GenericRecord r = (GenericRecord) value;
            sb.append("{\"@type\":");
            string(r.getSchema().getFullName(), sb);
            for (Schema.Field f : r.getSchema().getFields()) {
                sb.append(',');
                string(f.name(), sb);
                sb.append(':');
                render(r.get(f.pos()), sb);
            }
            sb.append('}');
        } else if (value instanceof GenericData.EnumSymbol) {
            string(value.toString(), sb);
        } else if (value instanceof CharSequence) {
            string(value.toString(), sb);
        } else if (value instanceof ByteBuffer) {
            ByteBuffer b = ((ByteBuffer) value).duplicate();
            StringBuilder hex = new StringBuilder();
            while (b.hasRemaining()) {
                hex.append(String.format("%02x", b.get() & 0xff));
            }
            sb.append("{\"@hex\":\"").append(hex).append("\"}");
        } else if (value instanceof Double || value instanceof Float) {
            string(value.toString(), sb);
        } else if (value instanceof Number || value instanceof Boolean) {
            sb.append(value);
        } else if (value instanceof Map) {
            Map<String, Object> sorted = new TreeMap<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                sorted.put(e.getKey().toString(), e.getValue());
            }
            sb.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> e : sorted.entrySet()) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                string(e.getKey(), sb);
                sb.append(':');
                render(e.getValue(), sb);
            }
            sb.append('}');
        } else if (value instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object item : (Collection<?>) value) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                render(item, sb);
            }
            sb.append(']');
        } else {
            throw new IllegalStateException("unexpected datum " + value.getClass());
        }
    }

    private static void string(String s, StringBuilder sb) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20 || (c >= 0xd800 && c <= 0xdfff)) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        sb.append('"');
    }
}
