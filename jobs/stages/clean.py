"""Clean: bronze -> silver customers and events (typed, canonical, deduplicated, valid) + the 'clean' slice of
the quarantine.

    scripts/submit clean --lake data/lake --as-of YYYY-MM-DD

Each well-formed bronze row (``well_formed``: those ingest did not flag) gets a fate, decided in this order
(docs/etl.md):
1. the checks of ``contract.CLEAN_CHECK_ORDER``; the first failing one names the quarantine reason and
   ``detail`` names the column;
2. exact duplicates among the valid rows (identical raw CSV fields) are removed, the first copy in input
   order (source_file, record_number) kept, and counted;
3. customers: of several valid rows with one customer_id (trimmed), the latest updated_at wins (ties: later in the
   input); the others go to quarantine as ``superseded``;
4. events: a customer_id in no customer row of the input -> ``unknown_customer``; in some customer row but
   not in silver (every row of that customer was quarantined) -> ``contract.CASCADE_REASON``. "Customer rows"
   are bronze's well-formed rows plus the records ingest quarantined: their id is the raw text's first field.
Quarantine rows keep ``raw`` = the row's CSV fields as JSON (nulls included), so nothing is lost.
"""
from __future__ import annotations

import os
import threading
from functools import partial, reduce

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs.core.params import AS_OF, LAKE
from jobs.core.stage import REQUIRED as NO_DEFAULT, Stage, StageRecord
from jobs.lake import delta_io, plans
from jobs.lake.contract import (AGE_AT_SIGNUP_RANGE, AMOUNT_RANGE, CASCADE_REASON, CATEGORIES, CLEAN_CHECK_ORDER,
                                CUSTOMER_CATEGORICALS, CUSTOMER_COLUMNS, DATASETS, DATE_FORMAT, EARLIEST_DATE,
                                EVENT_CATEGORICALS, EVENT_COLUMNS, MALFORMED, MONTHLY_CHARGES_RANGE,
                                QUARANTINE_COLUMNS, REQUIRED, SPELLINGS, TIMESTAMP_FORMAT)
from jobs.lake.session import conf_choice, free_shuffle_files, release, remove_path, session_conf, together
from jobs.lake.sqltext import expr, ident, literal, require_escapes

# How the two classified frames are kept for their readers (``materialised``): true (the default, the cpu profile's:
# the checks are the costly part on a CPU, and run once), false (each reader classifies again: a shuffle of the
# raw rows per reader), or files (written once as Parquet under the lake's SCRATCH folder and read back: the gpu
# profile's; the GPU writes and scans Parquet itself, and the raw rows are shuffled once; docs/gpu.md).
MATERIALISE_KEY = "spark.churn.clean.materialise"
MATERIALISE_MODES = ("true", "false", "files")
# How a categorical column's canonical value is found (``with_checks``): lazy (the default, the cpu profile's: the
# value lower-cased is looked up first and the regular expression of ``category_key`` runs only on a miss, as a CPU
# evaluates a coalesce's branches lazily) or keyed (the gpu profiles': ``category_key`` computed once a row as a
# column, then one CASE on it; the GPU evaluates every branch for every row, so the lazy form costs it the regular
# expression anyway and both lookups of its literal map; docs/gpu.md). Both give the same values.
LOOKUP_KEY = "spark.churn.clean.categoryLookup"
LOOKUP_MODES = ("lazy", "keyed")
ROW_BLOCK_BYTES = 1 << 20   # the true mode's blocks: well under half a G1 region of an executor's heap (not "humongous")
SCRATCH = "_clean_scratch"   # under the lake: the files mode's frames, removed when the stage ends
LINEAGE = ("source_file", "record_number")
# Delta keeps min/max/null counts of the first 32 columns of each file it writes; on silver's wide rows that is a
# tenth of clean's work, and silver is laid out by a hash of the customer, so file skipping has little to gain from
# most columns. Kept for what a reader of one customer or of a time range filters on. Table properties, set when
# a silver table is created (a table created by an earlier version keeps its own).
SILVER_PROPERTIES = {"customers": {"delta.dataSkippingStatsColumns": "customer_id"},
                     "events": {"delta.dataSkippingStatsColumns": "customer_id,event_ts"}}
KEPT = "kept"          # value of the internal _fate column for rows that go to silver
DUPLICATE = "duplicate"

# Typed columns per dataset: name -> kind. Everything not listed stays a string.
NUMBERS = {"customers": {"monthly_charges": MONTHLY_CHARGES_RANGE}, "events": {"amount": AMOUNT_RANGE}}
DATES = {"customers": {"updated_at": TIMESTAMP_FORMAT, "signup_date": DATE_FORMAT, "birth_date": DATE_FORMAT},
         "events": {"event_ts": TIMESTAMP_FORMAT}}
