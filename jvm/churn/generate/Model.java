package churn.generate;

import org.apache.spark.sql.catalyst.expressions.XXH64;

import java.time.LocalDate;
import java.util.Map;

/**
 * The data set's arithmetic: each customer from (seed, n), their event records and their customer records.
 * docs/data.md is the specification (latent churn model, events, defects). Every random draw is Spark's
 * xxhash64 of (seed, salt, key...) (seed 42, one long after another, as the SQL function computes it), so a
 * value depends only on the arguments, never on partitioning or time.
 */
final class Model {
    private static final double TWO_53 = 9007199254740992.0;
    private static final int FIELD_BITS = 21;
    private static final String E_ACUTE = "\u00e9";   // written as the single byte 0xE9 (invalid UTF-8)
    private static final int[] BOUNDARY_DAYS = {30, 90, 180, 365};
    // Event types in the order a customer's events are numbered (slotTypes), as indexes.
    private static final int CHARGE = 0, PAYMENT = 1, LATE = 2, SUPPORT = 3, USAGE = 4, PLAN = 5, TERMINATION = 6;
    private static final int[] UNIFORM_WINDOW = {1, 1, 180, 365, 90, 365, 1};

    // Salts of the draws (a salt is the draw's number in this list, from 1): never reorder, append only.
    private static final String[] SALTS = {
        "gender", "region", "partner", "dependents", "contract", "payment", "paperless", "phone", "multiple",
        "internet", "security", "backup", "device", "tech", "tv", "movies", "charges_noise", "signup", "age",
        "birth_days", "updated", "addr_no", "street", "street_type", "bill_day", "late_n", "late_day",
        "late_tod", "pay_lag", "pay_tod", "charge_tod", "support_n", "support_day", "support_tod",
        "support_channel", "support_note", "usage_n", "usage_day", "usage_tod", "usage_gb", "plan_n", "plan_day",
        "plan_tod", "plan_channel", "term_day", "term_tod", "term_channel", "churn", "defect", "defect_field",
        "defect_variant", "defect_value", "conflict_secs", "event", "event_defect", "event_defect_bits", "dup_pos",
        "unk_pos", "thin_late", "thin_support", "thin_usage", "thin_plan"};
    // A customer's draws, three to a hash (21-bit fields): draw i is field i % 3 of xxhash64(seed, -1 - i / 3, n).
    private static final String[] CUSTOMER_DRAWS = {
        "gender", "region", "partner", "dependents", "contract", "payment", "paperless", "phone", "multiple",
        "internet", "security", "backup", "device", "tech", "tv", "movies", "charges_noise", "signup", "age",
        "bill_day", "addr_no", "street", "street_type", "birth_days", "late_n", "support_n", "usage_n", "plan_n",
        null, null, "defect", "churn", null, "dup_pos", "unk_pos"};
    private static final long SALT_EVENT = salt("event"), SALT_EVENT_DEFECT = salt("event_defect"),
        SALT_EVENT_DEFECT_BITS = salt("event_defect_bits"), SALT_UPDATED = salt("updated"),
        SALT_CONFLICT = salt("conflict_secs"), SALT_DEFECT_VARIANT = salt("defect_variant"),
        SALT_DEFECT_VALUE = salt("defect_value"), SALT_DEFECT_FIELD = salt("defect_field"),
        SALT_THIN_LATE = salt("thin_late"), SALT_THIN_SUPPORT = salt("thin_support"),
        SALT_THIN_USAGE = salt("thin_usage"), SALT_THIN_PLAN = salt("thin_plan");
    private static final int D_GENDER = draw("gender"), D_REGION = draw("region"), D_PARTNER = draw("partner"),
        D_DEPENDENTS = draw("dependents"), D_CONTRACT = draw("contract"), D_PAYMENT = draw("payment"),
        D_PAPERLESS = draw("paperless"), D_PHONE = draw("phone"), D_MULTIPLE = draw("multiple"),
        D_INTERNET = draw("internet"), D_SECURITY = draw("security"), D_BACKUP = draw("backup"),
        D_DEVICE = draw("device"), D_TECH = draw("tech"), D_TV = draw("tv"), D_MOVIES = draw("movies"),
        D_CHARGES_NOISE = draw("charges_noise"), D_SIGNUP = draw("signup"), D_AGE = draw("age"),
        D_BILL_DAY = draw("bill_day"), D_ADDR_NO = draw("addr_no"), D_STREET = draw("street"),
        D_STREET_TYPE = draw("street_type"), D_BIRTH_DAYS = draw("birth_days"), D_LATE_N = draw("late_n"),
        D_SUPPORT_N = draw("support_n"), D_USAGE_N = draw("usage_n"), D_PLAN_N = draw("plan_n"),
        D_DEFECT = draw("defect"), D_CHURN = draw("churn"), D_DUP_POS = draw("dup_pos"), D_UNK_POS = draw("unk_pos");
    private static final int EVENT_SLOTS = 100;   // event key = customer number * 100 + event index
    private static final int SIGNUP_YEARS = 6;

