"""The data contract every stage shares: CSV layouts, canonical categories, defect kinds and their fate,
quarantine reasons, table locations and the gold feature set.

The generator injects defects by this contract and counts them in manifest.json; ingest/clean send each
defect where ``DEFECT_FATE`` says; tests check one against the other. Change it here and nowhere else.
"""
from __future__ import annotations

from pyspark.sql.types import StringType, StructField, StructType

# ---------------------------------------------------------------------------------------------------------
# CSV layouts (header line, ',' separator, '"' quotes doubled inside quoted fields, '\n' line ends).
# Generated text is ASCII, except the invalid_utf8 defect (a lone Latin-1 byte, as a legacy system writes).
# ---------------------------------------------------------------------------------------------------------
CUSTOMER_COLUMNS = (
    "customer_id",        # C + 10 digits, unique per customer
    "updated_at",         # yyyy-MM-dd HH:mm:ss, when the CRM last changed the record
    "signup_date",        # yyyy-MM-dd
    "birth_date",         # yyyy-MM-dd
    "gender",
    "region",
    "partner",
    "dependents",
    "contract_type",
    "payment_method",
    "paperless_billing",
    "phone_service",
    "multiple_lines",
    "internet_service",
    "online_security",
    "online_backup",
    "device_protection",
    "tech_support",
    "streaming_tv",
    "streaming_movies",
    "monthly_charges",    # decimal, 2 places
    "address",            # free text: may hold ',', '"' and newlines (quoted)
)
EVENT_COLUMNS = (
    "event_id",           # E + 12 digits
    "customer_id",
    "event_ts",           # yyyy-MM-dd HH:mm:ss
    "event_type",
    "amount",             # decimal, 2 places; 0.00 where the type carries no amount
    "channel",
    "note",               # free text, may be empty; may hold ',', '"' and newlines (quoted)
)
DATASETS = {"customers": CUSTOMER_COLUMNS, "events": EVENT_COLUMNS}

DATE_FORMAT = "yyyy-MM-dd"
TIMESTAMP_FORMAT = "yyyy-MM-dd HH:mm:ss"


def string_schema(columns: tuple[str, ...]) -> StructType:
    """Bronze reads every CSV field as a string: typing is the clean stage's job, so nothing is lost on read."""
    return StructType([StructField(c, StringType(), True) for c in columns])


CUSTOMERS_CSV_SCHEMA = string_schema(CUSTOMER_COLUMNS)
EVENTS_CSV_SCHEMA = string_schema(EVENT_COLUMNS)

# ---------------------------------------------------------------------------------------------------------
# Categories: canonical values, and the known other spellings clean maps onto them. Matching is done on
# lower(trim(value)) with inner runs of white space collapsed to one space.
# ---------------------------------------------------------------------------------------------------------
YES_NO = ("Yes", "No")
CATEGORIES: dict[str, tuple[str, ...]] = {
    "gender": ("Female", "Male"),
    "region": ("North", "South", "East", "West", "Central"),
    "partner": YES_NO,
    "dependents": YES_NO,
    "contract_type": ("Month-to-month", "One year", "Two year"),
    "payment_method": ("Electronic check", "Mailed check", "Bank transfer", "Credit card"),
    "paperless_billing": YES_NO,
    "phone_service": YES_NO,
    "multiple_lines": YES_NO,
    "internet_service": ("DSL", "Fiber optic", "No"),
    "online_security": YES_NO,
    "online_backup": YES_NO,
    "device_protection": YES_NO,
    "tech_support": YES_NO,
    "streaming_tv": YES_NO,
    "streaming_movies": YES_NO,
    "event_type": ("charge", "payment", "late_payment", "support_call", "plan_change", "usage", "termination"),
    "channel": ("web", "app", "phone", "store", "auto"),
}
_YES_NO_SPELLINGS = {"y": "Yes", "true": "Yes", "1": "Yes", "n": "No", "false": "No", "0": "No"}
SPELLINGS: dict[str, dict[str, str]] = {
    "gender": {"f": "Female", "m": "Male"},
    "contract_type": {"month to month": "Month-to-month", "monthly": "Month-to-month", "m2m": "Month-to-month",
                      "1 year": "One year", "one-year": "One year", "annual": "One year",
                      "2 year": "Two year", "two-year": "Two year"},
    "payment_method": {"e-check": "Electronic check", "echeck": "Electronic check",
                       "bank transfer (automatic)": "Bank transfer",
                       "credit card (automatic)": "Credit card", "cc": "Credit card"},
    "internet_service": {"fiber": "Fiber optic", "fibre optic": "Fiber optic", "fiber-optic": "Fiber optic",
                         "none": "No"},
    "event_type": {"late payment": "late_payment", "support call": "support_call", "plan change": "plan_change"},
    "channel": {"mobile": "app", "telephone": "phone", "online": "web"},
    **{c: _YES_NO_SPELLINGS for c, v in CATEGORIES.items() if v == YES_NO},
}
CUSTOMER_CATEGORICALS = tuple(c for c in CUSTOMER_COLUMNS if c in CATEGORIES)
EVENT_CATEGORICALS = ("event_type", "channel")

# Fields that may not be null or empty (the scenario's dropna, with every rejected row kept in quarantine).
REQUIRED = {
    "customers": ("customer_id", "updated_at", "signup_date", "birth_date", "contract_type",
                  "payment_method", "internet_service", "monthly_charges"),
    "events": ("event_id", "customer_id", "event_ts", "event_type", "amount"),
}

# Valid ranges (inclusive). Dates: signup and events not after the as-of date, nor before 2000-01-01;
# customers aged 16 to 110 at signup.
MONTHLY_CHARGES_RANGE = (0.0, 1000.0)
AMOUNT_RANGE = (0.0, 10000.0)
EARLIEST_DATE = "2000-01-01"
AGE_AT_SIGNUP_RANGE = (16, 110)

