package churn.generate;

import java.time.LocalDate;
import java.util.Arrays;

/**
 * A reusable byte buffer for one CSV record. Every generated value is ASCII except the invalid_utf8 defect's
 * lone Latin-1 byte (U+00E9 in a Java string): each char is written as its low byte.
 */
final class Text {
    private byte[] buf = new byte[256];
    private int len;

    void reset() {
        len = 0;
    }

    int length() {
        return len;
    }

    /** The bytes from ``start`` on as a string, a char per byte (the inverse of add(String)). */
    String string(int start) {
        char[] c = new char[len - start];
        for (int i = start; i < len; i++) c[i - start] = (char) (buf[i] & 0xFF);
        return new String(c);
    }

    void truncate(int newLength) {
        len = newLength;
    }

    private void room(int more) {
        if (len + more > buf.length) buf = Arrays.copyOf(buf, Math.max(buf.length * 2, len + more));
    }

    Text add(char c) {
        room(1);
        buf[len++] = (byte) c;
        return this;
    }

    @SuppressWarnings("deprecation")   // String.getBytes(int, int, byte[], int): each char's low byte, as wanted
    Text add(String s) {
        int n = s.length();
        room(n);
        s.getBytes(0, n, buf, len);
        len += n;
        return this;
    }

    Text add(Text t) {
        room(t.len);
        System.arraycopy(t.buf, 0, buf, len, t.len);
        len += t.len;
        return this;
    }

    /** The bytes as a Spark string in a row (copied by the writer). */
    void writeTo(org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter w, int ordinal) {
        w.write(ordinal, buf, 0, len);
    }

    /** A non-negative number of cents as d.cc, its digits written in place (no string per record). */
    Text addCents(long cents) {
        long whole = cents / 100;
        if (whole == 0) {
            add('0');
        } else {
            int start = len;
            for (long w = whole; w > 0; w /= 10) add((char) ('0' + w % 10));
            for (int a = start, b = len - 1; a < b; a++, b--) {
                byte x = buf[a];
                buf[a] = buf[b];
                buf[b] = x;
            }
        }
        return add('.').add(TWO[(int) (cents % 100)]);
    }

    /** yyyy-MM-dd of a day number (ISO, as Spark casts a date to a string for years 1000..9999). */
    static String date(long epochDay) {
        return LocalDate.ofEpochDay(epochDay).toString();
    }

    static String twoDigits(long v) {
        return TWO[(int) v];
    }

    private static final String[] TWO = new String[100];

    static {
        for (int i = 0; i < 100; i++) TWO[i] = (i < 10 ? "0" : "") + i;
    }

    /** s left-padded with '0' to 10 characters, or cut to its first 10 (Spark's lpad). */
    static String pad10(long v) {
        String s = Long.toString(v);
        if (s.length() >= 10) return s.substring(0, 10);
        return "0000000000".substring(s.length()) + s;
    }

    /** addCents as a string (for defect values, off the per-record path). */
    static String cents(long cents) {
        return new Text().addCents(cents).string(0);
    }

    static boolean needsQuotes(String v) {
        return v.indexOf(',') >= 0 || v.indexOf('"') >= 0 || v.indexOf('\n') >= 0 || v.indexOf('\r') >= 0;
    }

    /** One CSV field: quoted (inner quotes doubled) when it holds ',', '"', CR or LF. */
    static String csvField(String v) {
        return needsQuotes(v) ? "\"" + v.replace("\"", "\"\"") + "\"" : v;
    }
}
