"""Catalyst expression trees seen from the tests."""
from __future__ import annotations


def depth(expr) -> int:
    """Depth of a Catalyst expression tree (a Column's ``_jc.expr()``), walked through py4j."""
    children = expr.children()
    return 1 + max((depth(children.apply(i)) for i in range(children.size())), default=0)