CATEGORIES_OF = {"customers": CUSTOMER_CATEGORICALS, "events": EVENT_CATEGORICALS}
# A plain decimal; Spark's cast alone would also take "NaN", "Infinity", "1e3" or "1d".
NUMBER_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$"


def run(spark: SparkSession, lake: str, as_of: str) -> StageRecord:
    record = StageRecord(STAGE.name, extra={"as_of": as_of})
    bronze_c, record.read["bronze_customers"] = delta_io.read_table(spark, lake, "bronze_customers")
    bronze_e, record.read["bronze_events"] = delta_io.read_table(spark, lake, "bronze_events")
    bronze_c, bronze_e = well_formed(bronze_c), well_formed(bronze_e)   # the malformed are ingest's quarantine's
    ingest_q, record.read["quarantine"] = delta_io.read_table(spark, lake, "quarantine")

    # a wrong setting stops here, before anything is written
    materialise_mode(spark), lookup_mode(spark), require_escapes(spark)
    scratch = os.path.join(lake, SCRATCH)
    remove_path(spark, scratch)   # a killed run's leftovers
    freeing: list[threading.Thread] = []   # the files mode's shuffle freeing (``materialised``): done before the end
    try:
        return classify_and_write(spark, lake, as_of, record, bronze_c, bronze_e, ingest_q, scratch, freeing)
    finally:
        for thread in freeing:
            thread.join()
        remove_path(spark, scratch)


def classify_and_write(spark: SparkSession, lake: str, as_of: str, record: StageRecord, bronze_c: DataFrame,
                       bronze_e: DataFrame, ingest_q: DataFrame, scratch: str,
                       freeing: list[threading.Thread]) -> StageRecord:
    # One shuffle per dataset, by customer, of the raw rows: the duplicate window, the checks, the superseded window
    # and the join with the customers' status all run on that one partitioning (a window or join keyed by customer
    # needs no other), spread over every core whatever the sizes of bronze's files (one per input file). Each
    # classified frame, cut to what its writers read (``outcome``), feeds three readers (silver, quarantine, the
    # accounting): materialised once (see MATERIALISE_KEY). Customers without whole-stage code generation (where
    # they are computed: here, when materialised): fused, their 22 columns' checks make methods of tens of KB of
    # bytecode, which run slowly until C2 has compiled them, and that takes more passes than a run makes (figures in
    # docs/jvm.md, "Huge generated methods"); the events' 7 columns gain from it.
    lookups = lookup_mode(spark)
    with session_conf(spark, {"spark.sql.codegen.wholeStage": "false"}):
        customers = materialised(spark, bronze_c.transform(with_customer_key).repartition(CUSTOMER_KEY)
                                 .transform(with_copies_numbered(CUSTOMER_COLUMNS))
                                 .transform(with_checks("customers", as_of, lookups))
                                 .transform(with_duplicates_marked)
                                 .transform(with_superseded_marked)
                                 .transform(outcome("customers")), f"{scratch}/customers", freeing)
    events = materialised(spark, bronze_e.transform(with_customer_key).repartition(CUSTOMER_KEY)
                          .transform(with_copies_numbered(EVENT_COLUMNS))
                          .transform(with_checks("events", as_of, lookups))
                          .transform(with_duplicates_marked)
                          .transform(with_customer_reasons(customer_status(customers, ingest_q)))
                          .transform(outcome("events")), f"{scratch}/events", freeing)
    quarantine = (customers.transform(quarantine_rows("customers"))
                  .unionByName(events.transform(quarantine_rows("events")))
                  .repartition("dataset", "source_file"))   # few rows: a few right-sized files
    # Silver stays hash-partitioned by customer (the features stage aggregates per customer; in the files mode, as
    # the scratch files are: one customer's rows side by side); adaptive execution sizes its files. The three writes
    # run side by side (file commits: each table's Parquet files written by the executors, on the GPU under the gpu
    # profiles, then committed on the driver), so that one write's last tasks and commit do not leave the executors
    # idle.
    silver = {ds: (df.transform(silver_rows(ds)), delta_io.table_path(lake, f"silver_{ds}"))
              for ds, df in (("customers", customers), ("events", events))}
    # The accounting's count of each row's fate reads the same kept frames: beside the writes, checked against
    # their commits once all are done.
    commits = together({
        **{f"silver_{ds}": partial(delta_io.overwrite_counted, df, path, properties=SILVER_PROPERTIES[ds])
           for ds, (df, path) in silver.items()},
        "quarantine": lambda: delta_io.replace_where_counted(quarantine, delta_io.table_path(lake, "quarantine"),
                                                             f"stage = '{STAGE.name}'"),
        "fates": partial(fates, {"customers": customers, "events": events}),
    })
    counted = commits.pop("fates")
    record.wrote.update({name: c.version for name, c in commits.items()})
    record.counts = accounting(counted, ("customers", "events"), {name: c.rows for name, c in commits.items()})
    release(customers, events)
    return record