    // The latent churn model (docs/data.md, "Latent churn model"); b0 is calibrated to the churn rate.
    private static final double COEF_MONTH_TO_MONTH = 1.2, COEF_TWO_YEAR = -0.9, COEF_TENURE_MONTHS = -0.035,
        COEF_MONTHLY_CHARGES_Z = 0.6, COEF_SUPPORT_CALLS_90D = 0.45, COEF_LATE_PAYMENTS_180D = 0.6,
        COEF_FIBER_OPTIC = 0.4, COEF_ELECTRONIC_CHECK = 0.35, COEF_TECH_SUPPORT_YES = -0.4, COEF_SENIOR_65 = 0.25;
    // Poisson rates of the event counts over their whole window, per class (docs/data.md, "Events"), and caps.
    private static final double[] LATE_RATES = {0.55, 0.2}, SUPPORT_RATES = {1.0, 1.8, 2.0, 3.6},
        USAGE_RATES = {3.5, 1.5}, PLAN_RATES = {0.15};
    private static final int LATE_CAP = 8, SUPPORT_CAP = 20, USAGE_CAP = 30, PLAN_CAP = 5;
    private static final String[] CH_SUPPORT = {"phone", "web", "app", "store"};
    private static final String[] CH_PLAN = {"web", "phone", "store"};
    private static final String[] CH_TERMINATION = {"phone", "store", "web"};

    final Spec s;
    private final long seed;
    private final String[] slotTypes = {"charge", "payment", "late_payment", "support_call", "usage", "plan_change",
        "termination"};
    private final int dateLo, dateHi, firstSignupDay, span, day1990, day1999;
    private final String[] dates;
    private final String[] genders, regions, contracts, payments, internets;
    private final double[] contractT, paymentT, internetT, supportChannelT, termChannelT;
    private final double[] poissonLate, poissonSupport, poissonUsage, poissonPlan;
    private final long[] groupHash = new long[(CUSTOMER_DRAWS.length + 2) / 3];
    private final int codeWrongFieldCount, codeExactDup, codeConflicting, codeUnknownCustomer;
    private final double dupRate, unkRate;
    final int maxKindCode;   // defect codes are 1..maxKindCode (0: clean)
    private final boolean[] rejecting;
    private final String[] kindNames;
    private final int[] customerKinds, eventKinds;
    private final double[] customerBounds, eventBounds;
    private final boolean[] eventDemotable;
    final String[] customerColumns, eventColumns;
    private final int custAddress, evNote, evTs;

    Model(Spec spec) {
        s = spec;
        seed = s.seed;
        dateLo = s.asOfDay - 7 * 366 - 400;
        dateHi = s.asOfDay + 400;
        dates = new String[dateHi - dateLo + 1];
        for (int d = dateLo; d <= dateHi; d++) dates[d - dateLo] = Text.date(d);
        LocalDate asOf = LocalDate.ofEpochDay(s.asOfDay);
        firstSignupDay = (int) asOf.minusYears(SIGNUP_YEARS).toEpochDay();   // 29 February: the 28th
        span = s.cutoffDay - 30 - firstSignupDay;
        day1990 = (int) LocalDate.of(1990, 1, 1).toEpochDay();
        day1999 = (int) LocalDate.of(1999, 1, 1).toEpochDay();
        genders = s.categories.get("gender");
        regions = s.categories.get("region");
        contracts = s.categories.get("contract_type");
        payments = s.categories.get("payment_method");
        internets = s.categories.get("internet_service");
        contractT = cumulative(0.55, 0.21, 0.24);
        paymentT = cumulative(0.34, 0.23, 0.22, 0.21);
        internetT = cumulative(0.34, 0.44, 0.22);
        supportChannelT = cumulative(0.6, 0.2, 0.15, 0.05);
        termChannelT = cumulative(0.6, 0.25, 0.15);
        poissonLate = poissonTable(LATE_RATES, LATE_CAP);
        poissonSupport = poissonTable(SUPPORT_RATES, SUPPORT_CAP);
        poissonUsage = poissonTable(USAGE_RATES, USAGE_CAP);
        poissonPlan = poissonTable(PLAN_RATES, PLAN_CAP);
        maxKindCode = java.util.Collections.max(s.code.values());
        rejecting = new boolean[maxKindCode + 1];
        kindNames = new String[maxKindCode + 1];
        for (Map.Entry<String, Integer> e : s.code.entrySet()) kindNames[e.getValue()] = e.getKey();
        codeWrongFieldCount = s.code("wrong_field_count");
        codeExactDup = s.code("exact_duplicate");
        codeConflicting = s.code("conflicting_duplicate");
        codeUnknownCustomer = s.code("unknown_customer");
        for (String k : s.rejecting) rejecting[s.code(k)] = true;
        dupRate = s.rate("events", "exact_duplicate");
        unkRate = s.rate("events", "unknown_customer");
        // A row's kind: the first kind whose cumulative rate exceeds its draw (kinds with rate 0 take no share).
        // Events' exact duplicates and unknown customers' copies are added records, decided per customer.
        KindTable customerTable = kindTable("customers", false), eventTable = kindTable("events", true);
        customerKinds = customerTable.codes;
        customerBounds = customerTable.bounds;
        eventKinds = eventTable.codes;
        eventBounds = eventTable.bounds;
        eventDemotable = new boolean[eventKinds.length];
        for (int i = 0; i < eventKinds.length; i++) {
            eventDemotable[i] = rejecting[eventKinds[i]] || eventKinds[i] == codeUnknownCustomer;
        }
        customerColumns = s.columns.get("customers");
        eventColumns = s.columns.get("events");
        custAddress = indexOf(customerColumns, "address");
        evNote = indexOf(eventColumns, "note");
        evTs = indexOf(eventColumns, "event_ts");
    }

