package churn.spark;

import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.expressions.BinaryArithmetic;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

import scala.Function1;
import scala.collection.JavaConverters;
import scala.collection.Seq;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * A session extension ({@code spark.sql.extensions}) that refuses, as each query is analysed, an expression nesting
 * more than {@link #MOST} arithmetic operations (+, -, *, /, ...) in one chain, naming it.
 *
 * <p>Why: the RAPIDS Accelerator 25.04 works out the type of a nested arithmetic expression on the GPU by asking both
 * operands again at every level, in time exponential in the chain's depth (NVIDIA/spark-rapids#13224, fixed in
 * 25.08). A sum of ~44 terms written as {@code a + b + c + ...} then never finishes planning under the gpu profile:
 * the driver spins at 100% CPU and no Spark job starts. The plugin's explain-only mode (gpu-explain, what CI runs)
 * never builds the GPU expressions, so it cannot show the stall; this check fails the same query at analysis time
 * under the gpu profiles (conf/rapids.conf) and in every test session, whatever its profile. A sum is built as a
 * balanced tree instead ({@code jobs.ml.estimators.balanced_sum}: depth log2 of the terms).
 */
public final class NestedArithmeticCheck extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

    /** The deepest chain allowed: the pipeline's deepest is the decile's 9 additions; 2^16 typings plan at once. */
    public static final int MOST = 16;

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectCheckRule(new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
                return new Check();
            }
        });
        return BoxedUnit.UNIT;
    }

    static final class Check extends AbstractFunction1<LogicalPlan, BoxedUnit> {
        @Override
        public BoxedUnit apply(LogicalPlan plan) {
            plan.foreach(new AbstractFunction1<LogicalPlan, BoxedUnit>() {
                @Override
                public BoxedUnit apply(LogicalPlan node) {
                    for (Expression e : list(node.expressions())) {
                        Deepest found = new Deepest();
                        chain(e, found);
                        if (found.depth > MOST) {
                            throw new IllegalStateException(String.format(
                                "churn.spark.NestedArithmeticCheck: an expression nests %d arithmetic operations in "
                                    + "one chain (more than %d), which the RAPIDS Accelerator 25.04 plans in time "
                                    + "exponential in the depth (NVIDIA/spark-rapids#13224): under a gpu profile the "
                                    + "query would never start. Build the sum as a balanced tree "
                                    + "(jobs.ml.estimators.balanced_sum does): %s",
                                found.depth, MOST, abbreviated(found.top.sql())));
                        }
                    }
                    return BoxedUnit.UNIT;
                }
            });
            return BoxedUnit.UNIT;
        }
    }

    /** The longest chain found so far and the arithmetic expression at its top. */
    static final class Deepest {
        int depth;
        Expression top;
    }

    /** The length of the chain of arithmetic that starts at {@code e} and goes down (0 if {@code e} is none), every
     * node visited once; the longest anywhere below {@code e} goes into {@code found}. */
    static int chain(Expression e, Deepest found) {
        int below = 0;
        for (Expression child : list(e.children())) {
            below = Math.max(below, chain(child, found));
        }
        int here = e instanceof BinaryArithmetic ? below + 1 : 0;
        if (here > found.depth) {
            found.depth = here;
            found.top = e;
        }
        return here;
    }

    static <T> List<T> list(Seq<T> seq) {
        return JavaConverters.seqAsJavaListConverter(seq).asJava();
    }

    static String abbreviated(String sql) {
        return sql.length() <= 300 ? sql : sql.substring(0, 300) + "...";
    }
}