def _describe(record: StageRecord) -> str:
    return "; ".join(f"{ds}: silver {t['silver']:,} quarantined {sum(t['quarantined'].values()):,} "
                     f"duplicates_removed {t['duplicates_removed']:,}" for ds, t in record.counts["totals"].items())


STAGE = Stage("clean", "bronze -> silver (typed, canonical, deduplicated) + the quarantine's clean slice", run,
              params=(LAKE, AS_OF.but(default=NO_DEFAULT)),
              reads=("bronze_customers", "bronze_events", "quarantine"),
              writes=("silver_customers", "silver_events", "quarantine"), describe=_describe)


def well_formed(bronze: DataFrame) -> DataFrame:
    """A bronze table's records that ingest kept, without its flag (``contract.MALFORMED``; a table written before
    bronze held the malformed records has no flag, and only those)."""
    if MALFORMED not in bronze.columns:
        return bronze
    return bronze.where(F.col(MALFORMED).isNull()).drop(MALFORMED)


def materialised(spark: SparkSession, df: DataFrame, scratch: str | None = None,
                 freeing: list[threading.Thread] | None = None) -> DataFrame:
    """``df`` computed once for its several readers, as ``MATERIALISE_KEY`` says (every step is deterministic, each
    window having a total order, so every mode gives the same rows):

    - true (default): kept as rows in the executors' block stores (memory, then local disk), in its partitions,
      the rows' bytes packed into blocks of ``ROW_BLOCK_BYTES`` (``jvm/churn/spark/RowBlocks.java``):
      a local checkpoint keeps one object per row, and millions of live rows are what the JVM's garbage collector
      walks and copies at every collection while the frame is built (a quarter of the events' classification on 2
      cores at 1M customers; docs/etl.md). Not ``persist()``: a DataFrame cache converts every row into column
      batches, which on these wide string rows cost more than the classification itself, and its plan keeps the 200
      shuffle partitions (adaptive execution may not coalesce a cached plan). A lost block is computed again.
    - false: not kept; each reader computes ``df`` again (its shuffle of the raw rows too).
    - files: written once as Parquet to ``scratch`` and read back (a Parquet write and scan run on the GPU; the
      caller removes ``scratch``). The rows keep their order within each file, so a customer's rows stay side
      by side; the shuffle behind them is freed once written (``free_shuffle_files``): at 500M records the raw
      rows' shuffle is tens of GB of local disk. The freeing runs beside the caller's next queries: its thread is
      added to ``freeing``, which the caller joins."""
    mode = materialise_mode(spark)
    if mode == "false":
        return df
    if mode == "true":
        return DataFrame(spark._jvm.churn.spark.RowBlocks.keep(df._jdf, ROW_BLOCK_BYTES), spark)
    if scratch is None or freeing is None:
        raise ValueError("materialised: the files mode needs a scratch folder and a list for its freeing thread")
    with plans.observing(df, scratch):   # the classification's plan, for the GPU plan collector (its readers scan files)
        df.write.mode("overwrite").parquet(scratch)
    freeing.append(free_shuffle_files(spark))
    return spark.read.schema(df.schema).parquet(scratch)   # the schema known: no Spark job to infer it from a footer


def materialise_mode(spark: SparkSession) -> str:
    return conf_choice(spark, MATERIALISE_KEY, MATERIALISE_MODES, "true")


def lookup_mode(spark: SparkSession) -> str:
    return conf_choice(spark, LOOKUP_KEY, LOOKUP_MODES, "lazy")


# ---------------------------------------------------------------------------------------------------------
# Expression helpers: SQL text (jobs/lake/sqltext.py), one call to the JVM per expression
# ---------------------------------------------------------------------------------------------------------
WHITE_SPACE_RUN = literal(r"\s+")
REPLACEMENT_CHARACTER = literal("\ufffd")   # what ingest decodes a byte that is not UTF-8 into


def is_blank(c: str) -> str:
    return f"({c} IS NULL OR trim({c}) = '')"


def only_where(condition: str, c: str) -> str:
    """``c`` where ``condition`` holds, else an empty string: the input of a costly branch of a CASE on
    ``condition``. The GPU evaluates every branch of a CASE over every row and then picks (the CPU only the branch a
    row takes), so a costly branch given the whole column costs the GPU its work on every row; given this, its
    string kernels pass over the few values that take it."""
    return f"CASE WHEN {condition} THEN {c} ELSE '' END"


