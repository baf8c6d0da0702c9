"""The one place that builds a SparkSession for pagestore's Spark jobs.

`local[*]` is the embedded default; `--master URL` sends the same jobs to a
cluster. For a local master the session pins Spark to the loopback
interface (SPARK_LOCAL_IP=127.0.0.1), runs the Python workers with this very
interpreter, keeps log4j quiet (WARN, noisy loggers at ERROR), switches the
web UI off and keeps shuffles small. Nothing is downloaded at run time: no
`spark.jars.packages`, only the jars pyspark ships.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile
import zipfile

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.spark_util.name = org.apache.spark.util.Utils
logger.spark_util.level = error
logger.memory.name = org.apache.spark.memory
logger.memory.level = error
logger.arrow.name = org.apache.arrow
logger.arrow.level = error
logger.strings.name = org.apache.spark.util.SparkStringUtils
logger.strings.level = error
"""


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def find_java_home() -> str:
    """JAVA_HOME if it holds a java, else the JDK behind `java` on PATH, else /usr/lib/jvm/*17*."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return home
    java = shutil.which("java")
    if java:
        return os.path.dirname(os.path.dirname(os.path.realpath(java)))
    for cand in sorted(glob.glob("/usr/lib/jvm/*17*")) + sorted(glob.glob("/usr/lib/jvm/*")):
        if os.access(os.path.join(cand, "bin", "java"), os.X_OK):
            return cand
    raise RuntimeError("no Java found: Spark needs Java 17 (`make java` installs it)")


def _log4j_file() -> str:
    path = os.path.join(tempfile.gettempdir(), "pagestore-spark-log4j2.properties")
    if not os.path.exists(path) or open(path).read() != _LOG4J2:
        with open(path, "w") as f:
            f.write(_LOG4J2)
    return path


def prepare_environment(master: str) -> None:
    """Set the process environment the JVM and the Python workers inherit."""
    os.environ["JAVA_HOME"] = find_java_home()
    if is_local(master):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        os.environ["PYSPARK_PYTHON"] = sys.executable
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Local workers import `bench` from the project tree whatever the cwd is.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if PROJECT_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([PROJECT_ROOT] + paths)


def _ship_bench(spark) -> None:
    """On a cluster, send the `bench` package to the executors as a zip."""
    out = os.path.join(tempfile.mkdtemp(prefix="pagestore-spark-"), "bench.zip")
    with zipfile.ZipFile(out, "w") as z:
        for root, _dirs, files in os.walk(os.path.join(PROJECT_ROOT, "bench")):
            for name in files:
                if name.endswith(".py"):
                    full = os.path.join(root, name)
                    z.write(full, os.path.relpath(full, PROJECT_ROOT))
    spark.sparkContext.addPyFile(out)


def get_session(master: str | None = None, app: str = "pagestore-bench",
                shuffle_partitions: int | None = None, driver_memory: str = "2g",
                quick_jit: bool = True):
    """Build (or return the running) SparkSession with the project's settings.

    `quick_jit` runs the JVMs with the C1 compiler only (-XX:TieredStopAtLevel=1): it starts
    faster and suits short query jobs (the 1M-row report ran in half the time); the long
    Parquet write of `generate` is faster with the full JIT, so it passes False.
    """
    master = master or os.environ.get("PAGESTORE_SPARK_MASTER", "local[*]")
    prepare_environment(master)
    from pyspark.sql import SparkSession

    java_opts = f"-Dlog4j.configurationFile=file:{_log4j_file()}"
    if quick_jit:
        java_opts += " -XX:TieredStopAtLevel=1"
    if shuffle_partitions is None:
        shuffle_partitions = 4 if is_local(master) else 64
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", driver_memory)
         .config("spark.driver.extraJavaOptions", java_opts)
         .config("spark.executor.extraJavaOptions", java_opts)
         .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
         .config("spark.default.parallelism", str(shuffle_partitions))
         .config("spark.sql.adaptive.enabled", "true")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.debug.maxToStringFields", "1000")
         .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
         .config("spark.python.worker.reuse", "true"))
    if is_local(master):
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    # Under `PAGESTORE_SANITIZE=1 make test` the ASan runtime is preloaded for
    # the C core; a JVM started with it never comes up, so it is kept from
    # the JVM (and from the Python workers the JVM starts) only.
    preload = os.environ.pop("LD_PRELOAD", None)
    try:
        spark = b.getOrCreate()
    finally:
        if preload is not None:
            os.environ["LD_PRELOAD"] = preload
    spark.sparkContext.setLogLevel("WARN")
    if not is_local(master):
        _ship_bench(spark)
    return spark