    private static long salt(String name) {
        return indexOf(SALTS, name) + 1;
    }

    private static int draw(String name) {
        return indexOf(CUSTOMER_DRAWS, name);
    }

    /** The cumulative shares of all values but the last (a weighted pick's thresholds). */
    private static double[] cumulative(double... weights) {
        double total = 0;
        for (double w : weights) total += w;
        double[] t = new double[weights.length - 1];
        double acc = 0;
        for (int i = 0; i < t.length; i++) {
            acc += weights[i] / total;
            t[i] = acc;
        }
        return t;
    }

    /** P(X <= k) for k < cap, one row of cap values per rate. */
    private static double[] poissonTable(double[] rates, int cap) {
        double[] cdf = new double[rates.length * cap];
        for (int c = 0; c < rates.length; c++) {
            double term = StrictMath.exp(-rates[c]), total = term;
            for (int k = 0; k < cap; k++) {
                cdf[c * cap + k] = total;
                term = term * rates[c] / (k + 1);
                total += term;
            }
        }
        return cdf;
    }

    private static boolean decidedPerCustomer(String kind, boolean events) {
        return events && (kind.equals("exact_duplicate") || kind.equals("unknown_customer"));
    }

    /** A dataset's drawn kinds (rate above 0) as codes, and their cumulative rates, in the contract's order. */
    private static final class KindTable {
        final int[] codes;
        final double[] bounds;

        KindTable(int[] codes, double[] bounds) {
            this.codes = codes;
            this.bounds = bounds;
        }
    }

    private KindTable kindTable(String dataset, boolean events) {
        String[] names = s.rateKinds.get(dataset);
        double[] r = s.rates.get(dataset);
        int[] codes = new int[names.length];
        double[] bounds = new double[names.length];
        int k = 0;
        double acc = 0;
        for (int i = 0; i < names.length; i++) {
            if (!decidedPerCustomer(names[i], events) && r[i] > 0) {
                acc += r[i];
                codes[k] = s.code(names[i]);
                bounds[k++] = acc;
            }
        }
        return new KindTable(java.util.Arrays.copyOf(codes, k), java.util.Arrays.copyOf(bounds, k));
    }

    // ---------------------------------------------------------------------------------------------------
    // Random draws
    // ---------------------------------------------------------------------------------------------------
    private static long xx(long a, long b, long c) {
        return XXH64.hashLong(c, XXH64.hashLong(b, XXH64.hashLong(a, 42L)));
    }

    private static long xx(long a, long b, long c, long d) {
        return XXH64.hashLong(d, xx(a, b, c));
    }

    /** The top 53 bits of a hash as a double in [0, 1). */
    private static double uniform(long h) {
        return (h >>> 11) / TWO_53;
    }

    /** The part-th (0..2, from the top) 21-bit field of a hash as a double in [0, 1). */
    private static double bits(long h, int part) {
        int shift = 64 - FIELD_BITS * (part + 1);
        return ((h >>> shift) & ((1L << FIELD_BITS) - 1)) / (double) (1L << FIELD_BITS);
    }

    /** Customer draw number i (CUSTOMER_DRAWS): three 21-bit draws to a hash of (seed, -1 - group, n). */
    private double cu(int i) {
        return bits(groupHash[i / 3], i % 3);
    }

    private static String pick(String[] values, double u) {
        return values[(int) Math.floor(u * values.length)];
    }

    /** A weighted pick: the first value whose cumulative share (thresholds, one fewer than values) exceeds u. */
    private static String pick(String[] values, double[] thresholds, double u) {
        for (int i = 0; i < thresholds.length; i++) if (u < thresholds[i]) return values[i];
        return values[values.length - 1];
    }

    /** Inverse-CDF draw of a capped Poisson count: cdf holds the classes' tables, cap values each. */
    private static int poisson(double[] cdf, int rateClass, int cap, double u) {
        int base = rateClass * cap;
        for (int k = 0; k < cap; k++) if (u <= cdf[base + k]) return k;
        return cap;
    }

    /** The full window's count kept for a tenure shorter than the window (each event with p = tenure / window). */
    private int thinned(long n, int full, int window, int tenure, int cap, long salt) {
        if (tenure >= window) return full;
        double q = tenure / (double) window;
        int kept = 0;
        for (int j = 1; j <= cap; j++) {
            if (full >= j && bits(xx(seed, salt, n * EVENT_SLOTS + j), 0) < q) kept++;
        }
        return kept;
    }

    private static int kind(int[] codes, double[] bounds, boolean[] demotable, double u, boolean demote) {
        if (codes.length == 0 || u >= bounds[bounds.length - 1]) return 0;
        for (int i = 0; i < codes.length; i++) {
            if (u < bounds[i]) return demote && demotable[i] ? 0 : codes[i];
        }
        return 0;
    }

    // ---------------------------------------------------------------------------------------------------
    // Dates
    // ---------------------------------------------------------------------------------------------------
    String date(long epochDay) {
        return epochDay >= dateLo && epochDay <= dateHi ? dates[(int) (epochDay - dateLo)] : Text.date(epochDay);
    }