def category_key(c: str) -> str:
    """How spellings are matched: lower case, trimmed, inner runs of white space collapsed to one space."""
    return f"trim(regexp_replace(lower({c}), {WHITE_SPACE_RUN}, ' '))"


def category_lookup(column: str) -> dict[str, str]:
    """A categorical column's spellings (lower-case keys, as ``category_key`` gives them) -> canonical value."""
    lookup = {v.lower(): v for v in CATEGORIES[column]}
    lookup.update(SPELLINGS.get(column, {}))
    return lookup


def canonical_category(column: str) -> str:
    """Canonical value of a categorical column, null if blank or unknown: the ``lazy`` lookup (see LOOKUP_KEY), a
    literal map. Most values are spelled canonically but for case, so they are looked up lower-cased first; only a
    miss pays for the regular expression of ``category_key`` (the key of a value that needs none is the same)."""
    table = "map(" + ", ".join(literal(x) for kv in sorted(category_lookup(column).items()) for x in kv) + ")"
    c = ident(column)
    return f"coalesce({table}[lower({c})], {table}[{category_key(c)}])"


def keyed_category(column: str, key: str) -> str:
    """The same value as ``canonical_category`` from the column's ``category_key`` (``key``, a column computed
    once): the ``keyed`` lookup, one CASE with a branch per canonical value, its spellings in an IN list."""
    spellings: dict[str, list[str]] = {}
    for spelling, value in sorted(category_lookup(column).items()):
        spellings.setdefault(value, []).append(spelling)
    return "CASE " + " ".join(f"WHEN {key} IN ({', '.join(literal(k) for k in keys)}) THEN {literal(value)}"
                              for value, keys in sorted(spellings.items())) + " END"


def parsed_number(column: str) -> str:
    c = f"trim({ident(column)})"
    return f"CASE WHEN {c} RLIKE {literal(NUMBER_PATTERN)} THEN CAST({c} AS DOUBLE) END"


def parsed_date(column: str, fmt: str) -> str:
    return f"{'to_timestamp' if 'HH' in fmt else 'to_date'}(trim({ident(column)}), {literal(fmt)})"


def within(c: str, lo: float | int, hi: float | int) -> str:
    return f"({c} >= {literal(lo)} AND {c} <= {literal(hi)})"


CUSTOMER_KEY = "_cid"


def customer_key() -> Column:
    """What a row's customer is known by: its customer_id as silver holds it (trimmed)."""
    return F.trim(F.col("customer_id"))


def with_customer_key(df: DataFrame) -> DataFrame:
    """``CUSTOMER_KEY`` (``customer_key``) as a column, unless there already: both datasets are partitioned by it,
    and every window and join that involves customers is keyed by it. A column, not an expression in the window
    and join keys: a sort evaluates its key expressions again at every comparison."""
    return df if CUSTOMER_KEY in df.columns else df.withColumn(CUSTOMER_KEY, customer_key())


