"""SQL text through Spark's own parser: what ``literal`` and ``ident`` write reads back as the value and the
column they were given, and a session that reads literals without escapes is stopped."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.lake.session import session_conf
from jobs.lake.sqltext import ESCAPED_LITERALS_KEY, expr, ident, literal, require_escapes

AWKWARD = ["", "plain", "it's", "back\\slash", "\\'", "tab\tnew\nline", "\x00nul", "\x01\x1f", "%_\\%\\_",
           "\\u0041 stays six characters", "é ü \u2028 \ufffd", "\\s+", "'; DROP TABLE x; --", "`tick`"]


def test_string_literals_read_back_as_written(spark):
    row = spark.range(1).select(*[expr(literal(s)).alias(f"c{i}") for i, s in enumerate(AWKWARD)]).first()
    assert list(row) == AWKWARD


def test_numbers_keep_their_types_and_none_is_null(spark):
    df = spark.range(1).select(expr(literal(0.5)).alias("d"), expr(literal(1000.0)).alias("big"),
                               expr(literal(16)).alias("i"), expr(literal(None)).alias("n"))
    assert [f.dataType.simpleString() for f in df.schema.fields] == ["double", "double", "int", "void"]
    assert tuple(df.first()) == (0.5, 1000.0, 16, None)
    with pytest.raises(TypeError):
        literal(True)


def test_a_regular_expression_reaches_the_function_unchanged(spark):
    df = spark.createDataFrame([("a  b\t c",)], "s string")
    pattern = literal(r"\s+")
    got = df.select(expr(f"regexp_replace(s, {pattern}, {literal(' ')})")).first()[0]
    assert got == "a b c"


def test_identifiers_name_awkward_columns(spark):
    df = spark.createDataFrame([(1, 2)], "`odd name` int, `back``tick` int")
    assert df.selectExpr(f"{ident('odd name')} + {ident('back`tick')} AS s").first()["s"] == 3


def test_a_session_without_escapes_is_stopped_with_the_setting_named(spark):
    require_escapes(spark)
    with session_conf(spark, {ESCAPED_LITERALS_KEY: "true"}):
        with pytest.raises(UserError, match=ESCAPED_LITERALS_KEY):
            require_escapes(spark)
        # what the stop prevents: the escaped backslash reaches the regular expression doubled
        assert spark.range(1).select(expr(literal("\\"))).first()[0] == "\\\\"
    assert spark.range(1).select(F.expr(literal("\\"))).first()[0] == "\\"
