package churn.ingest;

import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.unsafe.Platform;

import java.util.Arrays;

/** A parsed record's fields as the row's string values: quotes removed, bytes as UTF-8. */
final class Values {
    private byte[] scratch = new byte[4096];
    private int scratchLen;

    /**
     * Writes the value of {@code buf[from, to)} at {@code ordinal}: null when the field is empty (or {@code ""});
     * else its bytes
     * with quoting removed (each {@code "} toggles quoting and is dropped, but a doubled quote inside quotes is one
     * quote of the value), invalid UTF-8 decoded to U+FFFD. {@code mayQuote}: false when the record has no quote.
     * Returns whether the value holds a line feed.
     */
    boolean write(UnsafeRowWriter writer, int ordinal, byte[] buf, int from, int to, boolean mayQuote,
                  boolean ascii) {
        if (to == from) {
            writer.setNullAt(ordinal);
            return false;
        }
        byte[] src = buf;
        int off = from, len = to - from;
        boolean lf = false;
        if (mayQuote && indexOf(buf, from, to, Bytes.QUOTE) >= 0) {
            unquote(buf, from, to);
            if (scratchLen == 0) {      // "" is an empty field too (as Spark's CSV reader reads it)
                writer.setNullAt(ordinal);
                return false;
            }
            src = scratch;
            off = 0;
            len = scratchLen;
            lf = indexOf(scratch, 0, scratchLen, Bytes.LF) >= 0;
        }
        if (ascii || Bytes.asciiOrValid(src, off, len)) {
            put(writer, ordinal, src, off, len);
        } else {
            byte[] fixed = Bytes.utf8(src, off, len);
            writer.write(ordinal, fixed, 0, fixed.length);
        }
        return lf;
    }

    /** {@code src[off, off + len)} as the string at {@code ordinal}: what {@code UnsafeWriter.write(int, byte[], int,
     *  int)} does, with an array copy (cheaper for a field's few bytes than its copy through Unsafe) and the padding
     *  to the next 8-byte word zeroed byte by byte. */
    static void put(UnsafeRowWriter writer, int ordinal, byte[] src, int off, int len) {
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

    /** Whether the last value written by {@code write} (unquoted, so in the scratch buffer) holds a line feed
     *  followed by a line with at least {@code commas} commas: the mark of records swallowed by an open quote. */
    boolean holdsWholeRecord(int commas) {
        int n = 0;
        boolean counting = false;
        for (int i = 0; i < scratchLen; i++) {
            byte c = scratch[i];
            if (c == Bytes.LF) {
                counting = true;
                n = 0;
            } else if (c == Bytes.COMMA && counting && ++n >= commas) {
                return true;
            }
        }
        return false;
    }

    private void unquote(byte[] buf, int from, int to) {
        if (scratch.length < to - from) scratch = Arrays.copyOf(scratch, Math.max(to - from, scratch.length * 2));
        int n = 0;
        boolean inQuotes = false;
        for (int i = from; i < to; i++) {
            byte c = buf[i];
            if (c == Bytes.QUOTE) {
                if (inQuotes && i + 1 < to && buf[i + 1] == Bytes.QUOTE) {
                    scratch[n++] = Bytes.QUOTE;
                    i++;
                } else {
                    inQuotes = !inQuotes;
                }
            } else {
                scratch[n++] = c;
            }
        }
        scratchLen = n;
    }

    static int indexOf(byte[] b, int from, int to, byte c) {
        for (int i = from; i < to; i++) {
            if (b[i] == c) return i;
        }
        return -1;
    }
}
