"""Parameters more than one stage takes, each declared once (name, help, default, how its text is read)."""
from __future__ import annotations

import datetime as dt

from jobs.core.stage import Param


def iso_date(text: str) -> str:
    """A yyyy-MM-dd date, kept as its text (Spark literals take it as it is)."""
    try:
        dt.date.fromisoformat(text)
    except (TypeError, ValueError):
        raise ValueError("not a date: give it as yyyy-MM-dd") from None
    return text


def floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError("expected comma-separated numbers") from None
    if not values:
        raise ValueError("expected at least one number")
    return values


LAKE = Param("lake", "root folder of the Delta tables")
AS_OF = Param("as_of", "as-of date (yyyy-MM-dd) of the data: the label window ends that day, later dates are "
              "impossible", default="2026-06-30", parse=iso_date)
DATA_IN = Param("data", "folder holding customers/ and events/ CSV files", flag="--input")
MODELS_DIR = Param("models_dir", "folder for <run_id>/model and <run_id>/run.json")
MANIFEST = Param("manifest", "generator manifest.json: its churn.oracle_auc is set beside the test AUC", default=None)
