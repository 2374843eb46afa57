"""The profile comparison (tools/compare.py): predictions compared customer by customer, deciles at their edges."""
from __future__ import annotations

import pytest


def test_prediction_agreement_compares_customer_by_customer(spark, tmp_path):
    from jobs.lake import delta_io
    from tools import compare

    schema = "customer_id string, churn_probability double, decile int, run_id string"
    left = [("a", 0.1, 1, "r1"), ("b", 0.5, 5, "r1"), ("c", 0.9, 10, "r1"), ("a", 0.7, 7, "old")]
    right = [("a", 0.1, 1, "r2"), ("b", 0.52, 6, "r2"), ("c", 0.9, 10, "r2"), ("d", 0.3, 3, "r2")]
    for side, rows in (("l", left), ("r", right)):
        delta_io.overwrite(spark.createDataFrame(rows, schema), delta_io.table_path(str(tmp_path / side), "predictions"))
    got = compare.prediction_agreement(spark, str(tmp_path / "l"), str(tmp_path / "r"), ("r1", "r2"))
    # The "old" slice on the left is not compared; d is only on the right: 4 rows, 3 matched.
    assert (got["rows"], got["matched"]) == (4, 3)
    assert got["max_abs_diff"] == pytest.approx(0.02) and got["mean_abs_diff"] == pytest.approx(0.02 / 3)
    assert got["same_decile_share"] == pytest.approx(2 / 3) and got["max_decile_step"] == 1
    # d is missing on the left and b's probability is 0.02 off: no parity.
    assert len(compare.compare_predictions(got)) == 2


def test_a_decile_may_move_by_one_at_its_edge_when_probabilities_agree():
    from tools import compare

    edge = {"rows": 3, "matched": 3, "max_abs_diff": 2.1e-7, "mean_abs_diff": 1e-8, "same_decile_share": 2 / 3,
            "max_decile_step": 1}
    assert compare.compare_predictions(edge) == []
    assert compare.compare_predictions({**edge, "max_decile_step": 2}) == [
        "a customer's decile differs by 2 (at most 1 at a decile's edge)"]
    assert compare.compare_predictions({**edge, "max_abs_diff": 2e-6}) == [
        "probability differs by up to 2e-06 (tolerance 1e-06)"]
    # The predictions table's exact checksum leaves decile to that check; other tables keep theirs.
    left = {"__rows": 3, "decile": {"kind": "exact", "nulls": 0, "checksum": "1"}}
    right = {"__rows": 3, "decile": {"kind": "exact", "nulls": 0, "checksum": "2"}}
    assert compare.compare_profiles(left, right, compare.DERIVED_COLUMNS["predictions"]) == []
    assert compare.compare_profiles(left, right) != []


def test_a_struct_of_strings_is_compared_exactly(spark):
    """Bronze's ``malformed`` (struct of reason, detail, raw): a difference inside it is a difference."""
    from tools import compare

    schema = "id string, malformed struct<reason: string, detail: string, raw: string>"
    base = [("a", None), ("b", ("wrong_field_count", "expected 7 fields", "b,1"))]
    moved = [("a", None), ("b", ("wrong_field_count", "expected 7 fields", "b,2"))]
    left = compare.column_profile(spark.createDataFrame(base, schema))
    assert left["malformed"]["kind"] == "exact"
    assert compare.compare_profiles(left, compare.column_profile(spark.createDataFrame(list(base), schema))) == []
    assert compare.compare_profiles(left, compare.column_profile(spark.createDataFrame(moved, schema))) != []
