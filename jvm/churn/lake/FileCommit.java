package churn.lake;

import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.column.statistics.Statistics;
import org.apache.parquet.format.converter.ParquetMetadataConverter;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.PrimitiveType;

import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.delta.DeltaConfigs$;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.actions.Format;
import org.apache.spark.sql.delta.actions.Metadata;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.execution.metric.SQLMetrics;

import scala.Option;
import scala.collection.JavaConverters;
import scala.collection.Seq;

/**
 * Parquet files already written under a Delta table's folder, committed as the table's new contents: one Delta
 * commit of the same shape as Delta's own overwrite ({@code WRITE}, mode {@code Overwrite}): every file of the
 * current version removed, the given files added, with their statistics and the write's metrics (files, rows,
 * bytes) in the commit's information.
 *
 * <p>Why: the RAPIDS Accelerator 25.04 (the newest served here) has no Delta writer for Spark 3.5, so a Delta write
 * runs on the CPU, its rows moved off the GPU first; a plain Parquet write runs on the GPU. The caller
 * ({@code jobs/lake/delta_io.py}, {@code overwrite_as_files}) writes the files, then calls {@link #overwrite}, which
 * counts and describes them from their footers. Delta's optimistic transaction does the rest: a new table gets its
 * metadata and protocol, a changed schema replaces the old one (as {@code overwriteSchema} does), and a concurrent
 * commit fails this one.
 * Only unpartitioned tables.
 */
public final class FileCommit {
    private FileCommit() {
    }

    /**
     * Commits the Parquet files {@code names} of {@code table}'s sub-folder {@code folder} as the whole table, in one
     * transaction: the table's metadata first (a new table: {@code properties} over the session's defaults for new
     * tables; an existing one keeps its own), so that each file's statistics ({@link #stats}, from its footer) are
     * of the columns that metadata names, as Delta's writer would choose them ({@link #statsColumns}).
     *
     * @param sizes       each file's length in bytes
     * @param times       each file's modification time (ms since the epoch)
     * @param schemaJson  the files' schema, every field nullable (as Delta keeps a table's schema)
     * @param longestStr  strings longer than this get no min/max
     * @return {version committed, rows of all files (their footers' row counts)}
     */
    public static long[] overwrite(SparkSession spark, String table, String folder, String[] names, long[] sizes,
                                   long[] times, String schemaJson, Map<String, String> properties, int longestStr)
            throws java.io.IOException {
        OptimisticTransaction txn = DeltaLog.forTable(spark, table).startTransaction();
        if (txn.readVersion() < 0) {
            txn.updateMetadataForNewTable(new Metadata(UUID.randomUUID().toString(), null, null,
                    new Format("parquet", scalaMap(new HashMap<>())), schemaJson, seq(new ArrayList<String>()),
                    scalaMap(properties), Option.apply((Object) System.currentTimeMillis())));
        } else {
            Metadata current = txn.metadata();
            if (!current.partitionColumns().isEmpty()) {
                throw new IllegalArgumentException(table + " is partitioned: a file commit writes only "
                        + "unpartitioned tables");
            }
            if (!current.schemaString().equals(schemaJson)) {
                txn.updateMetadata(new Metadata(current.id(), current.name(), current.description(),
                        current.format(), schemaJson, current.partitionColumns(), current.configuration(),
                        current.createdTime()), false);
            }
        }
        List<Action> actions = new ArrayList<>();
        for (AddFile old : JavaConverters.seqAsJavaList(txn.filterFiles())) {
            actions.add(old.remove());
        }
        Configuration conf = spark.sparkContext().hadoopConfiguration();
        ObjectMapper json = new ObjectMapper();
        String[] columns = statsColumns(txn.metadata());
        scala.collection.immutable.Map<String, String> noPartition = scalaMap(new HashMap<>());
        long rows = 0;
        long bytes = 0;
        for (int i = 0; i < names.length; i++) {
            ParquetMetadata footer = ParquetFileReader.readFooter(conf, new Path(new Path(table, folder), names[i]),
                    ParquetMetadataConverter.NO_FILTER);
            Map<String, Object> stats = stats(footer, columns, longestStr);
            rows += (Long) stats.get("numRecords");
            bytes += sizes[i];
            actions.add(new AddFile(folder + "/" + names[i], noPartition, sizes[i], times[i], true,
                    json.writeValueAsString(stats), null, null, Option.empty(), Option.empty(), Option.empty()));
        }
        Map<String, SQLMetric> metrics = new HashMap<>();
        metrics.put("numFiles", metric(spark, "number of files written", names.length));
        metrics.put("numOutputRows", metric(spark, "number of output rows", rows));
        metrics.put("numOutputBytes", metric(spark, "written output", bytes));
        txn.registerSQLMetrics(spark, scalaMap(metrics));
        Option<Seq<String>> partitionBy = Option.apply(seq(new ArrayList<String>()));
        long version = txn.commit(seq(actions),
                new DeltaOperations.Write(SaveMode.Overwrite, partitionBy, Option.empty(), Option.empty()));
        return new long[] {version, rows};
    }

