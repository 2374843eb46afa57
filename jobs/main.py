"""spark-submit's application file. The jobs package itself travels to executors as a zip (--py-files).

The job's SparkSession is stopped here, explicitly, and the interpreter then leaves with ``os._exit``: on the
H200 host two gpu-profile applications (the pipeline, the hand-off benchmark) printed their last line and never
exited, their driver Python waiting at interpreter exit while the SparkContext stayed up and held the
executor. Native GPU libraries imported into the driver (cuML, cupy, RMM through spark-rapids-ml) can leave
non-daemon threads and exit hooks behind; nothing of the job's remains to be done once Spark is stopped and
the output flushed, so nothing is waited for.
"""
import os
import sys

from jobs.cli import main


def stop_spark() -> None:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


if __name__ == "__main__":
    try:
        code = main()
    finally:
        stop_spark()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