# ---------------------------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------------------------
def with_checks(dataset: str, as_of: str, lookups: str = "lazy"):
    """Adds ``reason`` / ``detail`` (null for a valid row) and the typed, canonical columns ``t_<name>``, the
    categorical ones looked up as ``lookups`` says (LOOKUP_KEY).

    Every condition is evaluated at most once per row: the checks are one CASE with a branch per (check, column)
    pair in CLEAN_CHECK_ORDER, each giving "reason:column" when it fails, so the first failure is the answer and
    the CPU evaluates no condition after it (a CASE for the reason beside a second one for the detail would test
    each condition twice: Spark shares no subexpression inside conditional branches). The GPU evaluates every
    condition and then picks the first true one's literal in one step (the plugin's fused CASE, for more than two
    branches whose values are all string literals), where a ``coalesce`` of one CASE per pair made a string column
    of every row per pair."""
    columns = DATASETS[dataset]

    def transform(df: DataFrame) -> DataFrame:
        typed = {c: parsed_number(c) for c in NUMBERS[dataset]}
        typed.update({c: parsed_date(c, fmt) for c, fmt in DATES[dataset].items()})
        keys = {c: f"_k_{c}" for c in CATEGORIES_OF[dataset]}
        if lookups == "keyed":   # a select of its own: each key is computed once, the CASE reads it per branch
            df = df.selectExpr("*", *[f"{category_key(ident(c))} AS {ident(k)}" for c, k in keys.items()])
            typed.update({c: keyed_category(c, ident(k)) for c, k in keys.items()})
        else:
            typed.update({c: canonical_category(c) for c in CATEGORIES_OF[dataset]})
        df = df.selectExpr("*", *[f"{e} AS {ident(f't_{c}')}" for c, e in typed.items()]).drop(*keys.values())
        t = lambda c: ident(f"t_{c}")  # noqa: E731
        # a value given (not blank) that did not parse or look up
        unparsed = lambda c: f"(NOT {is_blank(ident(c))} AND {t(c)} IS NULL)"  # noqa: E731
        checks = {
            "invalid_utf8": {c: f"contains({ident(c)}, {REPLACEMENT_CHARACTER})" for c in columns},
            "missing_required": {c: is_blank(ident(c)) for c in REQUIRED[dataset]},
            "bad_number": {c: unparsed(c) for c in NUMBERS[dataset]},
            "bad_date": {c: unparsed(c) for c in DATES[dataset]},
            "unknown_category": {c: unparsed(c) for c in CATEGORIES_OF[dataset]},
            "out_of_range": {c: f"NOT {within(t(c), lo, hi)}" for c, (lo, hi) in NUMBERS[dataset].items()},
            "impossible_date": impossible_dates(dataset, as_of),
        }
        failed = "CASE " + " ".join(f"WHEN {cond} THEN {literal(f'{name}:{c}')}"
                                    for name in CLEAN_CHECK_ORDER for c, cond in checks[name].items()) + " END"
        return (df.withColumn("_failed", expr(failed))
                .withColumn("reason", F.substring_index("_failed", ":", 1))
                .withColumn("detail", F.substring_index("_failed", ":", -1))
                .drop("_failed"))
    return transform


def impossible_dates(dataset: str, as_of: str) -> dict[str, str]:
    """Dates that parse but cannot be true: after the as-of date, before EARLIEST_DATE, or (customers) an age
    at signup outside AGE_AT_SIGNUP_RANGE (whole years)."""
    as_of_d, earliest = f"CAST({literal(as_of)} AS DATE)", f"CAST({literal(EARLIEST_DATE)} AS DATE)"
    if dataset == "events":
        day = f"to_date({ident('t_event_ts')})"
        return {"event_ts": f"({day} > {as_of_d} OR {day} < {earliest})"}
    signup = ident("t_signup_date")
    age = f"floor(months_between({signup}, {ident('t_birth_date')}) / 12)"
    return {"signup_date": f"({signup} > {as_of_d} OR {signup} < {earliest})",
            "birth_date": f"NOT {within(age, *AGE_AT_SIGNUP_RANGE)}"}


CUSTOMER_HASH = "_chash"
# Keys that group a customer's rows and lead the duplicate window's keys (``with_copies_numbered``), a hash first so
# that its sort compares one long for most pairs of rows.
CUSTOMER_GROUP = (CUSTOMER_HASH, CUSTOMER_KEY)


def with_customer_group(df: DataFrame) -> DataFrame:
    """``CUSTOMER_KEY`` and ``CUSTOMER_HASH`` (a 64-bit hash of the key) as columns, unless there already."""
    df = df.transform(with_customer_key)
    return df if CUSTOMER_HASH in df.columns else df.withColumn(CUSTOMER_HASH, F.xxhash64(CUSTOMER_KEY))


def with_copies_numbered(columns: tuple[str, ...]):
    """``_copy``: 1 for the first row (in input order: source_file, record_number) of each set of rows with
    identical raw fields, 2, 3, ... for its copies. Exact means the CSV fields as read, byte for byte: two rows
    that differ only in spelling are different records (and, for customers, a conflict).

    Run on the raw rows, before the checks: the checks are a function of the raw fields alone, so copies share
    their validity, and the window's sort moves rows without the typed columns. Its keys are ``CUSTOMER_GROUP``,
    then a 64-bit hash of the raw fields, then the fields themselves: the sort compares longs for almost every pair
    of rows (the fields only on a hash collision, and they stay keys, so a collision never merges two records); a
    frame partitioned by the customer key (``run``) is not shuffled again; and the rows come out grouped by
    customer. That order serves the superseded window (``with_superseded_marked``, no sort of its own), and it is
    the order silver is written in: a customer's rows side by side make silver smaller (its customer_id column in
    runs of one value) and the features' per-customer aggregation faster (figures in docs/etl.md)."""
    def transform(df: DataFrame) -> DataFrame:
        keyed = df.transform(with_customer_group).withColumn("_hash", F.xxhash64(*columns))
        copies = Window.partitionBy(*CUSTOMER_GROUP, "_hash", *columns).orderBy(*LINEAGE)
        return keyed.withColumn("_copy", F.row_number().over(copies)).drop("_hash")
    return transform