    /** floor(months_between(later, date)) as Spark computes it for two dates. */
    private static int monthsBetweenFloor(LocalDate later, LocalDate date) {
        int day = date.getDayOfMonth();
        int months = (later.getYear() * 12 + later.getMonthValue()) - (date.getYear() * 12 + date.getMonthValue());
        boolean past = day > later.getDayOfMonth();
        if (later.getDayOfMonth() == later.lengthOfMonth()) past = past && day != date.lengthOfMonth();
        return months - (past ? 1 : 0);
    }

    private int daysBack(long offset) {
        int shift = 0;
        for (int b : BOUNDARY_DAYS) if (offset == b) shift = 1;
        return (int) (s.cutoffDay - (offset - shift));
    }

    // ---------------------------------------------------------------------------------------------------
    // Customers
    // ---------------------------------------------------------------------------------------------------
    Customer customer(long n) {
        for (int g = 0; g < groupHash.length; g++) groupHash[g] = xx(seed, -1 - g, n);
        Customer c = new Customer();
        c.n = n;
        c.customerId = "C" + Text.pad10(n);
        c.gender = pick(genders, cu(D_GENDER));
        c.region = pick(regions, cu(D_REGION));
        c.partner = cu(D_PARTNER) < 0.48 ? "Yes" : "No";
        c.dependents = cu(D_DEPENDENTS) < 0.30 ? "Yes" : "No";
        c.contractType = pick(contracts, contractT, cu(D_CONTRACT));
        c.paymentMethod = pick(payments, paymentT, cu(D_PAYMENT));
        c.paperlessBilling = cu(D_PAPERLESS) < 0.59 ? "Yes" : "No";
        c.phoneService = cu(D_PHONE) < 0.90 ? "Yes" : "No";
        c.internetService = pick(internets, internetT, cu(D_INTERNET));
        c.signupDay = (int) (firstSignupDay + (long) Math.floor(cu(D_SIGNUP) * (span + 1)));
        c.ageAtSignup = (int) (18 + (long) Math.floor(cu(D_AGE) * 67));
        c.billDay = (int) (1 + (long) Math.floor(cu(D_BILL_DAY) * 28));
        c.houseNumber = 1 + (long) Math.floor(cu(D_ADDR_NO) * 9999);   // the address is written by customers()
        c.street = pick(s.streets, cu(D_STREET));
        c.streetType = pick(s.streetTypes, cu(D_STREET_TYPE));
        boolean hasNet = !c.internetService.equals("No");
        boolean fiber = c.internetService.equals("Fiber optic");
        boolean dsl = c.internetService.equals("DSL");
        boolean echeck = c.paymentMethod.equals("Electronic check");
        c.multipleLines = cu(D_MULTIPLE) < 0.42 && c.phoneService.equals("Yes") ? "Yes" : "No";
        c.onlineSecurity = cu(D_SECURITY) < 0.37 && hasNet ? "Yes" : "No";
        c.onlineBackup = cu(D_BACKUP) < 0.44 && hasNet ? "Yes" : "No";
        c.deviceProtection = cu(D_DEVICE) < 0.44 && hasNet ? "Yes" : "No";
        c.techSupport = cu(D_TECH) < 0.37 && hasNet ? "Yes" : "No";
        c.streamingTv = cu(D_TV) < 0.49 && hasNet ? "Yes" : "No";
        c.streamingMovies = cu(D_MOVIES) < 0.50 && hasNet ? "Yes" : "No";
        LocalDate signup = LocalDate.ofEpochDay(c.signupDay);
        int tenure = s.cutoffDay - c.signupDay;
        c.tenureDays = tenure;
        c.monthlyCents = 1800 + 200 * yes(c.phoneService) + 500 * yes(c.multipleLines)
            + (dsl ? 2500 : fiber ? 4500 : 0)
            + 500 * (yes(c.onlineSecurity) + yes(c.onlineBackup) + yes(c.deviceProtection) + yes(c.techSupport))
            + 900 * (yes(c.streamingTv) + yes(c.streamingMovies))
            + (long) Math.floor(cu(D_CHARGES_NOISE) * 400);
        LocalDate birth = signup.plusMonths(-12L * c.ageAtSignup).minusDays((int) Math.floor(cu(D_BIRTH_DAYS) * 365));
        c.birthDay = (int) birth.toEpochDay();
        c.updatedSecs = (long) c.signupDay * 86400
            + (long) Math.floor(uniform(xx(seed, SALT_UPDATED, n)) * tenure * 86400);
        c.payChannel = echeck ? "web" : c.paymentMethod.equals("Mailed check") ? "store" : "auto";
        c.gbMean = fiber ? 15.0 : dsl ? 8.0 : 2.0;
        int nCharges = 0;
        for (int j = 1; j <= 3; j++) if (30 * (j - 1) + c.billDay <= tenure) nCharges++;
        boolean noTech = hasNet && c.techSupport.equals("No");
        int fullLate = poisson(poissonLate, echeck ? 0 : 1, LATE_CAP, cu(D_LATE_N));
        int fullSupport = poisson(poissonSupport, (fiber ? 2 : 0) + (noTech ? 1 : 0), SUPPORT_CAP, cu(D_SUPPORT_N));
        int fullUsage = poisson(poissonUsage, hasNet ? 0 : 1, USAGE_CAP, cu(D_USAGE_N));
        int fullPlan = poisson(poissonPlan, 0, PLAN_CAP, cu(D_PLAN_N));
        c.nCharges = nCharges;
        c.nLate = thinned(n, fullLate, UNIFORM_WINDOW[LATE], tenure, LATE_CAP, SALT_THIN_LATE);
        c.nSupport = thinned(n, fullSupport, UNIFORM_WINDOW[SUPPORT], tenure, SUPPORT_CAP, SALT_THIN_SUPPORT);
        c.nUsage = thinned(n, fullUsage, UNIFORM_WINDOW[USAGE], tenure, USAGE_CAP, SALT_THIN_USAGE);
        c.nPlan = thinned(n, fullPlan, UNIFORM_WINDOW[PLAN], tenure, PLAN_CAP, SALT_THIN_PLAN);
        int nPayments = 0;
        for (int j = 1; j <= 3; j++) if (30 * (j - 1) + c.billDay <= tenure && c.nLate < j) nPayments++;
        c.nPayments = nPayments;
        LocalDate cutoff = LocalDate.ofEpochDay(s.cutoffDay);
        c.tenureMonths = Math.min(72, monthsBetweenFloor(cutoff, signup));
        c.ageAtCutoff = (long) Math.floor(monthsBetweenFloor(cutoff, birth) / 12.0);
        int calls = 0;
        for (int i = 1; i <= 20; i++) {
            if (c.nSupport >= i && supportDay(c, i) > s.cutoffDay - 90) calls++;
        }
        c.supportCalls90d = calls;
        c.nPreCutoff = c.nCharges + c.nPayments + c.nLate + c.nSupport + c.nUsage + c.nPlan;
        c.logitX = logit(c);
        c.kind = kind(customerKinds, customerBounds, null, cu(D_DEFECT), false);
        c.rejected = rejecting[c.kind];
        if (s.hasB0) {
            c.churnProbability = 1.0 / (1.0 + StrictMath.exp(-(s.b0 + c.logitX)));
            c.churned = cu(D_CHURN) < c.churnProbability;
            c.nEvents = c.nPreCutoff + (c.churned ? 1 : 0);
        }
        return c;
    }

