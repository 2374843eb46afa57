package churn.generate;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
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
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

import java.math.BigInteger;
import java.util.Collections;
import java.util.Map;
import java.util.Set;

/**
 * The generator as a Spark data source: {@code spark.read.format("churn.generate.Source").option("spec", json)}
 * (jobs/stages/generate.py builds the spec). Like {@code spark.range}, rows are computed where they are read, one
 * partition per range of customer numbers; nothing is shuffled, and a row depends only on the spec and its
 * customer number.
 *
 * <p>Modes (spec "mode"):
 * <ul>
 * <li>{@code events}, {@code customers}: the CSV records in file order, partition i = file i (customers
 * floor(i * N / files) .. floor((i + 1) * N / files) - 1), one row per 64 customers: lines (their records,
 * each but the last followed by a line feed; the file's header before its first record), records (how many),
 * and, on the file's last row only, file_counts: what the file holds, as the file's index, its records, the
 * records of rejected customers' events (cascade), then the records of each defect code 1, 2, ...
 * (space-separated whole numbers). Many records a row rather than one: the text writer appends one line feed
 * a row, so the bytes are the same, and every per-row cost of Spark's (the row, the writer's stream calls, the
 * observed metrics) is paid ~700 times less for events;</li>
 * <li>{@code truth}: customer_id, churn_probability, churned, rejected for customers 0 .. count - 1;</li>
 * <li>{@code latent}: logit_x (the churn model's score without its intercept) and n_pre_cutoff for customers
 * 0 .. count - 1 (the calibration of b0).</li>
 * </ul>
 */
public final class Source implements TableProvider {
    private static final StructType RECORDS = new StructType()
        .add("lines", DataTypes.StringType, false).add("records", DataTypes.IntegerType, false)
        .add("file_counts", DataTypes.StringType, true);
    private static final StructType TRUTH = new StructType()
        .add("customer_id", DataTypes.StringType, false).add("churn_probability", DataTypes.DoubleType, false)
        .add("churned", DataTypes.BooleanType, false).add("rejected", DataTypes.BooleanType, false);
    private static final StructType LATENT = new StructType()
        .add("logit_x", DataTypes.DoubleType, false).add("n_pre_cutoff", DataTypes.IntegerType, false);

    static StructType schemaOf(String mode) {
        switch (mode) {
            case "events": case "customers": return RECORDS;
            case "truth": return TRUTH;
            case "latent": return LATENT;
            default: throw new IllegalArgumentException("unknown generator mode " + mode);
        }
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return schemaOf(Spec.parse(spec(options)).mode);
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new GeneratedTable(spec(properties));
    }

    private static String spec(Map<String, String> options) {
        String json = options.get("spec");
        if (json == null) throw new IllegalArgumentException("churn.generate.Source needs option spec");
        return json;
    }

    static final class GeneratedTable implements Table, SupportsRead {
        private final String json;
        private final Spec spec;

        GeneratedTable(String json) {
            this.json = json;
            this.spec = Spec.parse(json);
        }

        @Override
        public String name() {
            return "generated " + spec.mode;
        }

        @Override
        @SuppressWarnings("deprecation")   // Spark 3.5 still asks every Table for it (columns() derives from it)
        public StructType schema() {
            return schemaOf(spec.mode);
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Collections.singleton(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return () -> new GeneratedScan(json, spec);
        }
    }

    static final class GeneratedScan implements Scan, Batch {
        private final String json;
        private final Spec spec;

        GeneratedScan(String json, Spec spec) {
            this.json = json;
            this.spec = spec;
        }

        @Override
        public StructType readSchema() {
            return schemaOf(spec.mode);
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            boolean files = spec.mode.equals("events") || spec.mode.equals("customers");
            long total = files ? spec.customers : spec.count;
            int parts = files ? spec.files : (int) Math.max(1, Math.min(spec.partitions, total));
            InputPartition[] out = new InputPartition[parts];
            BigInteger n = BigInteger.valueOf(total), p = BigInteger.valueOf(parts);
            for (int i = 0; i < parts; i++) {
                long lo = BigInteger.valueOf(i).multiply(n).divide(p).longValue();
                long hi = BigInteger.valueOf(i + 1).multiply(n).divide(p).longValue();
                out[i] = new Block(json, i, lo, hi);
            }
            return out;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return partition -> new Reader((Block) partition);
        }
    }

    /** Customers start .. end - 1; for the CSV modes, file number index. */
    static final class Block implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String json;
        final int index;
        final long start, end;

        Block(String json, int index, long start, long end) {
            this.json = json;
            this.index = index;
            this.start = start;
            this.end = end;
        }
    }

    static final class Reader implements PartitionReader<InternalRow>, Model.Sink {
        private final Block block;
        private final Model model;
        private final String mode;
        private static final int CHUNK = 64;     // customers a row
        private final Text chunk = new Text();   // the row's records
        private int inChunk;
        private final UnsafeRowWriter writer = new UnsafeRowWriter(3, 1024);  // one row, refilled by each next()
        private byte[] counts;   // the file's counts, after its last line
        private final long[] kinds;   // records per defect code
        private long records, cascade;
        private long next;
        private InternalRow row;

        Reader(Block block) {
            this.block = block;
            this.model = new Model(Spec.parse(block.json));
            this.mode = model.s.mode;
            this.kinds = new long[model.maxKindCode + 1];
            this.next = block.start;
        }

        @Override
        public boolean next() {
            if (mode.equals("events") || mode.equals("customers")) return nextLine();
            if (next >= block.end) return false;
            Customer c = model.customer(next++);
            row = mode.equals("truth")
                ? new GenericInternalRow(new Object[]{
                    UTF8String.fromString(c.customerId), c.churnProbability, c.churned, c.rejected})
                : new GenericInternalRow(new Object[]{c.logitX, c.nPreCutoff});
            return true;
        }

        /** The next customers' records (up to CHUNK of them, never past the block), written into the reader's
         *  one row: downstream operators that keep rows copy them, as with Spark's own file readers. */
        private boolean nextLine() {
            if (next >= block.end) return false;
            chunk.reset();
            inChunk = 0;
            long stop = Math.min(block.end, next + CHUNK);
            for (; next < stop; next++) {
                Customer c = model.customer(next);
                boolean first = next == block.start, last = next == block.end - 1;
                if (mode.equals("events")) model.events(c, first, last, this);
                else model.customers(c, first, last, this);
            }
            writer.reset();
            writer.zeroOutNullBytes();
            chunk.writeTo(writer, 0);
            writer.write(1, inChunk);
            if (counts != null) {
                writer.write(2, counts, 0, counts.length);
                counts = null;
            } else {
                writer.setNullAt(2);
            }
            row = writer.getRow();
            return true;
        }

        @Override
        public void record(Text line, int kind, boolean rejected, boolean last) {
            if (inChunk++ > 0) chunk.add('\n');
            chunk.add(line);
            records++;
            kinds[kind]++;
            if (rejected) cascade++;
            if (last) {
                StringBuilder b = new StringBuilder().append(block.index).append(' ').append(records).append(' ')
                    .append(cascade);
                for (int k = 1; k <= model.maxKindCode; k++) b.append(' ').append(kinds[k]);
                counts = b.toString().getBytes(java.nio.charset.StandardCharsets.US_ASCII);
            }
        }

        @Override
        public InternalRow get() {
            return row;
        }

        @Override
        public void close() {
        }
    }
}
