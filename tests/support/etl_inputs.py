"""Inputs of the ETL stages' tests (ingest, clean, features, and them together): the as-of date, valid raw
customer rows and CSV input folders."""
from __future__ import annotations

from jobs.lake.contract import CUSTOMER_COLUMNS, EVENT_COLUMNS

AS_OF = "2026-06-30"
CUSTOMERS_HEADER = ",".join(CUSTOMER_COLUMNS)
EVENTS_HEADER = ",".join(EVENT_COLUMNS)


def customer(record_number: int = 0, **fields) -> dict:
    """A valid raw customer row (all strings, as bronze holds it), with some fields replaced."""
    row = dict(customer_id="C0000000001", updated_at="2026-01-01 10:00:00", signup_date="2020-01-15",
               birth_date="1980-05-05", gender="Female", region="North", partner="Yes", dependents="No",
               contract_type="One year", payment_method="Credit card", paperless_billing="Yes",
               phone_service="Yes", multiple_lines="No", internet_service="DSL", online_security="Yes",
               online_backup="No", device_protection="No", tech_support="No", streaming_tv="Yes",
               streaming_movies="No", monthly_charges="50.00", address="1 Main St")
    row.update(fields)
    row.update(source_file="customers-00000.csv", record_number=record_number)
    return row


def write_input(root, customers: str, events: dict[str, str]) -> str:
    (root / "customers").mkdir(parents=True)
    (root / "events").mkdir()
    (root / "customers" / "customers-00000.csv").write_text(customers)
    for name, text in events.items():
        (root / "events" / name).write_text(text)
    return str(root)


def good_customer_line(cid: str) -> str:
    r = customer(customer_id=cid)
    return ",".join(r[c] for c in CUSTOMER_COLUMNS)