    private static int yes(String v) {
        return v.equals("Yes") ? 1 : 0;
    }

    private int supportDay(Customer c, int i) {
        long idx = c.nCharges + c.nPayments + c.nLate + (i - 1);
        double uDay = bits(xx(seed, SALT_EVENT, c.n * EVENT_SLOTS + idx), 0);
        return daysBack(1 + (long) Math.floor(uDay * Math.min(UNIFORM_WINDOW[SUPPORT], c.tenureDays)));
    }

    private static double logit(Customer c) {
        return COEF_MONTH_TO_MONTH * flag(c.contractType.equals("Month-to-month"))
            + COEF_TWO_YEAR * flag(c.contractType.equals("Two year"))
            + COEF_TENURE_MONTHS * c.tenureMonths
            + COEF_MONTHLY_CHARGES_Z * (c.monthlyCents / 100.0 - 70.0) / 30.0
            + COEF_SUPPORT_CALLS_90D * c.supportCalls90d
            + COEF_LATE_PAYMENTS_180D * c.nLate
            + COEF_FIBER_OPTIC * flag(c.internetService.equals("Fiber optic"))
            + COEF_ELECTRONIC_CHECK * flag(c.paymentMethod.equals("Electronic check"))
            + COEF_TECH_SUPPORT_YES * flag(c.techSupport.equals("Yes"))
            + COEF_SENIOR_65 * flag(c.ageAtCutoff >= 65);
    }

    private static double flag(boolean b) {
        return b ? 1.0 : 0.0;
    }

    // ---------------------------------------------------------------------------------------------------
    // Records: each call appends one customer's CSV records to out
    // ---------------------------------------------------------------------------------------------------
    interface Sink {
        /** One CSV record: its bytes (valid until the next record), its defect code (0 when clean), whether its
         *  customer is rejected (clean sets such events aside: the cascade), and whether it is its file's last. */
        void record(Text line, int kind, boolean rejected, boolean last);
    }

    private final Text text = new Text();

