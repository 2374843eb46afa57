package churn.lake;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.column.statistics.Statistics;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.format.converter.ParquetMetadataConverter;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.ParquetReader;
import org.apache.parquet.hadoop.example.GroupReadSupport;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.GroupType;
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
import org.apache.spark.sql.delta.actions.RemoveFile;
import org.apache.spark.sql.delta.actions.SetTransaction;
import org.apache.spark.sql.delta.util.FileNames;
import org.apache.spark.sql.delta.LogSegment;
import org.apache.spark.sql.delta.actions.Format;
import org.apache.spark.sql.delta.actions.Metadata;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.execution.metric.SQLMetrics;
import org.apache.spark.sql.types.DataType;

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
 * commit fails this one. {@link #replaceSlice} commits files as one slice ({@code column = 'value'}) of a table the
 * same way, as Delta's {@code replaceWhere} would, and {@link #appendOnce} appends them as Delta's idempotent append
 * ({@code txnAppId}, {@code txnVersion}) would.
 * Only unpartitioned tables.
 */
public final class FileCommit {
    private static final int FOOTER_THREADS = 16;

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
            txn.updateMetadataForNewTable(newTable(schemaJson, properties));
        } else {
            Metadata current = txn.metadata();
            if (!current.partitionColumns().isEmpty()) {
                throw new IllegalArgumentException(table + " is partitioned: a file commit writes only "
                        + "unpartitioned tables");
            }
            // Compared as types: Delta keeps the schema in its own JSON form (field keys in another order).
            if (!DataType.fromJson(current.schemaString()).equals(DataType.fromJson(schemaJson))) {
                txn.updateMetadata(new Metadata(current.id(), current.name(), current.description(),
                        current.format(), schemaJson, current.partitionColumns(), current.configuration(),
                        current.createdTime()), false);
            }
        }
        List<Action> actions = new ArrayList<>();
        for (AddFile old : tableFiles(txn)) {
            actions.add(old.remove());
        }
        long rows = added(spark, txn, table, folder, names, sizes, times, longestStr, actions, null);
        return new long[] {commit(spark, txn, actions, rows, null, Option.empty(), SaveMode.Overwrite), rows};
    }

    /**
     * Parquet files already written under {@code table}'s sub-folder {@code folder}, appended as Delta's writer appends
     * with {@code txnAppId} and {@code txnVersion}: where the table already records {@code appId} at
     * {@code txnVersion} or later, nothing is committed and the result is {read version, 0} (the caller removes the
     * files); otherwise one commit adds the files and records the version for the app id ({@code SetTransaction}), so
     * that a concurrent append of the same app id fails this one. A new table is created with the files' schema. Null
     * (nothing committed) where the table is partitioned or has another schema: the caller writes through Delta.
     *
     * @return {version committed (or read, where skipped), rows of the files added}, or null
     */
    public static long[] appendOnce(SparkSession spark, String table, String folder, String[] names, long[] sizes,
                                    long[] times, String schemaJson, String appId, long txnVersion, int longestStr)
            throws java.io.IOException {
        OptimisticTransaction txn = DeltaLog.forTable(spark, table).startTransaction();
        if (txn.readVersion() < 0) {
            txn.updateMetadataForNewTable(newTable(schemaJson, new HashMap<>()));
        } else if (!txn.metadata().partitionColumns().isEmpty()
                || !DataType.fromJson(txn.metadata().schemaString()).equals(DataType.fromJson(schemaJson))) {
            return null;
        }
        if (txn.txnVersion(appId) >= txnVersion) {
            return new long[] {txn.readVersion(), 0};
        }
        List<Action> actions = new ArrayList<>();
        actions.add(new SetTransaction(appId, txnVersion, Option.apply((Object) System.currentTimeMillis())));
        long rows = added(spark, txn, table, folder, names, sizes, times, longestStr, actions, null);
        return new long[] {commit(spark, txn, actions, rows, null, Option.empty(), SaveMode.Append), rows};
    }

    /** A new table's metadata: the schema, {@code properties} over the session's defaults for new tables. */
    private static Metadata newTable(String schemaJson, Map<String, String> properties) {
        return new Metadata(UUID.randomUUID().toString(), null, null, new Format("parquet", scalaMap(new HashMap<>())),
                schemaJson, seq(new ArrayList<String>()), scalaMap(properties),
                Option.apply((Object) System.currentTimeMillis()));
    }

    /**
     * Parquet files already written under {@code table}'s sub-folder {@code folder}, committed as the table's rows whose
     * {@code column} equals {@code value}, in one transaction: every file of that slice removed, the files added. The
     * same commit as Delta's own {@code replaceWhere} of {@code column = 'value'} makes ({@code WRITE}, mode
     * {@code Overwrite}, the predicate), without its scan of the slice's files for rows to keep: a file is the slice's
     * when its statistics say every row of it is (the column's min and max both {@code value}, no nulls), and kept
     * when they say none is (min and max one other value). Any other file (statistics of a range of values, or
     * none) could hold rows of both, which only Delta's own write can split: then nothing is committed and the
     * result is null, as it is for a table that does not exist, is partitioned, has another schema or keeps no
     * statistics of {@code column}; the caller writes through Delta instead. A written file with a row outside
     * the slice fails the commit (as Delta's replaceWhere refuses such rows).
     *
     * @return {version committed, rows of the files added}, or null (nothing committed)
     */
    public static long[] replaceSlice(SparkSession spark, String table, String folder, String[] names, long[] sizes,
                                      long[] times, String schemaJson, String column, String value,
                                      String predicate, int longestStr) throws java.io.IOException {
        OptimisticTransaction txn = DeltaLog.forTable(spark, table).startTransaction();
        List<AddFile> slice = sliceFiles(txn, schemaJson, column, value);
        if (slice == null) {
            return null;
        }
        List<Action> actions = new ArrayList<>();
        for (AddFile old : slice) {
            actions.add(old.remove());
        }
        long rows = added(spark, txn, table, folder, names, sizes, times, longestStr, actions, stats -> {
            if ((Long) stats.get("numRecords") > 0 && !value.equals(single(stats, column))) {
                throw new IllegalArgumentException("Data written out does not match replaceWhere '" + predicate
                        + "': a file holds rows whose " + column + " is not '" + value + "'");
            }
        });
        if (slice.isEmpty() && rows == 0) {
            return new long[] {txn.readVersion(), 0};   // as Delta: nothing to remove, nothing to add, no commit
        }
        return new long[] {commit(spark, txn, actions, rows, (long) slice.size(),
                Option.apply(predicate), SaveMode.Overwrite), rows};
    }

    /**
     * Adds to {@code actions} one {@code AddFile} per file {@code names} of {@code folder} that holds rows, its rows and
     * statistics (of the columns the transaction's table keeps them of) read from its footer, each statistics map
     * first given to {@code check} (if any); a file of no rows is deleted, as Delta's writer commits none. Returns
     * the files' rows.
     */
    private static long added(SparkSession spark, OptimisticTransaction txn, String table, String folder,
                              String[] names, long[] sizes, long[] times, int longestStr, List<Action> actions,
                              java.util.function.Consumer<Map<String, Object>> check) throws java.io.IOException {
        ObjectMapper json = new ObjectMapper();
        String[] columns = statsColumns(txn.metadata());
        Path dir = new Path(table, folder);
        List<ParquetMetadata> footers = footers(spark, dir, names);
        long rows = 0;
        for (int i = 0; i < names.length; i++) {
            Map<String, Object> stats = stats(footers.get(i), columns, longestStr);
            if ((Long) stats.get("numRecords") == 0) {
                // Spark's first task leaves a file even when it has no rows; Delta's writer commits none such.
                Path empty = new Path(dir, names[i]);
                empty.getFileSystem(spark.sessionState().newHadoopConf()).delete(empty, false);
                continue;
            }
            if (check != null) {
                check.accept(stats);
            }
            rows += (Long) stats.get("numRecords");
            actions.add(new AddFile(folder + "/" + names[i], scalaMap(new HashMap<>()), sizes[i], times[i], true,
                    json.writeValueAsString(stats), null, null, Option.empty(), Option.empty(), Option.empty()));
        }
        return rows;
    }

    /**
     * Commits {@code actions} as a {@code WRITE} in {@code mode} (with {@code predicate}, as a {@code replaceWhere}
     * records it), with the write's metrics (and the files removed, where given); returns the version committed.
     */
    private static long commit(SparkSession spark, OptimisticTransaction txn, List<Action> actions, long rows,
                               Long removed, Option<String> predicate, SaveMode mode) {
        long files = 0;
        long bytes = 0;
        for (Action action : actions) {
            if (action instanceof AddFile) {
                files++;
                bytes += ((AddFile) action).size();
            }
        }
        Map<String, SQLMetric> metrics = new HashMap<>();
        metrics.put("numFiles", metric(spark, "number of files written", files));
        metrics.put("numOutputRows", metric(spark, "number of output rows", rows));
        metrics.put("numOutputBytes", metric(spark, "written output", bytes));
        if (removed != null) {
            metrics.put("numRemovedFiles", metric(spark, "number of files removed", removed));
        }
        txn.registerSQLMetrics(spark, scalaMap(metrics));
        return txn.commit(seq(actions), new DeltaOperations.Write(mode,
                Option.apply(seq(new ArrayList<String>())), predicate, Option.empty()));
    }

    /** The files of the slice {@code column = value} of the transaction's table, or null where they are unknown. */
    private static List<AddFile> sliceFiles(OptimisticTransaction txn, String schemaJson, String column,
                                            String value) throws java.io.IOException {
        if (txn.readVersion() < 0) {
            return null;
        }
        Metadata current = txn.metadata();
        if (!current.partitionColumns().isEmpty()
                || !DataType.fromJson(current.schemaString()).equals(DataType.fromJson(schemaJson))
                || !Arrays.asList(statsColumns(current)).contains(column)) {
            return null;
        }
        ObjectMapper json = new ObjectMapper();
        List<AddFile> slice = new ArrayList<>();
        for (AddFile file : tableFiles(txn)) {
            String text = file.stats();
            Map<String, Object> stats;
            try {
                stats = text == null ? null : json.readValue(text, Map.class);
            } catch (java.io.IOException e) {
                return null;
            }
            Object rows = stats == null ? null : stats.get("numRecords");
            if (rows instanceof Number && ((Number) rows).longValue() == 0) {
                continue;   // holds no rows of any slice
            }
            String only = stats == null ? null : single(stats, column);
            if (only == null) {
                return null;
            }
            if (only.equals(value)) {
                slice.add(file);
            }
        }
        return slice;
    }

    /** Commit files of at most this many versions are replayed on the driver ({@link #tableFiles}). */
    private static final int REPLAYED_COMMITS = 32;

    /**
     * Every file of the transaction's table at its read version, with its statistics, the whole table marked read (a
     * concurrent commit that adds or removes a file fails this one). Where the version's log is a few commit files,
     * after a classic one-file checkpoint or none, they are replayed here on the driver with Delta's own action
     * parser (the checkpoint's adds, then each commit's adds less its removes): Delta's snapshot would run Spark jobs
     * over them (a scan of the log, a shuffle, a sort: seconds of a stage for a handful of files, and a table
     * overwritten once a run has a checkpoint from its tenth version on). Otherwise (a multi-part or V2 checkpoint, a
     * file with a deletion vector or row tracking, other kinds of log files) the snapshot's file list (one small row
     * per data file, collected on the driver).
     */
    static List<AddFile> tableFiles(OptimisticTransaction txn) throws java.io.IOException {
        List<AddFile> replayed = replayed(txn);
        if (replayed != null) {
            txn.readWholeTable();
            return replayed;
        }
        Map<String, AddFile> withStats = new LinkedHashMap<>();
        for (AddFile file : txn.snapshot().allFiles().collectAsList()) {
            withStats.put(file.path(), file);
        }
        List<AddFile> files = new ArrayList<>();
        for (AddFile file : JavaConverters.seqAsJavaList(txn.filterFiles())) {   // marks the whole table read
            files.add(withStats.getOrDefault(file.path(), file));
        }
        return files;
    }

    private static List<AddFile> replayed(OptimisticTransaction txn) throws java.io.IOException {
        if (txn.readVersion() < 0) {
            return new ArrayList<>();
        }
        LogSegment segment = txn.snapshot().logSegment();
        long checkpoint = segment.checkpointProvider().version();    // -1: none
        List<FileStatus> commits = new ArrayList<>(JavaConverters.seqAsJavaList(segment.deltas()));
        if (commits.size() > REPLAYED_COMMITS || commits.size() != segment.version() - checkpoint) {
            return null;
        }
        for (FileStatus commit : commits) {
            if (!FileNames.isDeltaFile(commit.getPath())) {
                return null;
            }
        }
        commits.sort((a, b) -> Long.compare(FileNames.deltaVersion(a.getPath()), FileNames.deltaVersion(b.getPath())));
        Map<String, AddFile> live = new LinkedHashMap<>();
        if (checkpoint >= 0) {
            List<AddFile> listed = checkpointFiles(txn, segment);
            if (listed == null) {
                return null;
            }
            for (AddFile add : listed) {
                live.put(add.path(), add);
            }
        }
        for (FileStatus commit : commits) {
            FileSystem fs = commit.getPath().getFileSystem(txn.deltaLog().newDeltaHadoopConf());
            try (BufferedReader lines = new BufferedReader(new InputStreamReader(fs.open(commit.getPath()),
                    StandardCharsets.UTF_8))) {
                for (String line = lines.readLine(); line != null; line = lines.readLine()) {
                    Action action = Action.fromJson(line);
                    if (action instanceof AddFile) {
                        AddFile add = (AddFile) action;
                        if (add.deletionVector() != null) {
                            return null;
                        }
                        live.put(add.path(), add);
                    } else if (action instanceof RemoveFile) {
                        live.remove(((RemoveFile) action).path());
                    }
                }
            }
        }
        return new ArrayList<>(live.values());
    }

    /** The fields of a checkpoint's add this replay carries; an add with any other set (a deletion vector, row
     *  tracking's ids, parsed statistics) is left to Delta's snapshot. */
    private static final Set<String> CHECKPOINT_ADD_FIELDS = new HashSet<>(Arrays.asList(
            "path", "partitionValues", "size", "modificationTime", "dataChange", "tags", "stats"));

    /**
     * The files a classic one-file checkpoint ({@code NNN.checkpoint.parquet}) of {@code segment} lists as added,
     * read on the driver (a few hundred bytes a file) and parsed by Delta's own action parser from each add's fields;
     * null for a multi-part or V2 checkpoint, or an add that sets a field other than {@code CHECKPOINT_ADD_FIELDS}.
     */
    private static List<AddFile> checkpointFiles(OptimisticTransaction txn, LogSegment segment)
            throws java.io.IOException {
        List<FileStatus> parts = JavaConverters.seqAsJavaList(segment.checkpointProvider().topLevelFiles());
        String name = String.format("%020d.checkpoint.parquet", segment.checkpointProvider().version());
        if (parts.size() != 1 || !parts.get(0).getPath().getName().equals(name)) {
            return null;
        }
        ObjectMapper json = new ObjectMapper();
        List<AddFile> added = new ArrayList<>();
        try (ParquetReader<Group> rows = ParquetReader.builder(new GroupReadSupport(), parts.get(0).getPath())
                .withConf(txn.deltaLog().newDeltaHadoopConf()).build()) {
            for (Group row = rows.read(); row != null; row = rows.read()) {
                if (!row.getType().containsField("add") || row.getFieldRepetitionCount("add") == 0) {
                    continue;
                }
                Map<String, Object> fields = addFields(row.getGroup("add", 0));
                if (fields == null) {
                    return null;
                }
                String action = json.writeValueAsString(Collections.singletonMap("add", fields));
                added.add((AddFile) Action.fromJson(action));
            }
        }
        return added;
    }

    /** A checkpoint add's set fields as its JSON action holds them; null if one is not a CHECKPOINT_ADD_FIELDS. */
    private static Map<String, Object> addFields(Group add) {
        Map<String, Object> fields = new LinkedHashMap<>();
        GroupType type = add.getType();
        for (int i = 0; i < type.getFieldCount(); i++) {
            String field = type.getFieldName(i);
            if (add.getFieldRepetitionCount(i) == 0) {
                continue;       // null
            }
            if (!CHECKPOINT_ADD_FIELDS.contains(field)) {
                return null;
            }
            switch (field) {
                case "size":
                case "modificationTime":
                    fields.put(field, add.getLong(i, 0));
                    break;
                case "dataChange":
                    fields.put(field, add.getBoolean(i, 0));
                    break;
                case "partitionValues":
                case "tags":
                    fields.put(field, stringMap(add.getGroup(i, 0)));
                    break;
                default:        // path, stats
                    fields.put(field, add.getString(i, 0));
            }
        }
        return fields;
    }

    /** A Parquet map of strings (a repeated key_value group of a key and an optional value) as a Java map. */
    private static Map<String, String> stringMap(Group map) {
        Map<String, String> out = new LinkedHashMap<>();
        for (int k = 0; k < map.getFieldRepetitionCount(0); k++) {
            Group entry = map.getGroup(0, k);
            out.put(entry.getString(0, 0), entry.getFieldRepetitionCount(1) == 0 ? null : entry.getString(1, 0));
        }
        return out;
    }

    /** The one value {@code column} takes in every row the statistics describe, or null if not known to be one. */
    @SuppressWarnings("unchecked")
    private static String single(Map<String, Object> stats, String column) {
        Object low = ((Map<String, Object>) stats.getOrDefault("minValues", new HashMap<>())).get(column);
        Object high = ((Map<String, Object>) stats.getOrDefault("maxValues", new HashMap<>())).get(column);
        Object nulls = ((Map<String, Object>) stats.getOrDefault("nullCount", new HashMap<>())).get(column);
        boolean noNulls = nulls instanceof Number && ((Number) nulls).longValue() == 0;
        return noNulls && low instanceof String && low.equals(high) ? (String) low : null;
    }

    /**
     * The footers of the files {@code names} of {@code folder}, in their order, read side by side (one at a time, a
     * write's hundreds of files took a second of the driver's time after every write).
     */
    static List<ParquetMetadata> footers(SparkSession spark, Path folder, String[] names) throws java.io.IOException {
        Configuration conf = spark.sparkContext().hadoopConfiguration();
        int threads = Math.max(1, Math.min(FOOTER_THREADS, names.length));
        ExecutorService pool = Executors.newFixedThreadPool(threads, runnable -> {
            Thread t = new Thread(runnable, "churn-file-commit-footers");
            t.setDaemon(true);
            return t;
        });
        try {
            List<Future<ParquetMetadata>> pending = new ArrayList<>();
            for (String name : names) {
                pending.add(pool.submit(() -> ParquetFileReader.readFooter(conf, new Path(folder, name),
                        ParquetMetadataConverter.NO_FILTER)));
            }
            List<ParquetMetadata> found = new ArrayList<>();
            for (Future<ParquetMetadata> f : pending) {
                found.add(f.get());
            }
            return found;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new java.io.InterruptedIOException("interrupted reading the footers of " + folder);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof java.io.IOException) {
                throw (java.io.IOException) cause;
            }
            throw new java.io.IOException("could not read a footer under " + folder, cause);
        } finally {
            pool.shutdownNow();
        }
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