def with_duplicates_marked(df: DataFrame) -> DataFrame:
    """``_fate`` of a checked row with ``_copy`` (``with_copies_numbered``): its reason if invalid (invalid rows are
    never deduplicated: each keeps its own quarantine row), 'duplicate' for a later copy of a valid row, else
    'kept'."""
    fate = (F.when(F.col("reason").isNotNull(), F.col("reason"))
            .when(F.col("_copy") > 1, F.lit(DUPLICATE)).otherwise(F.lit(KEPT)))
    return df.withColumn("_fate", fate).drop("_copy")


# Separates the parts of ``version_key``: below every character of a file name (POSIX names hold no NUL), so a key
# orders as its (updated_at, source_file, record_number) would, a file name that is a prefix of another first.
KEY_SEPARATOR = "\u0000"
RECORD_DIGITS = 19   # a long's decimal digits: record numbers zero-padded to this width order as numbers


def version_key() -> Column:
    """A kept customer row's version as one string that orders as (updated_at, source_file, record_number) does:
    the timestamp as ``yyyy-MM-dd HH:mm:ss`` (fixed width: the checks parse four-digit years only), the file name,
    the record number zero-padded."""
    return F.concat_ws(KEY_SEPARATOR, F.col("t_updated_at").cast("string"), F.col("source_file"),
                       F.lpad(F.col("record_number").cast("string"), RECORD_DIGITS, "0"))


def with_superseded_marked(df: DataFrame) -> DataFrame:
    """Of the kept rows of one customer (``customer_key``), the latest updated_at wins (ties: the later record in
    the input); the others get reason 'superseded' and, as detail, where the winning row is.

    The winner is the row whose ``version_key`` is the customer's greatest: one ``max`` over a window partitioned by
    ``CUSTOMER_GROUP`` without an order, so rows sorted by ``with_copies_numbered`` are not sorted again, and one
    window operator passes over the rows (a max per field, each depending on the last, took three; the GPU has no
    ``max`` of a struct). Record numbers are unique within a file, so the winner is one row."""
    group = Window.partitionBy(*CUSTOMER_GROUP)
    kept = F.col("_fate") == KEPT
    ranked = (df.transform(with_customer_group)
              .withColumn("_version", F.when(kept, version_key()))
              .withColumn("_winner", F.max("_version").over(group)))
    loses = kept & (F.col("_version") != F.col("_winner"))
    winner = F.col("_winner")
    where = F.concat(F.substring_index(F.substring_index(winner, KEY_SEPARATOR, 2), KEY_SEPARATOR, -1), F.lit(":"),
                     F.substring_index(winner, KEY_SEPARATOR, -1).cast("long").cast("string"))
    return (ranked
            .withColumn("reason", F.when(loses, F.lit("superseded")).otherwise(F.col("reason")))
            .withColumn("detail", F.when(loses, F.concat(F.lit("superseded by "), where)).otherwise(F.col("detail")))
            .withColumn("_fate", F.when(loses, F.lit("superseded")).otherwise(F.col("_fate")))
            .drop("_version", "_winner"))


def customer_status(customers: DataFrame, quarantine: DataFrame) -> DataFrame:
    """One row per customer key of every customer record in the input, with ``_in_silver`` 1 if one of its rows
    is kept (goes to silver), else 0. The records are the classified bronze rows (``_fate``) and those ingest
    quarantined (wrong field count, unclosed quote: the first CSV field of their raw text; ids hold no comma or
    quote)."""
    malformed = quarantine.where((F.col("stage") == "ingest") & (F.col("dataset") == "customers"))
    first_field = F.regexp_extract(F.col("raw"), r'^"?([^",\r\n]*)', 1)
    return (customers.select(customer_key().alias("_known"), (F.col("_fate") == KEPT).cast("int").alias("_in_silver"))
            .unionByName(malformed.select(F.trim(first_field).alias("_known"), F.lit(0).alias("_in_silver")))
            .groupBy("_known").agg(F.max("_in_silver").alias("_in_silver")))