    /** The customer's event records (its events in type order, plus an exact duplicate and an unknown
     *  customer's copy where drawn, each right after the event it copies). */
    void events(Customer c, boolean firstInFile, boolean lastInFile, Sink out) {
        long n = c.n;
        int[] ends = new int[6];
        int acc = 0;
        int[] counts = {c.nCharges, c.nPayments, c.nLate, c.nSupport, c.nUsage, c.nPlan};
        for (int k = 0; k < 6; k++) {
            acc += counts[k];
            ends[k] = acc;
        }
        int dup = position(D_DUP_POS, dupRate, c.nEvents, c.rejected);
        int unk0 = position(D_UNK_POS, unkRate, c.nPreCutoff, c.rejected);
        int unk = unk0 == dup ? -1 : unk0;
        int none = 1000;
        int dupR = dup >= 0 ? dup + 1 + (unk >= 0 && unk < dup ? 1 : 0) : none;
        int unkR = unk >= 0 ? unk + 1 + (dup >= 0 && dup < unk ? 1 : 0) : none;
        int nRecords = c.nEvents + (dup >= 0 ? 1 : 0) + (unk >= 0 ? 1 : 0);
        String eprefix = "E" + Text.pad10(n);
        long stranger = n + s.customers;
        for (int r = 0; r < nRecords; r++) {
            int idx = r - (r >= dupR ? 1 : 0) - (r >= unkR ? 1 : 0);
            int copy = r == dupR ? 1 : r == unkR ? 2 : 0;
            int t = TERMINATION, i = 1;
            int start = 0;
            for (int k = 0; k < 6; k++) {
                if (idx < ends[k]) {
                    t = k;
                    i = idx - start + 1 + (k == PAYMENT ? c.nLate : 0);
                    break;
                }
                start = ends[k];
            }
            long key = n * EVENT_SLOTS + idx;
            long h = xx(seed, SALT_EVENT, key);
            long h2 = xx(seed, SALT_EVENT_DEFECT, key);
            double uA = bits(h, 2);
            double uNote = (h2 & 0x7FF) / 2048.0;
            double uDefect = (h2 >>> 11) / TWO_53;
            double uDay = bits(h, 0), uTod = bits(h, 1);
            long offset = 30L * (i - 1) + c.billDay;
            long back;
            if (t == CHARGE) back = offset;
            else if (t == PAYMENT) back = offset - (long) Math.floor(uDay * Math.min(8, offset));
            else back = 1 + (long) Math.floor(uDay * Math.min(UNIFORM_WINDOW[t], c.tenureDays));
            int day = t == TERMINATION ? (int) (s.cutoffDay + 1 + (long) Math.floor(uDay * (s.labelWindow - 1)))
                : daysBack(back);
            int tod = (int) Math.floor(uTod * 86400);
            int kind;
            if (copy == 1) kind = codeExactDup;
            else if (copy == 2) kind = codeUnknownCustomer;
            else if (c.rejected || idx == dup || idx == unk) kind = 0;
            else kind = kind(eventKinds, eventBounds, eventDemotable, uDefect, t == TERMINATION);
            long cents = t <= LATE ? c.monthlyCents
                : t == USAGE ? Math.min(999_999L, (long) Math.floor(-StrictMath.log(1.0 - uA) * c.gbMean * 100))
                : 0L;
            String channel = t == CHARGE ? "auto"
                : t <= LATE ? c.payChannel
                : t == SUPPORT ? pick(CH_SUPPORT, supportChannelT, uA)
                : t == USAGE ? "app"
                : t == PLAN ? pick(CH_PLAN, uA)
                : pick(CH_TERMINATION, termChannelT, uA);
            String note = t == SUPPORT ? pick(s.supportNotes, uNote) : t == PLAN ? "plan change" : "";
            boolean first = firstInFile && r == 0;
            boolean last = lastInFile && r == nRecords - 1;
            text.reset();
            if (first) header(eventColumns);
            int recordStart = text.length();
            // The record as its fields stand: the only place the event's fields are formatted.
            if (copy == 2) text.add('E').add(Text.pad10(stranger));
            else text.add(eprefix);
            text.add(Text.twoDigits(idx)).add(',');
            if (copy == 2) text.add('C').add(Text.pad10(stranger));
            else text.add(c.customerId);
            text.add(',').add(date(day)).add(' ').add(Text.twoDigits(tod / 3600)).add(':')
                .add(Text.twoDigits(tod / 60 % 60)).add(':').add(Text.twoDigits(tod % 60))
                .add(',').add(slotTypes[t]).add(',').addCents(cents).add(',').add(channel).add(',').add(note);
            if (kind != 0 && (hasRule(kind) || kind == codeWrongFieldCount)) {
                String[] f = fieldsFrom(recordStart);
                long hd = xx(seed, SALT_EVENT_DEFECT_BITS, key, copy);
                double uField = bits(hd, 0), uVar = bits(hd, 1), uVal = bits(hd, 2);
                int target = -1;
                String bad = null;
                if (hasRule(kind)) {
                    String[] names = eventRule(kind);
                    String name = names[(int) Math.floor(uField * names.length)];
                    target = indexOf(eventColumns, name);
                    bad = eventBad(kind, name, f, cents, uVar, uVal);
                }
                slow(f, target, bad, evNote, kind == codeWrongFieldCount, uVar);
            }
            out.record(text, kind, c.rejected, last);
        }
    }

    private int position(int draw, double rate, int count, boolean rejected) {
        if (rate <= 0) return -1;
        double u = cu(draw);
        if (u < rate * count && !rejected) return (int) Math.min(count - 1, (long) Math.floor(u / rate));
        return -1;
    }

    private boolean hasRule(int kind) {
        return kind != codeWrongFieldCount && kind != codeExactDup && kind != codeConflicting
            && kind != codeUnknownCustomer;
    }

    private String kindName(int kind) {
        return kindNames[kind];
    }

    private String[] eventRule(int kind) {
        switch (kindName(kind)) {
            case "invalid_utf8": case "tricky_quoting": return new String[]{"note"};
            case "missing_required": return without(s.required.get("events"), "event_id", "customer_id");
            case "bad_number": case "out_of_range": return new String[]{"amount"};
            case "bad_date": case "impossible_date": return new String[]{"event_ts"};
            case "unknown_category": case "messy_category": return s.eventCats;
            default: throw new IllegalArgumentException("no rule for " + kindName(kind));
        }
    }

