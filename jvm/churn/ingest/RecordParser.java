package churn.ingest;

import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;

/**
 * The records of one split of a CSV file, from its first byte (a record boundary: see ChunkScan) to the last record
 * that starts before its end. Fields are split at commas, records at line breaks (LF, CR LF, a lone CR), both only
 * outside quotes; every {@code "} toggles quoting. Blank lines hold no record. A record's fields are left in the
 * buffer as byte ranges, valid until the next call; {@code Values} turns them into values.
 */
final class RecordParser {
    /** A record longer than this stops the read (a Java array holds at most 2 GiB). */
    static final int MAX_RECORD_BYTES = 1 << 30;
    /** The bytes the parser acts on: a quote, a comma, a line feed, a carriage return. */
    private static final boolean[] SPECIAL = new boolean[256];

    static {
        for (byte c : new byte[]{Bytes.QUOTE, Bytes.COMMA, Bytes.LF, Bytes.CR}) SPECIAL[c] = true;
    }

    private final InputStream in;
    private final long end;
    byte[] buf = new byte[1 << 20];
    private int pos, len;       // unread bytes: buf[pos, len)
    private long base;          // the file position of buf[0]
    private boolean eof;
    private int shift;          // how far the last fill() moved the buffer's bytes down

    // The current record: its bytes buf[recStart, recEnd), its fields buf[fieldStart[k], fieldEnd[k]), k < fields.
    int recStart, recEnd, fields;
    int[] fieldStart = new int[64], fieldEnd = new int[64];
    boolean quoted;             // a quote somewhere in the record
    boolean ascii;              // every byte of the record below 0x80 (so every field is valid UTF-8 as it is)
    boolean openAtEnd;          // the file ended inside quotes
    int lines;                  // the physical lines the record spans, counted as ChunkScan counts lines
    long recordPosition;        // the record's first byte in the file

    /** Reads from {@code in}, positioned at byte {@code start} of its file, up to the record boundary {@code end}
     *  (negative: to the end of the stream). */
    RecordParser(InputStream in, long start, long end) {
        this.in = in;
        this.base = start;
        this.end = end < 0 ? Long.MAX_VALUE : end;
    }

    /** Parses the next record of the split; false once the split is done. */
    boolean next() throws IOException {
        while (true) {          // blank lines first
            if (base + pos >= end) return false;
            if (pos >= len) {
                boolean more = fill(pos);
                pos -= shift;
                if (!more) return false;
            }
            byte c = buf[pos];
            if (c == Bytes.LF) {
                pos++;
            } else if (c == Bytes.CR) {
                pos++;
                if (pos >= len) {
                    boolean more = fill(pos);
                    pos -= shift;
                    if (!more) return false;
                }
                if (buf[pos] == Bytes.LF) pos++;
            } else {
                break;
            }
        }
        recStart = pos;
        recordPosition = base + pos;
        fields = 0;
        quoted = false;
        openAtEnd = false;
        lines = 1;
        boolean inQuotes = false;
        int fieldFrom = pos;
        byte prev = 0;
        int i = pos;
        byte[] b = buf;
        int high = 0;           // the record's bytes OR-ed: negative once one is 0x80 or above
        while (true) {
            // The bytes that mean nothing to the parser, most of them, in a tight loop of one table look-up each.
            int from = i, n = len;
            while (i < n && !SPECIAL[b[i] & 0xff]) {
                high |= b[i];
                i++;
            }
            if (i > from) prev = b[i - 1];
            if (i >= len) {
                boolean more = fill(recStart);
                b = buf;
                i -= shift;
                fieldFrom -= shift;
                if (!more) {            // the file ends, and so does the record
                    ascii = high >= 0;
                    openAtEnd = inQuotes;
                    if (inQuotes && i > recStart && Bytes.isBreak(b[i - 1])) lines--;   // the file's own line end
                    addField(fieldFrom, i);
                    recEnd = i;
                    pos = i;
                    return true;
                }
                continue;
            }
            byte c = b[i];
            if (c == Bytes.QUOTE) {
                inQuotes = !inQuotes;
                quoted = true;
            } else if (c == Bytes.COMMA) {
                if (!inQuotes) {
                    addField(fieldFrom, i);
                    fieldFrom = i + 1;
                }
            } else if (c == Bytes.LF || c == Bytes.CR) {
                if (!inQuotes) {
                    ascii = high >= 0;
                    addField(fieldFrom, i);
                    recEnd = i;
                    pos = i + 1;
                    if (c == Bytes.CR) {
                        if (pos >= len) {
                            boolean more = fill(recStart);
                            pos -= shift;
                            recEnd -= shift;
                            if (more && buf[pos] == Bytes.LF) pos++;
                        } else if (buf[pos] == Bytes.LF) {
                            pos++;
                        }
                    }
                    if (base + pos > end) {
                        throw new IllegalStateException("the record at byte " + recordPosition + " ends at byte "
                            + (base + pos) + ", past its split's end at " + end
                            + ": the pre-pass and the parser disagree on where records end");
                    }
                    return true;
                }
                if (!(c == Bytes.LF && prev == Bytes.CR)) lines++;
            }
            prev = c;
            i++;
        }
    }

    private void addField(int from, int to) {
        if (fields == fieldStart.length) {
            fieldStart = Arrays.copyOf(fieldStart, fields * 2);
            fieldEnd = Arrays.copyOf(fieldEnd, fields * 2);
        }
        fieldStart[fields] = from;
        fieldEnd[fields] = to;
        fields++;
    }

    /** Reads more bytes, after moving buf[keep, len) down to the buffer's start (and growing the buffer if that
     *  leaves no room); {@code shift} says how far bytes moved, and the record's ranges are moved with them. False
     *  at the end of the stream. */
    private boolean fill(int keep) throws IOException {
        shift = 0;
        if (eof) return false;
        if (keep > 0) {
            System.arraycopy(buf, keep, buf, 0, len - keep);
            base += keep;
            len -= keep;
            shift = keep;
            recStart -= keep;
            for (int k = 0; k < fields; k++) {
                fieldStart[k] -= keep;
                fieldEnd[k] -= keep;
            }
        }
        if (len == buf.length) {
            if (buf.length >= MAX_RECORD_BYTES) {
                throw new IllegalStateException("the record at byte " + recordPosition + " is longer than "
                    + (MAX_RECORD_BYTES >> 20) + " MiB: a quote opened and never closed holds the rest of the file");
            }
            buf = Arrays.copyOf(buf, buf.length * 2);
        }
        int n = in.read(buf, len, buf.length - len);
        if (n < 0) {
            eof = true;
            return false;
        }
        len += n;
        return true;
    }
}
