package churn.ingest;

import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.SparkContext;
import org.apache.spark.util.AccumulatorV2;

/**
 * The counts of the files read whole (CsvSource's {@code Counted}), per file index: {records that start in it (the
 * header included), physical lines, blank lines}, as the pre-pass would have counted them. A Spark accumulator: each
 * task's counts reach the driver with its result, and only a successful task's. A file counted twice with the same
 * counts (a task run again) is counted once; with different counts it is listed as a conflict.
 *
 * <p>The driver finds the tally of a read by the id its {@code tally} option names ({@link #forId}, when the scan is
 * planned) and takes it once the read's job is done ({@link #take}).
 */
public final class Tally extends AccumulatorV2<long[], Map<Integer, long[]>> {
    private static final long serialVersionUID = 1L;
    private static final Map<String, Tally> BY_ID = new ConcurrentHashMap<>();

    private final TreeMap<Integer, long[]> counts = new TreeMap<>();
    private final TreeSet<Integer> conflicts = new TreeSet<>();

    static Tally forId(SparkContext sc, String id) {
        return BY_ID.computeIfAbsent(id, k -> {
            Tally t = new Tally();
            sc.register(t, "churn.ingest.Tally " + k);
            return t;
        });
    }

    /** The tally of {@code id} as JSON ({"counts": {file: [records, lines, blank]}, "conflicts": [file...]}), and
     *  forgotten; null if no read of that id was planned. */
    public static String take(String id) throws JsonProcessingException {
        Tally t = BY_ID.remove(id);
        if (t == null) return null;
        synchronized (t) {
            return new ObjectMapper().writeValueAsString(Map.of("counts", t.counts, "conflicts", t.conflicts));
        }
    }

    @Override
    public synchronized boolean isZero() {
        return counts.isEmpty() && conflicts.isEmpty();
    }

    @Override
    public synchronized Tally copy() {
        Tally t = new Tally();
        t.counts.putAll(counts);
        t.conflicts.addAll(conflicts);
        return t;
    }

    @Override
    public synchronized void reset() {
        counts.clear();
        conflicts.clear();
    }

    /** {file index, records, lines, blank lines}. */
    @Override
    public synchronized void add(long[] v) {
        put((int) v[0], new long[]{v[1], v[2], v[3]});
    }

    @Override
    public synchronized void merge(AccumulatorV2<long[], Map<Integer, long[]>> other) {
        Tally o = (Tally) other;
        synchronized (o) {
            o.counts.forEach(this::put);
            conflicts.addAll(o.conflicts);
        }
    }

    private void put(int file, long[] c) {
        long[] had = counts.putIfAbsent(file, c);
        if (had != null && !java.util.Arrays.equals(had, c)) conflicts.add(file);
    }

    @Override
    public synchronized Map<Integer, long[]> value() {
        return new TreeMap<>(counts);
    }
}
