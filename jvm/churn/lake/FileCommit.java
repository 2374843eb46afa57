package churn.lake;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.SparkSession;
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
 * ({@code jobs/lake/delta_io.py}, {@code overwrite_as_files}) writes the files, counts and describes them, then calls
 * {@link #overwrite}. Delta's optimistic transaction does the rest: a new table gets its metadata and protocol, a
 * changed schema replaces the old one (as {@code overwriteSchema} does), and a concurrent commit fails this one.
 * Only unpartitioned tables.
 */
public final class FileCommit {
    private FileCommit() {
    }

    /**
     * Commits {@code paths} (relative to {@code table}, URI-encoded as Delta's log holds them) as the whole table.
     *
     * @param sizes      each file's length in bytes
     * @param times      each file's modification time (ms since the epoch)
     * @param stats      each file's statistics as Delta's JSON (numRecords, minValues, maxValues, nullCount)
     * @param schemaJson the files' schema, every field nullable (as Delta keeps a table's schema)
     * @param properties table properties for a table this commit creates (an existing table keeps its own)
     * @param rows       the rows of all files, for the commit's metrics
     * @return the version committed
     */
    public static long overwrite(SparkSession spark, String table, String[] paths, long[] sizes, long[] times,
                                 String[] stats, String schemaJson, Map<String, String> properties, long rows) {
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
        long bytes = 0;
        scala.collection.immutable.Map<String, String> noPartition = scalaMap(new HashMap<>());
        for (int i = 0; i < paths.length; i++) {
            actions.add(new AddFile(paths[i], noPartition, sizes[i], times[i], true, stats[i], null, null,
                    Option.empty(), Option.empty(), Option.empty()));
            bytes += sizes[i];
        }
        Map<String, SQLMetric> metrics = new HashMap<>();
        metrics.put("numFiles", metric(spark, "number of files written", paths.length));
        metrics.put("numOutputRows", metric(spark, "number of output rows", rows));
        metrics.put("numOutputBytes", metric(spark, "written output", bytes));
        txn.registerSQLMetrics(spark, scalaMap(metrics));
        Option<Seq<String>> partitionBy = Option.apply(seq(new ArrayList<String>()));
        return txn.commit(seq(actions),
                new DeltaOperations.Write(SaveMode.Overwrite, partitionBy, Option.empty(), Option.empty()));
    }

    /** The table's properties (its metadata's configuration); null where no table is at {@code table}. */
    public static Map<String, String> configuration(SparkSession spark, String table) {
        OptimisticTransaction txn = DeltaLog.forTable(spark, table).startTransaction();
        return txn.readVersion() < 0 ? null : new HashMap<>(JavaConverters.mapAsJavaMap(txn.metadata().configuration()));
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
