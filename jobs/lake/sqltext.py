"""Spark SQL expressions written as text: the way a transform with many built-in function calls builds them.

Each call of the Column API (``F.lit``, ``F.col``, ``F.replace``, a Column method) is one to three round trips
from Python to the driver's JVM through py4j, each a fraction of a millisecond: clean's checks, lookups and
quarantine JSON built that way made ~12,400 of them, seconds of the driver's time during which the cores waited
(docs/etl.md, "Expressions as SQL text"). The same expression as SQL text is one call (``expr``), which Spark's
parser turns into the same Catalyst expressions (the same built-in functions, on the CPU or on the GPU).

Text needs quoting: ``literal`` for values, ``ident`` for column names. String literals are read with backslash
escapes, Spark's default; ``require_escapes`` stops a session that has turned them off
(``spark.sql.parser.escapedStringLiterals``), where the text would mean something else."""
from __future__ import annotations

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from jobs.core.errors import UserError

ESCAPED_LITERALS_KEY = "spark.sql.parser.escapedStringLiterals"
_ESCAPES = {"\\": "\\\\", "'": "\\'"}


def literal(value: str | int | float | None) -> str:
    """``value`` as a Spark SQL literal: a string quoted, with backslash and quote escaped and every control
    character written as ``\\uXXXX`` (the parser reads them back); an int as an int, a float as a double (``D``:
    a bare ``0.5`` is a decimal in Spark SQL); None as NULL."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        raise TypeError("literal: no booleans (write TRUE or FALSE)")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value!r}D"
    return "'" + "".join(_ESCAPES.get(ch) or (f"\\u{ord(ch):04X}" if ord(ch) < 32 else ch) for ch in value) + "'"


def ident(name: str) -> str:
    """A column or field name as a quoted identifier (backticks doubled inside)."""
    return "`" + name.replace("`", "``") + "`"


def expr(text: str) -> Column:
    """The SQL expression ``text`` as a Column: one call to the JVM, which parses it there."""
    return F.expr(text)


def require_escapes(spark: SparkSession) -> None:
    """Stops with a message when the session reads string literals without backslash escapes: the quoting of
    ``literal`` would then reach the functions as written (a regular expression's ``\\\\s`` as two backslashes)."""
    if spark.conf.get(ESCAPED_LITERALS_KEY, "false").strip().lower() == "true":
        raise UserError(f"{ESCAPED_LITERALS_KEY}=true: the pipeline writes its expressions with Spark's default "
                        f"string escapes; remove the setting from the profile or the command line")
