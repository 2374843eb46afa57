package churn.ingest;

import java.io.IOException;
import java.io.InputStream;

/**
 * The pre-pass over one chunk of a file (bytes {@code start .. end - 1}): where a split may start on a record
 * boundary and with which record number, and the chunk's physical lines, counted apart from the parser.
 *
 * <p>Lines are split as Spark's text reader splits them: at LF, CR LF or a lone CR; a blank line is one of no bytes;
 * a line break belongs to the chunk of its first byte. A record boundary is the end of a line break outside quotes,
 * where every {@code "} toggles quoting (a doubled quote toggles twice), so whether a line break is outside quotes
 * depends on the parity of all the quotes before it in the file. A chunk's scan does not know the parity it starts
 * at, so it answers for both: for start parity {@code p}, {@code first[p]} is the first boundary in the chunk (-1:
 * none) and {@code records[p]} how many records start in it (a record starts at a boundary, or at the file's start,
 * at a byte that does not begin a line break: blank lines hold no record). The driver chains the chunks' quote
 * counts to know which answer holds (jobs/stages/ingest.py).
 */
final class ChunkScan {
    private static final int NONE = Integer.MIN_VALUE;   // no byte before: the file's start
    long quotes, lines, blank;
    final long[] first = {-1, -1};
    final long[] records = new long[2];

    /**
     * Scans {@code in}, positioned at byte {@code max(start - 1, 0)} of its file (the byte before the chunk tells
     * whether the chunk starts on a line break's end), up to {@code end} (exclusive), or to the end of the stream
     * when {@code end} is negative (a compressed file, scanned whole). {@code atFileEnd}: the chunk ends where the
     * file does, so an unterminated last line is the chunk's to count.
     */
    static ChunkScan scan(InputStream in, long start, long end, boolean atFileEnd) throws IOException {
        ChunkScan s = new ChunkScan();
        int prev = NONE;        // the byte before the current one
        long pending = -1;      // a boundary at this position, once its byte is known (to tell records from blanks)
        int pendingParity = 0;
        if (start > 0) {
            prev = in.read();
            if (prev < 0) return s;
            prev = (byte) prev;
            if (prev == Bytes.LF || prev == Bytes.CR) pending = start;
        } else {
            pending = 0;        // the file's start
        }
        int parity = 0;         // quotes since the chunk's start, mod 2
        long limit = end < 0 ? Long.MAX_VALUE : end;
        long p = start;
        byte[] buf = new byte[1 << 20];
        while (p < limit) {
            int n = in.read(buf, 0, (int) Math.min(buf.length, limit - p));
            if (n < 0) break;
            for (int i = 0; i < n; i++, p++) {
                byte c = buf[i];
                if (pending == p) {
                    // A CR's line break goes on through an LF after it: no boundary between the two.
                    if (!(prev == Bytes.CR && c == Bytes.LF)) s.boundary(p, pendingParity, c);
                    pending = -1;
                }
                if (c == Bytes.QUOTE) {
                    s.quotes++;
                    parity ^= 1;
                } else if (c == Bytes.LF || c == Bytes.CR) {
                    if (!(c == Bytes.LF && prev == Bytes.CR)) {     // else the CR counted this line break
                        s.lines++;
                        if (prev == NONE || prev == Bytes.LF || prev == Bytes.CR) s.blank++;
                    }
                    pending = p + 1;
                    pendingParity = parity;
                }
                prev = c;
            }
        }
        // The file's last line, when no line break ends it, is a line too (as the text reader counts it).
        if ((atFileEnd || end < 0) && p > start && prev != Bytes.LF && prev != Bytes.CR) s.lines++;
        return s;
    }

    /** A boundary at {@code at}, {@code parity} quotes after the chunk's start: so it is one for the start parity
     *  that makes the file's count even; {@code next}, the byte at it, starts a record unless it breaks a line. */
    private void boundary(long at, int parity, byte next) {
        if (first[parity] < 0) first[parity] = at;
        if (next != Bytes.LF && next != Bytes.CR) records[parity]++;
    }
}