    private String eventBad(int kind, String field, String[] f, long cents, double uVar, double uVal) {
        String note = f[evNote];
        String time = f[evTs].substring(11);
        switch (kindName(kind)) {
            case "invalid_utf8": return (note.isEmpty() ? "visit" : note) + " caf" + E_ACUTE;
            case "missing_required": return "";
            case "bad_number": return badNumber(f[4], uVar);
            case "bad_date": return badDate(f[2], time, uVar);
            case "unknown_category": return unknown(field);
            case "messy_category": return messy(field, f[indexOf(eventColumns, field)], uVar, uVal);
            case "out_of_range": return uVar < 0.5 ? "-" + Text.cents(cents + 100) : Text.cents(cents + 1_000_100);
            case "impossible_date":
                return date(uVar < 0.5 ? s.asOfDay + 1 + (long) Math.floor(uVal * 365)
                    : day1999 + (long) Math.floor(uVal * 364)) + " " + time;
            case "tricky_quoting": return tricky(note.isEmpty() ? "called" : note, uVar, "follow-up");
            default: throw new IllegalArgumentException("no rule for " + kindName(kind));
        }
    }

    /** The customer's records: its row, and the exact duplicate or the older conflicting version after it. */
    void customers(Customer c, boolean firstInFile, boolean lastInFile, Sink out) {
        int latent = c.kind;
        int extra = latent == codeExactDup ? 1 : latent == codeConflicting ? 2 : 0;
        boolean added = extra != 0;
        for (int copy : added ? new int[]{0, extra} : new int[]{0}) {
            int kind = copy == 1 ? codeExactDup : copy == 2 ? codeConflicting
                : latent == codeExactDup || latent == codeConflicting || latent == codeUnknownCustomer ? 0 : latent;
            boolean older = copy == 2;
            long n = c.n;
            long updated = older
                ? c.updatedSecs - 86400 - (long) Math.floor(uniform(xx(seed, SALT_CONFLICT, n)) * 365 * 86400)
                : c.updatedSecs;
            long monthly = older ? c.monthlyCents - 500 : c.monthlyCents;
            String contract = older ? rotate(contracts, c.contractType) : c.contractType;
            String payment = older ? rotate(payments, c.paymentMethod) : c.paymentMethod;
            boolean first = firstInFile && copy == 0;
            boolean last = lastInFile && (copy != 0 || !added);
            text.reset();
            if (first) header(customerColumns);
            int start = text.length();
            // The record as its fields stand: the only place the customer's fields are formatted.
            long day = Math.floorDiv(updated, 86400L);
            int tod = (int) (updated - day * 86400L);
            text.add(c.customerId).add(',').add(date(day)).add(' ').add(Text.twoDigits(tod / 3600)).add(':')
                .add(Text.twoDigits(tod / 60 % 60)).add(':').add(Text.twoDigits(tod % 60))
                .add(',').add(date(c.signupDay)).add(',').add(date(c.birthDay)).add(',').add(c.gender)
                .add(',').add(c.region).add(',').add(c.partner).add(',').add(c.dependents).add(',').add(contract)
                .add(',').add(payment).add(',').add(c.paperlessBilling).add(',').add(c.phoneService)
                .add(',').add(c.multipleLines).add(',').add(c.internetService).add(',').add(c.onlineSecurity)
                .add(',').add(c.onlineBackup).add(',').add(c.deviceProtection).add(',').add(c.techSupport)
                .add(',').add(c.streamingTv).add(',').add(c.streamingMovies).add(',').addCents(monthly)
                .add(',').add(Long.toString(c.houseNumber)).add(' ').add(c.street).add(' ').add(c.streetType);
            if (kind != 0 && (hasRule(kind) || kind == codeWrongFieldCount)) {
                String[] f = fieldsFrom(start);
                double uVar = uniform(xx(seed, SALT_DEFECT_VARIANT, n, copy));
                double uVal = uniform(xx(seed, SALT_DEFECT_VALUE, n, copy));
                double uField = uniform(xx(seed, SALT_DEFECT_FIELD, n, copy));
                int target = -1;
                String bad = null;
                if (hasRule(kind)) {
                    String[] names = customerRule(kind);
                    int choice = (int) Math.floor(uField * names.length);
                    target = indexOf(customerColumns, names[choice]);
                    bad = customerBad(kind, names[choice], choice, f, c, uVar, uVal);
                }
                slow(f, target, bad, custAddress, kind == codeWrongFieldCount, uVar);
            }
            out.record(text, kind, false, last);
        }
    }

    private String[] customerRule(int kind) {
        switch (kindName(kind)) {
            case "invalid_utf8": case "tricky_quoting": return new String[]{"address"};
            case "missing_required": return without(s.required.get("customers"), "customer_id");
            case "bad_number": case "out_of_range": return new String[]{"monthly_charges"};
            case "bad_date": return new String[]{"signup_date", "birth_date", "updated_at"};
            case "impossible_date": return new String[]{"signup_date", "birth_date"};
            case "unknown_category": case "messy_category": return s.customerCats;
            default: throw new IllegalArgumentException("no rule for " + kindName(kind));
        }
    }

