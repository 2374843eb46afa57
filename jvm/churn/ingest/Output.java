package churn.ingest;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.Platform;

/** Where a record's values go (CsvSource's readers): one row, or one position of a batch of Arrow vectors. */
interface Output {
    void putNull(int ordinal);

    void putString(int ordinal, byte[] src, int off, int len);

    void putLong(int ordinal, long value);

    void putInt(int ordinal, int value);

    /** One UnsafeRow a record (the row reader). */
    final class Row implements Output {
        final UnsafeRowWriter writer;

        Row(int fields) {
            writer = new UnsafeRowWriter(fields, 64 * fields);
        }

        void start() {
            writer.reset();
            writer.zeroOutNullBytes();
        }

        @Override
        public void putNull(int ordinal) {
            writer.setNullAt(ordinal);
        }

        /** What {@code UnsafeWriter.write(int, byte[], int, int)} does, with an array copy: cheaper for a field's few
         *  bytes than the copy through Unsafe. */
        @Override
        public void putString(int ordinal, byte[] src, int off, int len) {
            int rounded = (len + 7) & ~7;
            writer.grow(rounded);
            int at = writer.cursor();
            byte[] row = writer.getBuffer();
            if (rounded > len) Platform.putLong(row, at + rounded - 8, 0L);   // the last word's padding
            System.arraycopy(src, off, row, at - Platform.BYTE_ARRAY_OFFSET, len);
            writer.increaseCursor(len);
            writer.setOffsetAndSizeFromPreviousCursor(ordinal, at);
            writer.increaseCursor(rounded - len);
        }

        @Override
        public void putLong(int ordinal, long value) {
            writer.write(ordinal, value);
        }

        @Override
        public void putInt(int ordinal, int value) {
            writer.write(ordinal, value);
        }
    }

    /**
     * Batches of Arrow vectors (the columnar reader): the form the RAPIDS Accelerator copies to the GPU buffer by
     * buffer, where rows are copied into columns value by value. Each batch has vectors of its own: a consumer may keep
     * a reference to a batch's buffers after asking for the next one (the plugin does, until it has copied them), so
     * the reader only releases its own reference, and a buffer is freed when its last holder releases it.
     */
    final class Arrow implements Output {
        /** One allocator for every reader of the JVM, never closed (see above). */
        private static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);
        private final StructType schema;
        private FieldVector[] vectors;
        private int row;

        Arrow(StructType schema) {
            this.schema = schema;
        }

        /** New vectors for a batch of up to {@code rows} records; the previous batch's are released. */
        void start(int rows) {
            release();
            vectors = new FieldVector[schema.size()];
            for (int i = 0; i < vectors.length; i++) {
                String name = schema.fields()[i].name();
                DataType type = schema.fields()[i].dataType();
                if (type == DataTypes.StringType) {
                    VarCharVector v = new VarCharVector(name, ROOT);
                    v.allocateNew(16L * rows, rows);
                    vectors[i] = v;
                } else if (type == DataTypes.LongType) {
                    BigIntVector v = new BigIntVector(name, ROOT);
                    v.allocateNew(rows);
                    vectors[i] = v;
                } else if (type == DataTypes.IntegerType) {
                    IntVector v = new IntVector(name, ROOT);
                    v.allocateNew(rows);
                    vectors[i] = v;
                } else {
                    throw new IllegalArgumentException("no Arrow vector for " + type);
                }
            }
            row = 0;
        }

        /** The values put go to the next position. */
        void nextRow() {
            row++;
        }

        /** The batch of the rows put since {@code start}. */
        ColumnarBatch batch() {
            ColumnVector[] columns = new ColumnVector[vectors.length];
            for (int i = 0; i < vectors.length; i++) {
                vectors[i].setValueCount(row);
                columns[i] = new ArrowColumnVector(vectors[i]);
            }
            return new ColumnarBatch(columns, row);
        }

        void release() {
            if (vectors == null) return;
            for (FieldVector v : vectors) v.close();
            vectors = null;
        }

        @Override
        public void putNull(int ordinal) {
            vectors[ordinal].setNull(row);
        }

        @Override
        public void putString(int ordinal, byte[] src, int off, int len) {
            ((VarCharVector) vectors[ordinal]).setSafe(row, src, off, len);
        }

        @Override
        public void putLong(int ordinal, long value) {
            ((BigIntVector) vectors[ordinal]).setSafe(row, value);
        }

        @Override
        public void putInt(int ordinal, int value) {
            ((IntVector) vectors[ordinal]).setSafe(row, value);
        }
    }
}