def with_customer_reasons(status: DataFrame):
    """Kept events whose customer is in no customer record -> 'unknown_customer'; in some but not in silver
    (every row of the customer quarantined) -> CASCADE_REASON. ``status``: see customer_status. A hash join on
    the customer key: the events, partitioned by it, are neither shuffled nor sorted again."""
    def transform(df: DataFrame) -> DataFrame:
        keyed = df.transform(with_customer_key)
        joined = keyed.join(status.hint("shuffle_hash"), keyed[CUSTOMER_KEY] == status["_known"], "left")
        kept = F.col("_fate") == KEPT
        new_reason = (F.when(kept & F.col("_known").isNull(), F.lit("unknown_customer"))
                      .when(kept & (F.col("_in_silver") == 0), F.lit(CASCADE_REASON)))
        return (joined
                .withColumn("reason", F.coalesce(new_reason, F.col("reason")))
                .withColumn("detail", F.when(new_reason.isNotNull(), F.lit("customer_id"))
                            .otherwise(F.col("detail")))
                .withColumn("_fate", F.coalesce(new_reason, F.col("_fate")))
                .drop("_known", "_in_silver"))
    return transform


RAW = "_raw"   # an outcome frame's raw CSV fields, as a struct, for the rows with a reason only


def outcome(dataset: str):
    """A classified row reduced to what its writers read: the silver columns (typed, canonical, trimmed ids, in
    contract order), the lineage, ``_fate``, ``reason``, ``detail`` and ``RAW`` (the CSV fields as read, one
    struct; only for a row with a reason, null for the others, which never reach the quarantine). The raw fields
    and the classification's helper columns are dropped here, so a materialised frame keeps rows half as wide.

    The quarantine's JSON of the raw fields is built from ``RAW`` after the filter (``quarantine_rows``), not here:
    the GPU evaluates every branch of a CASE for every row, so a JSON built here would run its chains of replaces
    on every row of the dataset, where the quarantine needs a few in a hundred (docs/gpu.md)."""
    columns = DATASETS[dataset]
    typed = set(NUMBERS[dataset]) | set(DATES[dataset]) | set(CATEGORIES_OF[dataset])

    def transform(df: DataFrame) -> DataFrame:
        out = [f"{ident(f't_{c}')} AS {ident(c)}" if c in typed else f"trim({ident(c)}) AS {ident(c)}"
               if c.endswith("_id") else ident(c) for c in columns]
        raw = f"CASE WHEN reason IS NOT NULL THEN struct({', '.join(map(ident, columns))}) END AS {ident(RAW)}"
        return df.selectExpr(*out, *map(ident, LINEAGE), "_fate", "reason", "detail", raw)
    return transform


def silver_rows(dataset: str):
    """Kept rows of an ``outcome`` frame: the silver columns in contract order, plus lineage."""
    columns = DATASETS[dataset]

    def transform(df: DataFrame) -> DataFrame:
        return df.where(F.col("_fate") == KEPT).select(*columns, *LINEAGE)
    return transform


# JSON string escapes as Spark's to_json writes them (Jackson): backslash and quote, the five short forms, every
# other control character as \u00XX in upper-case hex; everything else as it is.
_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_CONTROL = "".join(chr(i) for i in range(32))
_ESCAPED = "\\\"" + _CONTROL
_BACKSLASH, _BACKSLASH_ESCAPED = literal("\\"), literal("\\\\")
_QUOTE, _QUOTE_ESCAPED = literal('"'), literal('\\"')
_NUL_ESCAPED = literal("\\u0000")
# U+0001-U+000F and U+0010-U+001F: the escape's first five characters put before the character
_CONTROL_ESCAPES = ((literal(r"([\x01-\x0F])"), literal(r"\\u000$1")),
                    (literal(r"([\x10-\x1F])"), literal(r"\\u001$1")))


def json_string(c: str) -> str:
    """``c`` as a JSON string literal, quotes included (null stays null). Built from replace, regexp_replace and
    translate, which the RAPIDS Accelerator runs on the GPU (its to_json is off by default), in eleven steps
    whatever the characters: backslash and quote escaped, then the five short forms; NUL replaced by its escape;
    then each other control character gets the escape's first five characters put before it (two regular
    expressions: U+0001-U+000F, U+0010-U+001F) and is itself translated into its last hex digit. The GPU runs
    every step over every row it is given (one step per character would be 34), so the steps take only the values
    that hold a character to escape (``only_where``; rare), as the CPU's evaluation of the CASE does by itself."""
    needs = f"length(translate({c}, {literal(_ESCAPED)}, '')) < length({c})"
    escaped = f"replace({only_where(needs, c)}, {_BACKSLASH}, {_BACKSLASH_ESCAPED})"
    escaped = f"replace({escaped}, {_QUOTE}, {_QUOTE_ESCAPED})"
    for ch, short in _SHORT_ESCAPES.items():
        escaped = f"replace({escaped}, {literal(ch)}, {literal(short)})"
    escaped = f"replace({escaped}, {literal(chr(0))}, {_NUL_ESCAPED})"
    for pattern, prefix in _CONTROL_ESCAPES:
        escaped = f"regexp_replace({escaped}, {pattern}, {prefix})"
    escaped = f"translate({escaped}, {literal(_CONTROL)}, {literal('0123456789ABCDEF' * 2)})"
    return f"concat({_QUOTE}, CASE WHEN {needs} THEN {escaped} ELSE {c} END, {_QUOTE})"


