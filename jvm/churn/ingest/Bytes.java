package churn.ingest;

import java.nio.charset.StandardCharsets;

/** The byte-level rules of the CSV dialect ingest reads (docs/etl.md, "Parsing"), shared by the scan and the parser. */
final class Bytes {
    static final byte QUOTE = '"';
    static final byte COMMA = ',';
    static final byte LF = '\n';
    static final byte CR = '\r';

    private Bytes() {
    }

    static boolean isBreak(byte b) {
        return b == LF || b == CR;
    }

    /** Whether {@code b[off, off + len)} is valid UTF-8 (shortest forms, no surrogates, at most U+10FFFF). */
    static boolean validUtf8(byte[] b, int off, int len) {
        int i = off, end = off + len;
        while (i < end) {
            int c = b[i] & 0xff;
            if (c < 0x80) {
                i++;
                continue;
            }
            int n;
            int min;
            if (c >= 0xc2 && c <= 0xdf) {
                n = 1;
                min = 0x80;
            } else if (c >= 0xe0 && c <= 0xef) {
                n = 2;
                min = 0x800;
            } else if (c >= 0xf0 && c <= 0xf4) {
                n = 3;
                min = 0x10000;
            } else {
                return false;
            }
            if (i + n >= end) return false;   // the sequence runs past the field
            int cp = c & (0x3f >> n);
            for (int k = 1; k <= n; k++) {
                int d = b[i + k] & 0xff;
                if ((d & 0xc0) != 0x80) return false;
                cp = (cp << 6) | (d & 0x3f);
            }
            if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
            i += n + 1;
        }
        return true;
    }

    /** {@code b[off, off + len)} as UTF-8 bytes: themselves when valid, else decoded as Java decodes UTF-8 (each
     *  malformed sequence becomes U+FFFD, as Spark's own text readers do) and encoded again. */
    static byte[] utf8(byte[] b, int off, int len) {
        if (asciiOrValid(b, off, len)) {
            byte[] out = new byte[len];
            System.arraycopy(b, off, out, 0, len);
            return out;
        }
        return new String(b, off, len, StandardCharsets.UTF_8).getBytes(StandardCharsets.UTF_8);
    }

    static boolean asciiOrValid(byte[] b, int off, int len) {
        for (int i = off, end = off + len; i < end; i++) {
            if (b[i] < 0) return validUtf8(b, i, end - i);
        }
        return true;
    }
}