# ---------------------------------------------------------------------------------------------------------
# Defects: what the generator injects (each dirty row carries exactly one kind) and where each one ends up.
# ---------------------------------------------------------------------------------------------------------
QUARANTINE, KEPT, DEDUPLICATED = "quarantine", "kept", "deduplicated"
DEFECT_FATE = {
    # kind:                  (fate,          quarantine reason)
    "wrong_field_count":     (QUARANTINE,    "wrong_field_count"),   # ingest
    "invalid_utf8":          (QUARANTINE,    "invalid_utf8"),        # clean (decoded as U+FFFD)
    "missing_required":      (QUARANTINE,    "missing_required"),
    "bad_number":            (QUARANTINE,    "bad_number"),
    "bad_date":              (QUARANTINE,    "bad_date"),
    "unknown_category":      (QUARANTINE,    "unknown_category"),
    "out_of_range":          (QUARANTINE,    "out_of_range"),
    "impossible_date":       (QUARANTINE,    "impossible_date"),
    "conflicting_duplicate": (QUARANTINE,    "superseded"),          # customers only: older version loses
    "unknown_customer":      (QUARANTINE,    "unknown_customer"),    # events only: id in no customer row
    "exact_duplicate":       (DEDUPLICATED,  None),                  # extra copies removed, counted
    "messy_category":        (KEPT,          None),                  # case/space/known spelling, normalised
    "tricky_quoting":        (KEPT,          None),                  # ',', '"' or newline in a quoted field
}
DEFECT_KINDS = {
    "customers": tuple(k for k in DEFECT_FATE if k != "unknown_customer"),
    "events": tuple(k for k in DEFECT_FATE if k != "conflicting_duplicate"),
}
# Not a defect of the row itself: events of a customer whose every row was quarantined. Clean sets them
# aside with this reason; the generator counts them in manifest "cascade" (it injects no defect into them).
CASCADE_REASON = "customer_rejected"

# Order in which clean tests a row; the first failing check names the reason. Ingest comes before all.
CLEAN_CHECK_ORDER = ("invalid_utf8", "missing_required", "bad_number", "bad_date", "unknown_category",
                     "out_of_range", "impossible_date")
# Conflicting customer rows: the one with the latest updated_at wins (the CRM's newest state); ties go to the
# record later in the input (greater source_file, then record_number). Losers go to quarantine as superseded.

# ---------------------------------------------------------------------------------------------------------
# Churn label: a customer churned if they have a termination event in (cutoff, as_of], cutoff = as_of - 90 days.
# Features use only events at or before the cutoff, so nothing of the label window leaks into them.
# ---------------------------------------------------------------------------------------------------------
LABEL_WINDOW_DAYS = 90

# ---------------------------------------------------------------------------------------------------------
# Delta tables under the lake root (--lake). All Delta I/O goes through jobs.lake.delta_io.
# ---------------------------------------------------------------------------------------------------------
TABLES = {
    "bronze_customers": "bronze/customers",     # every record: the CSV fields, lineage, record_lines, MALFORMED
    "bronze_events": "bronze/events",
    "quarantine": "quarantine",                 # dataset, stage, source_file, record_number, raw, reason, detail
    "silver_customers": "silver/customers",
    "silver_events": "silver/events",
    "gold_features": "gold/customer_features",  # one row per customer: customer_id, label, FEATURES
    "predictions": "gold/predictions",          # customer_id, churn_probability, decile, run_id
    "runs": "runs",                             # one row per train run: run_id, metrics and metadata as JSON
}
# Bronze's flag: null for a record ingest keeps, else struct(reason, detail, raw) as its quarantine row holds them.
MALFORMED = "malformed"
QUARANTINE_COLUMNS = ("dataset", "stage", "source_file", "record_number", "raw", "reason", "detail")

# ---------------------------------------------------------------------------------------------------------
# Gold features: all numeric (doubles), categoricals one-hot encoded in the features stage with built-in
# expressions (GPU-friendly; no StringIndexer), one reference level dropped. Meanings: docs/features.md.
# ---------------------------------------------------------------------------------------------------------
ONE_HOT = {
    "contract_type": ("Month-to-month", "Two year"),          # reference: One year
    "payment_method": ("Electronic check", "Mailed check", "Credit card"),  # reference: Bank transfer
    "internet_service": ("Fiber optic", "DSL"),               # reference: No
    "gender": ("Female",),
    "region": ("North", "South", "East", "West"),             # reference: Central
}


def one_hot_name(column: str, value: str) -> str:
    return f"{column}__{value.lower().replace(' ', '_').replace('-', '_')}"


YES_NO_FEATURES = ("partner", "dependents", "paperless_billing", "phone_service", "multiple_lines",
                   "online_security", "online_backup", "device_protection", "tech_support",
                   "streaming_tv", "streaming_movies")
NUMERIC_FEATURES = (
    "tenure_months", "age", "senior", "monthly_charges", "services_count",
    "charges_180d", "avg_charge_180d", "charge_trend_90d", "payments_180d",
    "late_payments_90d", "late_payments_180d",
    "support_calls_30d", "support_calls_90d", "support_calls_365d",
    "usage_events_90d", "usage_amount_90d", "plan_changes_180d",
    "days_since_last_event", "days_since_last_payment", "events_total",
)
FEATURES = (NUMERIC_FEATURES + YES_NO_FEATURES
            + tuple(one_hot_name(c, v) for c, vals in ONE_HOT.items() for v in vals))
LABEL = "label"
ID = "customer_id"