def json_object(columns: tuple[str, ...], struct: str | None = None) -> Column:
    """The string columns (fields of the struct column ``struct``, if given) as one JSON object, nulls as null:
    byte for byte what ``to_json(struct(*columns), {"ignoreNullFields": "false"})`` writes (tests/stages/test_clean.py
    holds them equal)."""
    field = (lambda c: f"{ident(struct)}.{ident(c)}") if struct else ident   # noqa: E731
    key = lambda c: literal(f'"{c}":')   # noqa: E731
    fields = [f"concat({key(c)}, coalesce({json_string(field(c))}, 'null'))" for c in columns]
    return expr(f"concat('{{', concat_ws(',', {', '.join(fields)}), '}}')")


def quarantine_rows(dataset: str):
    """Rows of an ``outcome`` frame with a reason, in quarantine shape (``raw``: every CSV field as JSON, nulls
    too, ``json_object``)."""
    columns = DATASETS[dataset]

    def transform(df: DataFrame) -> DataFrame:
        return df.where(F.col("reason").isNotNull()).select(
            F.lit(dataset).alias("dataset"), F.lit(STAGE.name).alias("stage"), *LINEAGE,
            json_object(columns, RAW).alias("raw"), "reason", "detail").select(*QUARANTINE_COLUMNS)
    return transform


# ---------------------------------------------------------------------------------------------------------
# Accounting: the fates counted in the classified frames, checked against what the writes committed.
# ---------------------------------------------------------------------------------------------------------
def fates(classified: dict[str, DataFrame]) -> list:
    """The classified rows counted per dataset, input file and fate (one aggregation, a few rows per input file
    back): what ``accounting`` checks."""
    return (reduce(DataFrame.unionByName,
                   [df.select(F.lit(ds).alias("dataset"), "source_file", "_fate") for ds, df in classified.items()])
            .groupBy("dataset", "source_file", "_fate").agg(F.count(F.lit(1)).alias("n"))
            .collect())  # a few rows per input file


def accounting(rows: list, datasets: tuple[str, ...], written: dict[str, int]) -> dict:
    """Per dataset and per file: bronze rows in = silver + quarantined (by reason) + duplicates removed, from each
    row's fate (``fates``); the rows each Delta write reports in its commit (``written``) must equal what the fates
    send there, else the stage fails."""
    files: dict = {ds: {} for ds in datasets}
    for r in rows:
        f = files[r["dataset"]].setdefault(r["source_file"], {"bronze": 0, "silver": 0, "quarantined": {},
                                                              "duplicates_removed": 0})
        f["bronze"] += r["n"]
        if r["_fate"] == KEPT:
            f["silver"] = r["n"]
        elif r["_fate"] == DUPLICATE:
            f["duplicates_removed"] = r["n"]
        else:
            f["quarantined"][r["_fate"]] = r["n"]
    totals = {}
    for ds, per_file in files.items():
        reasons: dict[str, int] = {}
        for f in per_file.values():
            for k, n in f["quarantined"].items():
                reasons[k] = reasons.get(k, 0) + n
        totals[ds] = {"bronze": sum(f["bronze"] for f in per_file.values()),
                      "silver": sum(f["silver"] for f in per_file.values()),
                      "quarantined": dict(sorted(reasons.items())),
                      "duplicates_removed": sum(f["duplicates_removed"] for f in per_file.values())}
    expected = {**{f"silver_{ds}": t["silver"] for ds, t in totals.items()},
                "quarantine": sum(sum(t["quarantined"].values()) for t in totals.values())}
    wrong = {name: (n, written[name]) for name, n in expected.items() if written[name] != n}
    if wrong:
        raise RuntimeError("clean's writes do not hold the rows its classification sent them ("
                           + ", ".join(f"{name}: {n:,} sent, {w:,} committed" for name, (n, w) in wrong.items())
                           + "): a bug in clean or in the table writer; the stage's tables are put back")
    # Flat figures first (rows in silver per dataset, quarantined in all, duplicates per dataset) for
    # progress lines and the report.
    return {**{ds: totals[ds]["silver"] for ds in datasets},
            "quarantined": expected["quarantine"],
            "duplicates_removed": {ds: totals[ds]["duplicates_removed"] for ds in datasets},
            "written": {name: written[name] for name in sorted(written)},
            "files": {ds: dict(sorted(files[ds].items())) for ds in datasets}, "totals": totals}