    /**
     * The top-level columns Delta keeps statistics of under {@code metadata}: its {@code dataSkippingStatsColumns},
     * else its first {@code dataSkippingNumIndexedCols} (32 by default; -1: all), read by Delta's own accessors.
     */
    static String[] statsColumns(Metadata metadata) {
        List<String> names = new ArrayList<>(Arrays.asList(metadata.schema().fieldNames()));
        Option<String> named = DeltaConfigs$.MODULE$.DATA_SKIPPING_STATS_COLUMNS().fromMetaData(metadata);
        if (named.isDefined()) {
            List<String> wanted = new ArrayList<>();
            for (String c : named.get().split(",")) {
                if (names.contains(c.trim())) {
                    wanted.add(c.trim());
                }
            }
            return wanted.toArray(new String[0]);
        }
        int indexed = (Integer) DeltaConfigs$.MODULE$.DATA_SKIPPING_NUM_INDEXED_COLS().fromMetaData(metadata);
        return (indexed < 0 ? names : names.subList(0, Math.min(indexed, names.size()))).toArray(new String[0]);
    }

    static Map<String, Object> stats(ParquetMetadata footer, String[] columns, int longestString) {
        long rows = 0;
        Map<String, Statistics<?>> merged = new LinkedHashMap<>();
        Map<String, PrimitiveType> types = new HashMap<>();
        Map<String, Boolean> complete = new HashMap<>();   // every row group's chunk of the column has statistics
        for (String c : columns) {
            complete.put(c, true);
        }
        for (BlockMetaData block : footer.getBlocks()) {
            rows += block.getRowCount();
            for (ColumnChunkMetaData chunk : block.getColumns()) {
                String name = chunk.getPath().toDotString();
                if (!complete.containsKey(name)) {
                    continue;
                }
                Statistics<?> st = chunk.getStatistics();
                if (st == null || st.isEmpty() || !st.isNumNullsSet()) {
                    complete.put(name, false);
                    continue;
                }
                types.put(name, chunk.getPrimitiveType());
                merged.computeIfAbsent(name, k -> Statistics.createStats(chunk.getPrimitiveType())).mergeStatistics(st);
            }
        }
        Map<String, Object> low = new LinkedHashMap<>();
        Map<String, Object> high = new LinkedHashMap<>();
        Map<String, Object> nulls = new LinkedHashMap<>();
        for (String c : columns) {
            Statistics<?> st = merged.get(c);
            if (!complete.get(c) || (st == null && rows > 0)) {
                continue;   // a chunk without statistics: nothing is known of the column
            }
            nulls.put(c, st == null ? 0L : st.getNumNulls());
            if (st == null || !st.hasNonNullValue()) {
                continue;
            }
            Object lo = value(types.get(c), st.genericGetMin(), longestString);
            Object hi = value(types.get(c), st.genericGetMax(), longestString);
            if (lo != null && hi != null) {
                low.put(c, lo);
                high.put(c, hi);
            }
        }
        Map<String, Object> stats = new LinkedHashMap<>();
        stats.put("numRecords", rows);
        if (rows > 0) {
            stats.put("minValues", low);
            stats.put("maxValues", high);
            stats.put("nullCount", nulls);
        }
        return stats;
    }

    /** A footer's min or max as Delta's statistics hold it, or null where Delta's are not the footer's. */
    private static Object value(PrimitiveType type, Object v, int longestString) {
        LogicalTypeAnnotation logical = type.getLogicalTypeAnnotation();
        switch (type.getPrimitiveTypeName()) {
            case BINARY:
                if (!(logical instanceof LogicalTypeAnnotation.StringLogicalTypeAnnotation)) {
                    return null;
                }
                String text = ((Binary) v).toStringUsingUTF8();
                return text.codePointCount(0, text.length()) <= longestString ? text : null;
            case INT32:
                if (logical instanceof LogicalTypeAnnotation.DateLogicalTypeAnnotation) {
                    return LocalDate.ofEpochDay((Integer) v).toString();
                }
                return logical == null || logical instanceof LogicalTypeAnnotation.IntLogicalTypeAnnotation ? v : null;
            case INT64:
                return logical == null || logical instanceof LogicalTypeAnnotation.IntLogicalTypeAnnotation ? v : null;
            case FLOAT:
            case DOUBLE:
                double d = ((Number) v).doubleValue();
                return Double.isFinite(d) ? v : null;
            default:   // INT96 timestamps, booleans, fixed-length binary
                return null;
        }
    }

    private static SQLMetric metric(SparkSession spark, String name, long value) {
        SQLMetric m = SQLMetrics.createMetric(spark.sparkContext(), name);
        m.set(value);
        return m;
    }

    private static <T> Seq<T> seq(List<T> items) {
        return JavaConverters.asScalaBuffer(items).toList();
    }

    private static <K, V> scala.collection.immutable.Map<K, V> scalaMap(Map<K, V> map) {
        return JavaConverters.mapAsScalaMap(map).toMap(scala.Predef.<scala.Tuple2<K, V>>$conforms());
    }
}
