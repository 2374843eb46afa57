package churn.ingest;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.io.compress.CompressionCodecFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * CSV files read in byte ranges that start and end on record boundaries, so a file of any size is read by many
 * tasks, each record once, with its exact record number (jobs/stages/ingest.py drives it; docs/etl.md, "Parsing").
 *
 * <p>Two modes (option {@code mode}), both over option {@code files}, a JSON list of {path, name, size}:
 * <ul>
 * <li>{@code scan}: one row per chunk of {@code chunkBytes} bytes of each file (a compressed file is one chunk,
 * read whole): its quotes, physical lines and blank lines, and for each quote parity it may start at, its first
 * record boundary and how many records start in it ({@code ChunkScan});</li>
 * <li>{@code records}: one row per record of the splits in option {@code splits} (a JSON list of [file, start,
 * end, first record number, counted]; end -1: to the end of the stream): the first {@code columns} fields as strings
 * (null when empty), then source_file, record_number, record_lines (the physical lines the record spans),
 * field_count, raw (the record's text, only where the field count is wrong or a field swallowed whole records)
 * and swallowed (the first column whose value holds a line feed followed by a whole record's separators); with
 * option {@code columnar} true, the same rows in batches of Arrow vectors of up to {@code batchRows} rows.</li>
 * </ul>
 * A split marked counted (1) is a whole file: its bytes are counted as the parser reads them, as the pre-pass would
 * count them ({@code ChunkScan}), into the {@code Tally} that option {@code tally} names.
 * A split that starts at a file's start skips the file's first record, its header (checked beforehand).
 */
public final class CsvSource implements TableProvider {
    static final StructType SCAN = new StructType()
        .add("file", DataTypes.IntegerType, false).add("chunk", DataTypes.IntegerType, false)
        .add("start", DataTypes.LongType, false).add("end", DataTypes.LongType, false)
        .add("quotes", DataTypes.LongType, false).add("lines", DataTypes.LongType, false)
        .add("blank", DataTypes.LongType, false)
        .add("first0", DataTypes.LongType, false).add("first1", DataTypes.LongType, false)
        .add("records0", DataTypes.LongType, false).add("records1", DataTypes.LongType, false);
    static final String[] TRAILER = {"source_file", "record_number", "record_lines", "field_count", "raw",
        "swallowed"};

    static StructType recordSchema(String[] columns) {
        StructType t = new StructType();
        for (String c : columns) t = t.add(c, DataTypes.StringType, true);
        return t.add("source_file", DataTypes.StringType, false).add("record_number", DataTypes.LongType, false)
            .add("record_lines", DataTypes.IntegerType, false).add("field_count", DataTypes.IntegerType, false)
            .add("raw", DataTypes.StringType, true).add("swallowed", DataTypes.StringType, true);
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return new Options(options).schema();
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new CsvTable(new Options(properties));
    }

    /** The source's options, parsed once on the driver; travels to the tasks. */
    static final class Options implements Serializable {
        private static final long serialVersionUID = 1L;
        final String mode;
        final String[] paths, names;
        final long[] sizes;
        final String[] columns;
        final long chunkBytes;
        final long[][] splits;
        final String tally;
        final boolean columnar;     // records as batches of Arrow vectors, of up to batchRows rows
        final int batchRows;

        Options(Map<String, String> o) {
            mode = required(o, "mode");
            columnar = Boolean.parseBoolean(o.getOrDefault("columnar", "false")) && mode.equals("records");
            batchRows = Integer.parseInt(o.getOrDefault("batchRows", "65536"));
            if (batchRows <= 0) throw new IllegalArgumentException("batchRows must be positive");
            try {
                ObjectMapper json = new ObjectMapper();
                JsonNode files = json.readTree(required(o, "files"));
                paths = new String[files.size()];
                names = new String[files.size()];
                sizes = new long[files.size()];
                for (int i = 0; i < files.size(); i++) {
                    paths[i] = files.get(i).get("path").asText();
                    names[i] = files.get(i).get("name").asText();
                    sizes[i] = files.get(i).get("size").asLong();
                }
                if (mode.equals("records")) {
                    JsonNode cols = json.readTree(required(o, "columns"));
                    columns = new String[cols.size()];
                    for (int i = 0; i < cols.size(); i++) columns[i] = cols.get(i).asText();
                    JsonNode s = json.readTree(required(o, "splits"));
                    splits = new long[s.size()][];
                    for (int i = 0; i < s.size(); i++) {
                        JsonNode split = s.get(i);
                        if (split.size() != 5) {
                            throw new IllegalArgumentException("churn.ingest.CsvSource: a split is [file, start, end, "
                                + "first record number, counted], got " + split);
                        }
                        splits[i] = new long[]{split.get(0).asLong(), split.get(1).asLong(), split.get(2).asLong(),
                            split.get(3).asLong(), split.get(4).asLong()};
                        if (splits[i][4] != 0 && (splits[i][1] != 0 || !o.containsKey("tally"))) {
                            throw new IllegalArgumentException("churn.ingest.CsvSource: a counted split must start "
                                + "at its file's start, and option tally name its tally");
                        }
                    }
                    tally = o.get("tally");
                    chunkBytes = 0;
                } else if (mode.equals("scan")) {
                    columns = new String[0];
                    splits = new long[0][];
                    tally = null;
                    chunkBytes = Long.parseLong(required(o, "chunkBytes"));
                    if (chunkBytes <= 0) throw new IllegalArgumentException("chunkBytes must be positive");
                } else {
                    throw new IllegalArgumentException("churn.ingest.CsvSource: unknown mode " + mode
                        + " (scan or records)");
                }
            } catch (IOException e) {
                throw new IllegalArgumentException("churn.ingest.CsvSource: an option is not JSON: "
                    + e.getMessage(), e);
            }
        }

        private static String required(Map<String, String> o, String key) {
            String v = o.get(key);
            if (v == null) throw new IllegalArgumentException("churn.ingest.CsvSource needs option " + key);
            return v;
        }

        StructType schema() {
            return mode.equals("scan") ? SCAN : recordSchema(columns);
        }
    }

    static final class CsvTable implements Table, SupportsRead {
        private final Options options;

        CsvTable(Options options) {
            this.options = options;
        }

        @Override
        public String name() {
            return "csv " + options.mode + " of " + options.paths.length + " files";
        }

        @Override
        @SuppressWarnings("deprecation")   // Spark 3.5 still asks every Table for it
        public StructType schema() {
            return options.schema();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Collections.singleton(TableCapability.BATCH_READ);
        }

        @Override
        public org.apache.spark.sql.connector.read.ScanBuilder newScanBuilder(CaseInsensitiveStringMap o) {
            return () -> new CsvScan(options);
        }
    }

    static final class CsvScan implements Scan, Batch {
        private final Options options;

        CsvScan(Options options) {
            this.options = options;
        }

        @Override
        public StructType readSchema() {
            return options.schema();
        }

        @Override
        public String description() {
            return "churn.ingest.CsvSource " + options.mode;
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            List<InputPartition> out = new ArrayList<>();
            if (options.mode.equals("scan")) {
                Configuration conf = hadoopConf();
                CompressionCodecFactory codecs = new CompressionCodecFactory(conf);
                for (int f = 0; f < options.paths.length; f++) {
                    long size = options.sizes[f];
                    if (codecs.getCodec(new Path(options.paths[f])) != null || size == 0) {
                        out.add(new Part(out.size(), f, 0, -1, 0, false));
                        continue;
                    }
                    int chunk = 0;
                    for (long s = 0; s < size; s += options.chunkBytes) {
                        out.add(new Part(out.size(), f, s, Math.min(size, s + options.chunkBytes), chunk++, false));
                    }
                }
            } else {
                for (long[] s : options.splits) out.add(new Part(out.size(), (int) s[0], s[1], s[2], s[3], s[4] != 0));
            }
            return out.toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            Tally tally = options.tally == null ? null : Tally.forId(SparkSession.active().sparkContext(), options.tally);
            return new Factory(options, new SerializableConfiguration(hadoopConf()), tally);
        }

        private static Configuration hadoopConf() {
            return SparkSession.active().sessionState().newHadoopConf();
        }
    }

    /** A chunk (scan: {@code extra} = its index in its file) or a split (records: {@code extra} = the record number
     *  of its first record; {@code counted}: a whole file, counted as it is read); {@code end} -1: to the end of the
     *  stream. */
    static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        final int index, file;
        final long start, end, extra;
        final boolean counted;

        Part(int index, int file, long start, long end, long extra, boolean counted) {
            this.index = index;
            this.file = file;
            this.start = start;
            this.end = end;
            this.extra = extra;
            this.counted = counted;
        }
    }

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Options options;
        private final SerializableConfiguration conf;
        private final Tally tally;

        Factory(Options options, SerializableConfiguration conf, Tally tally) {
            this.options = options;
            this.conf = conf;
            this.tally = tally;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            Part part = (Part) partition;
            return options.mode.equals("scan") ? new ScanReader(options, conf.value(), part)
                : new RecordReader(options, conf.value(), part, tally);
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return options.columnar;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new ColumnarRecordReader(options, conf.value(), (Part) partition, tally);
        }
    }

    /** The file at {@code path} opened at byte {@code at} (decompressed, and then only at 0, if its name says it is
     *  compressed, as Hadoop's text readers decide). */
    static InputStream open(Configuration conf, String path, long at) throws IOException {
        Path p = new Path(path);
        FileSystem fs = p.getFileSystem(conf);
        FSDataInputStream raw = fs.open(p, 1 << 20);
        CompressionCodec codec = new CompressionCodecFactory(conf).getCodec(p);
        if (codec != null) {
            if (at != 0) throw new IllegalArgumentException(path + " is compressed: it is read whole");
            return codec.createInputStream(raw);
        }
        if (at > 0) raw.seek(at);
        return raw;
    }

    /** An I/O failure with the file's path in its message, so the driver's error can name the file. */
    static IOException failure(String path, Exception e) {
        return new IOException("churn.ingest.CsvSource could not read " + path + ": " + e, e);
    }

    static final class ScanReader implements PartitionReader<InternalRow> {
        private final Options options;
        private final Configuration conf;
        private final Part part;
        private boolean done;
        private InternalRow row;

        ScanReader(Options options, Configuration conf, Part part) {
            this.options = options;
            this.conf = conf;
            this.part = part;
        }

        @Override
        public boolean next() throws IOException {
            if (done) return false;
            done = true;
            String path = options.paths[part.file];
            ChunkScan s;
            try (InputStream in = open(conf, path, Math.max(part.start - 1, 0))) {
                s = ChunkScan.scan(in, part.start, part.end, part.end >= 0 && part.end >= options.sizes[part.file]);
            } catch (IOException | RuntimeException e) {
                throw failure(path, e);
            }
            UnsafeRowWriter w = new UnsafeRowWriter(SCAN.size(), 0);
            w.reset();
            w.zeroOutNullBytes();
            w.write(0, part.file);
            w.write(1, (int) part.extra);
            w.write(2, part.start);
            w.write(3, part.end);
            w.write(4, s.quotes);
            w.write(5, s.lines);
            w.write(6, s.blank);
            w.write(7, s.first[0]);
            w.write(8, s.first[1]);
            w.write(9, s.records[0]);
            w.write(10, s.records[1]);
            row = w.getRow();
            return true;
        }

        @Override
        public InternalRow get() {
            return row;
        }

        @Override
        public void close() {
        }
    }

    /** The records of one split, one at a time, for either reader: parsed, then their values put to an
     *  {@code Output} (the record's fields, then the trailer: source_file ... swallowed). */
    static final class Records {
        private final String path;
        private final byte[] name;
        private final int columns;
        private final InputStream in;
        private final Counted counted;      // the whole file's count, when the split is counted
        private final RecordParser parser;
        private final Values values = new Values();
        private final byte[][] columnNames;
        private long recordNumber;
        private boolean headerPending;

        Records(Options options, Configuration conf, Part part, Tally tally) {
            this.path = options.paths[part.file];
            this.name = options.names[part.file].getBytes(StandardCharsets.UTF_8);
            this.columns = options.columns.length;
            this.columnNames = new byte[columns][];
            for (int c = 0; c < columns; c++) columnNames[c] = options.columns[c].getBytes(StandardCharsets.UTF_8);
            this.recordNumber = part.extra;
            this.headerPending = part.start == 0;
            InputStream opened;
            try {
                opened = open(conf, path, part.start);
            } catch (IOException e) {
                throw new RuntimeException(failure(path, e));
            }
            this.counted = part.counted ? new Counted(opened, part.file, part.end, tally) : null;
            this.in = part.counted ? counted : opened;
            this.parser = new RecordParser(in, part.start, part.end);
        }

        /** Parses the next record; false once the split is read (a counted file's count then goes to its tally). */
        boolean next() throws IOException {
            try {
                if (headerPending) {
                    headerPending = false;
                    if (!parser.next()) return done();
                }
                if (!parser.next()) return done();
            } catch (IOException | RuntimeException e) {
                throw failure(path, e);
            }
            return true;
        }

        /** The record parsed last, put to {@code out}. */
        void put(Output out) {
            RecordParser p = parser;
            int swallowed = -1;
            int n = Math.min(p.fields, columns);
            for (int c = 0; c < n; c++) {
                boolean lf = values.decode(p.buf, p.fieldStart[c], p.fieldEnd[c], p.quoted, p.ascii);
                if (values.isNull) {
                    out.putNull(c);
                } else {
                    out.putString(c, values.src, values.off, values.len);
                }
                if (lf && swallowed < 0 && values.holdsWholeRecord(columns - 1)) swallowed = c;
            }
            for (int c = n; c < columns; c++) out.putNull(c);
            out.putString(columns, name, 0, name.length);
            out.putLong(columns + 1, recordNumber++);
            out.putInt(columns + 2, p.lines);
            out.putInt(columns + 3, p.fields);
            if (p.fields != columns || swallowed >= 0) {
                byte[] raw = Bytes.utf8(p.buf, p.recStart, p.recEnd - p.recStart);
                out.putString(columns + 4, raw, 0, raw.length);
            } else {
                out.putNull(columns + 4);
            }
            if (swallowed >= 0) {
                out.putString(columns + 5, columnNames[swallowed], 0, columnNames[swallowed].length);
            } else {
                out.putNull(columns + 5);
            }
        }

        private boolean done() {
            if (counted != null) counted.tally();
            return false;
        }

        void close() throws IOException {
            in.close();
        }
    }

    static final class RecordReader implements PartitionReader<InternalRow> {
        private final Records records;
        private final Output.Row out;

        RecordReader(Options options, Configuration conf, Part part, Tally tally) {
            records = new Records(options, conf, part, tally);
            out = new Output.Row(options.columns.length + TRAILER.length);
        }

        @Override
        public boolean next() throws IOException {
            if (!records.next()) return false;
            out.start();
            records.put(out);
            return true;
        }

        @Override
        public InternalRow get() {
            return out.writer.getRow();
        }

        @Override
        public void close() throws IOException {
            records.close();
        }
    }

    /** The records of a split in batches of up to {@code batchRows} rows of Arrow vectors (option columnar). */
    static final class ColumnarRecordReader implements PartitionReader<ColumnarBatch> {
        private final Records records;
        private final Output.Arrow out;
        private final int batchRows;
        private ColumnarBatch batch;
        private boolean done;

        ColumnarRecordReader(Options options, Configuration conf, Part part, Tally tally) {
            records = new Records(options, conf, part, tally);
            out = new Output.Arrow(options.schema());
            batchRows = options.batchRows;
        }

        @Override
        public boolean next() throws IOException {
            if (done) return false;
            out.start(batchRows);
            int rows = 0;
            while (rows < batchRows) {
                if (!records.next()) {
                    done = true;
                    break;
                }
                records.put(out);
                out.nextRow();
                rows++;
            }
            if (rows == 0) {
                out.release();
                return false;
            }
            batch = out.batch();
            return true;
        }

        @Override
        public ColumnarBatch get() {
            return batch;
        }

        @Override
        public void close() throws IOException {
            out.release();
            records.close();
        }
    }

    /** A whole file's stream, counted ({@code ChunkScan}, from the file's start) as the parser reads it: up to
     *  {@code end} (the file's size as listed) or, for a compressed file ({@code end} -1), to the stream's end. */
    static final class Counted extends FilterInputStream {
        private final ChunkScan scan = ChunkScan.fromFileStart();
        private final int file;
        private final long end;
        private final Tally tally;
        private long read;
        private boolean tallied;

        Counted(InputStream in, int file, long end, Tally tally) {
            super(in);
            this.file = file;
            this.end = end < 0 ? Long.MAX_VALUE : end;
            this.tally = tally;
        }

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = in.read(b, off, len);
            if (n > 0) {
                int counted = (int) Math.min(n, end - read);
                if (counted > 0) scan.feed(b, off, counted);
                read += n;
            }
            return n;
        }

        @Override
        public long skip(long n) {
            throw new UnsupportedOperationException("a counted stream is read, not skipped");
        }

        /** The file's count, {file, records (the header included), lines, blank lines}, into the tally; once. */
        void tally() {
            if (tallied) return;
            tallied = true;
            scan.finish(true);
            tally.add(new long[]{file, scan.records[0], scan.lines, scan.blank});
        }
    }
}
