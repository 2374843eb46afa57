package churn.ingest;

import java.util.Arrays;

/** A parsed record's fields as string values: quotes removed, bytes as UTF-8. */
final class Values {
    private byte[] scratch = new byte[4096];
    private int scratchLen;

    /** The last value {@code decode} found: null, or the bytes {@code src[off, off + len)}. */
    boolean isNull;
    byte[] src;
    int off, len;

    /**
     * The value of {@code buf[from, to)}: null when the field is empty (or {@code ""}); else its bytes with quoting
     * removed (each {@code "} toggles quoting and is dropped, but a doubled quote inside quotes is one quote of the
     * value), invalid UTF-8 decoded to U+FFFD; left in {@code isNull}, {@code src}, {@code off} and {@code len},
     * valid until the next call. {@code mayQuote}: false when the record has no quote; {@code ascii}: true when every
     * byte of the record is below 0x80. Returns whether the value holds a line feed.
     */
    boolean decode(byte[] buf, int from, int to, boolean mayQuote, boolean ascii) {
        isNull = to == from;
        if (isNull) return false;
        src = buf;
        off = from;
        len = to - from;
        boolean lf = false;
        if (mayQuote && indexOf(buf, from, to, Bytes.QUOTE) >= 0) {
            unquote(buf, from, to);
            if (scratchLen == 0) {      // "" is an empty field too (as Spark's CSV reader reads it)
                isNull = true;
                return false;
            }
            src = scratch;
            off = 0;
            len = scratchLen;
            lf = indexOf(scratch, 0, scratchLen, Bytes.LF) >= 0;
        }
        if (!ascii && !Bytes.asciiOrValid(src, off, len)) {
            src = Bytes.utf8(src, off, len);
            off = 0;
            len = src.length;
        }
        return lf;
    }

    /** Whether the last value {@code decode} unquoted (so in the scratch buffer) holds a line feed
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
