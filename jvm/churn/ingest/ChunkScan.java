package churn.ingest;

import java.io.IOException;
import java.io.InputStream;

/**
 * The count of one chunk of a file (bytes {@code start .. end - 1}) apart from the parser: where a split may start on
 * a record boundary and with which record number, and the chunk's physical lines. The pre-pass scans the chunks of
 * the files it splits ({@link #scan}); a file read whole is counted as the parser reads it, from its first byte
 * ({@link #fromFileStart} and {@link #feed}, CsvSource's {@code Counted}).
 *
 * <p>Lines are split as Spark's text reader splits them: at LF, CR LF or a lone CR; a blank line is one of no bytes;
 * a line break belongs to the chunk of its first byte. A record boundary is the end of a line break outside quotes,
 * where every {@code "} toggles quoting (a doubled quote toggles twice), so whether a line break is outside quotes
 * depends on the parity of all the quotes before it in the file. A chunk's scan does not know the parity it starts
 * at, so it answers for both: for start parity {@code p}, {@code first[p]} is the first boundary in the chunk (-1:
 * none) and {@code records[p]} how many records start in it (a record starts at a boundary, or at the file's start,
 * at a byte that does not begin a line break: blank lines hold no record). The driver chains the chunks' quote
 * counts to know which answer holds (jobs/stages/ingest.py); a count from a file's start holds for parity 0.
 */
final class ChunkScan {
    private static final int NONE = Integer.MIN_VALUE;   // no byte before: the file's start
    /** The bytes that change the count: a quote, a line feed, a carriage return. */
    private static final boolean[] MARK = new boolean[256];

    static {
        MARK[Bytes.QUOTE] = true;
        MARK[Bytes.LF] = true;
        MARK[Bytes.CR] = true;
    }

    long quotes, lines, blank;
    final long[] first = {-1, -1};
    final long[] records = new long[2];

    private final long start;
    private long p;             // the file position of the next byte fed
    private int prev = NONE;    // the byte before it
    private long pending = -1;  // a boundary at this position, once its byte is known (to tell records from blanks)
    private int pendingParity;
    private int parity;         // quotes since the chunk's start, mod 2

    private ChunkScan(long start) {
        this.start = start;
        this.p = start;
    }

    /** A count of a file from its first byte, fed the bytes in order. */
    static ChunkScan fromFileStart() {
        ChunkScan s = new ChunkScan(0);
        s.pending = 0;          // the file's start
        return s;
    }

    /**
     * Scans {@code in}, positioned at byte {@code max(start - 1, 0)} of its file (the byte before the chunk tells
     * whether the chunk starts on a line break's end), up to {@code end} (exclusive), or to the end of the stream
     * when {@code end} is negative (a compressed file, scanned whole). {@code atFileEnd}: the chunk ends where the
     * file does, so an unterminated last line is the chunk's to count.
     */
    static ChunkScan scan(InputStream in, long start, long end, boolean atFileEnd) throws IOException {
        ChunkScan s;
        if (start > 0) {
            s = new ChunkScan(start);
            int before = in.read();
            if (before < 0) return s;
            s.prev = (byte) before;
            if (s.prev == Bytes.LF || s.prev == Bytes.CR) s.pending = start;
        } else {
            s = fromFileStart();
        }
        long limit = end < 0 ? Long.MAX_VALUE : end;
        byte[] buf = new byte[1 << 20];
        while (s.p < limit) {
            int n = in.read(buf, 0, (int) Math.min(buf.length, limit - s.p));
            if (n < 0) break;
            s.feed(buf, 0, n);
        }
        s.finish(atFileEnd || end < 0);
        return s;
    }

    /** Counts the next {@code n} bytes of the chunk, {@code buf[off, off + n)}. */
    void feed(byte[] buf, int off, int n) {
        int i = off, stop = off + n;
        while (i < stop) {
            if (pending < p) {          // no boundary waits on the next byte: skip to the next quote or line break
                int from = i;
                while (i < stop && !MARK[buf[i] & 0xff]) {
                    i++;
                }
                if (i > from) {
                    prev = buf[i - 1];
                    p += i - from;
                    if (i == stop) {
                        break;
                    }
                }
            }
            byte c = buf[i];
            if (pending == p) {
                // A CR's line break goes on through an LF after it: no boundary between the two.
                if (!(prev == Bytes.CR && c == Bytes.LF)) boundary(p, pendingParity, c);
                pending = -1;
            }
            if (c == Bytes.QUOTE) {
                quotes++;
                parity ^= 1;
            } else if (c == Bytes.LF || c == Bytes.CR) {
                if (!(c == Bytes.LF && prev == Bytes.CR)) {     // else the CR counted this line break
                    lines++;
                    if (prev == NONE || prev == Bytes.LF || prev == Bytes.CR) blank++;
                }
                pending = p + 1;
                pendingParity = parity;
            }
            prev = c;
            i++;
            p++;
        }
    }

    /** The chunk is done; {@code atFileEnd}: the file ends with it, so a last line no line break ends is a line. */
    void finish(boolean atFileEnd) {
        if (atFileEnd && p > start && prev != Bytes.LF && prev != Bytes.CR) lines++;
    }

    /** A boundary at {@code at}, {@code parity} quotes after the chunk's start: so it is one for the start parity
     *  that makes the file's count even; {@code next}, the byte at it, starts a record unless it breaks a line. */
    private void boundary(long at, int parity, byte next) {
        if (first[parity] < 0) first[parity] = at;
        if (next != Bytes.LF && next != Bytes.CR) records[parity]++;
    }
}
