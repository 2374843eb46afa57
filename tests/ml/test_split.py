"""The split (jobs.ml.split): train / validation / test by the customer id alone."""
from __future__ import annotations

import pytest

from jobs.ml.split import with_split


def test_split_is_a_function_of_the_customer_id(spark):
    ids = spark.createDataFrame([(f"C{i:010d}",) for i in range(2000)], "customer_id string")
    first = {r[0]: r[1] for r in ids.transform(with_split).collect()}
    second = {r[0]: r[1] for r in ids.repartition(3).transform(with_split).collect()}
    assert first == second
    shares = {s: sum(v == s for v in first.values()) / 2000 for s in ("train", "validation", "test")}
    assert shares["train"] == pytest.approx(0.70, abs=0.04)
    assert shares["validation"] == pytest.approx(0.15, abs=0.03)
