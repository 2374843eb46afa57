"""The package's entry: spark-submit's application file (``scripts/submit`` passes it) and ``python -m jobs``.

    jobs/__main__.py <job> [job args]          a stage or the pipeline, through jobs.run.runner
    jobs/__main__.py my_job.py [its args]      any PySpark application file, run as __main__

The jobs package itself travels to executors as a zip (--py-files).

When the job is done, its SparkSession is stopped explicitly and the driver JVM is told to exit with the job's
code, then the interpreter leaves with ``os._exit``. Spark 3.5.5's ``BarrierCoordinator`` keeps a non-daemon
timer thread that ``spark.stop()`` does not end (SPARK-49479 / SPARK-51450, fixed after 3.5.5), so a driver JVM
that ran a barrier stage (every spark-rapids-ml fit does) never exits on its own: on the H200 host the gpu
pipeline and the hand-off benchmark printed their last line and then sat there, holding the executor (a thread
dump showed only that timer and ``DestroyJavaVM`` left). Nothing of the job remains to be done at that point.
"""
import os
import runpy
import sys
import time
import traceback


# Run as a script (spark-submit's way), Python puts this file's folder first on the path, where the package's own
# sub-packages would shadow top-level modules of the same name; the package itself comes from the installed copy
# or the --py-files zip.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].endswith(".py"):
        if not os.path.isfile(argv[0]):
            print(f"error: no application file {argv[0]}", file=sys.stderr)
            return 2
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        from jobs.core.errors import UserError

        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except UserError as e:  # as for the project's own jobs: one line, exit 2
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    from jobs.run.runner import main as run_job

    return run_job(argv)


def stop_spark() -> None:
    """Stops the job's SparkSession if one is active. A failure to stop changes nothing of the job's outcome (its
    code is already known): a context that Spark is stopping by itself in another thread (a standalone master that
    never answered) can fail the call half-way."""
    from pyspark.sql import SparkSession

    try:
        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
    except Exception as e:  # py4j's error from a context already going down
        print(f"warning: stopping Spark after the job failed: {str(e).strip().splitlines()[0][:200]}",
              file=sys.stderr)


def exit_jvm(code: int) -> None:
    """Asks the driver JVM (spark-submit's) to exit with ``code``, its shutdown hooks run; the py4j call does
    not come back once the JVM is gone. This process's output reaches the console through a JVM thread, so it
    is flushed first and given a moment to be copied."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(0.5)
    try:
        gateway.jvm.java.lang.System.exit(code)
    except Exception:  # the connection closes as the JVM exits
        pass


if __name__ == "__main__":
    import faulthandler
    import signal

    # `kill -USR1 <this process>` writes every Python thread's stack to stderr and the job goes on (what a JVM
    # does on SIGQUIT): for a driver that seems stuck (scripts/gpu-validate TRAIN_DUMPS).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    code = 1
    try:
        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        stop_spark()
    exit_jvm(code)
    os._exit(code)