    private String customerBad(int kind, String field, int choice, String[] f, Customer c, double uVar,
                               double uVal) {
        String monthly = f[indexOf(customerColumns, "monthly_charges")];
        switch (kindName(kind)) {
            case "invalid_utf8": return c.houseNumber + " Caf" + E_ACUTE + " St";
            case "missing_required": return "";
            case "bad_number": return badNumber(monthly, uVar);
            case "bad_date": {
                String updatedAt = f[indexOf(customerColumns, "updated_at")];
                String d = f[indexOf(customerColumns, field)];
                return badDate(d, field.equals("updated_at") ? updatedAt.substring(11, 19) : null, uVar);
            }
            case "unknown_category": return unknown(field);
            case "messy_category": return messy(field, f[indexOf(customerColumns, field)], uVar, uVal);
            case "out_of_range": return uVar < 0.5 ? "-" + monthly : Text.cents(c.monthlyCents + 100_000);
            case "impossible_date": {
                LocalDate d;
                if (choice == 0) {
                    d = uVar < 0.5 ? LocalDate.ofEpochDay(s.asOfDay + 1 + (long) Math.floor(uVal * 365))
                        : LocalDate.ofEpochDay(day1990 + (long) Math.floor(uVal * 2900));
                } else {
                    d = LocalDate.ofEpochDay(c.signupDay).plusMonths(uVar < 0.5 ? -12 * 10 : -12 * 120);
                }
                return d.toString();
            }
            case "tricky_quoting": return tricky(f[custAddress], uVar, "Apt 4");
            default: throw new IllegalArgumentException("no rule for " + kindName(kind));
        }
    }

    // ---------------------------------------------------------------------------------------------------
    // Lines
    // ---------------------------------------------------------------------------------------------------
    private void header(String[] columns) {
        for (int i = 0; i < columns.length; i++) {
            if (i > 0) text.add(',');
            text.add(columns[i]);
        }
        text.add('\n');
    }

    /** The fields of the record written since ``start`` (a record as its fields stand holds no comma inside a
     *  field: its free text never has one), which a defect's record is then written over. */
    private String[] fieldsFrom(int start) {
        String[] f = text.string(start).split(",", -1);
        text.truncate(start);
        return f;
    }

    /** A defect's record: the target field replaced by the bad value, the free text quoted where it must be,
     *  and wrong_field_count's last field dropped or an extra one appended. */
    private void slow(String[] f, int target, String bad, int freeText, boolean wrongCount, double uVar) {
        int last = f.length - 1;
        for (int i = 0; i <= last; i++) {
            String v = i == target ? bad : f[i];
            if (i == freeText) v = Text.csvField(v);
            if (i < last) {
                if (i > 0) text.add(',');
                text.add(v);
            } else if (!(wrongCount && uVar < 0.5)) {
                text.add(',').add(v);
            }
        }
        if (wrongCount && uVar >= 0.5) text.add(",extra");
    }

    private static String badNumber(String v, double u) {
        return u < 0.5 ? v + "x" : "$" + v;
    }

    /** Unparseable with yyyy-MM-dd( HH:mm:ss): month 13 / day 45, or day-first with slashes. */
    private static String badDate(String d, String time, double u) {
        String bad = u < 0.5 ? d.substring(0, 4) + "-13-45"
            : d.substring(8, 10) + "/" + d.substring(5, 7) + "/" + d.substring(0, 4);
        return time == null ? bad : bad + " " + time;
    }

    private String unknown(String column) {
        String v = s.unknown.get(column);
        return v != null ? v : s.unknown.get("_yes_no");
    }

    private static String tricky(String text, double u, String tail) {
        if (u < 1.0 / 3) return text + ", " + tail;
        if (u < 2.0 / 3) return "\"" + text + "\" " + tail;
        return text + "\n" + tail;
    }

    /** The same category written as a person or a legacy export would: a known spelling half of the time, mixed
     *  case, stray and doubled spaces; lower(trim(collapse-spaces(x))) gives back the value or a known spelling. */
    private String messy(String column, String v, double uForm, double uShape) {
        String spelled = s.spelling.get(column + "=" + v);
        String base = uForm < 0.5 && spelled != null ? spelled : v;
        int half = base.length() / 2;
        if (uShape < 1.0 / 3) return "  " + base.toUpperCase(java.util.Locale.ROOT) + " ";
        if (uShape < 2.0 / 3) return " " + base.toLowerCase(java.util.Locale.ROOT).replace(" ", "  ") + "  ";
        return " " + base.substring(0, half).toLowerCase(java.util.Locale.ROOT)
            + base.substring(half).toUpperCase(java.util.Locale.ROOT);
    }

    private static String rotate(String[] values, String v) {
        for (int i = 0; i < values.length - 1; i++) if (values[i].equals(v)) return values[i + 1];
        return values[0];
    }

    private static String[] without(String[] names, String... drop) {
        java.util.List<String> keep = new java.util.ArrayList<>();
        outer:
        for (String n : names) {
            for (String d : drop) if (n.equals(d)) continue outer;
            keep.add(n);
        }
        return keep.toArray(new String[0]);
    }

    static int indexOf(String[] a, String v) {
        for (int i = 0; i < a.length; i++) if (v.equals(a[i])) return i;
        throw new IllegalArgumentException("no column " + v);
    }
}
