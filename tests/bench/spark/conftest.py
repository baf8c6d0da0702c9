"""One SparkSession (local[2]) for the whole test run; Spark tests keep their data small."""

import pytest


@pytest.fixture(scope="session")
def spark():
    from bench.spark.session import get_session

    session = get_session("local[2]", app="pagestore-tests", shuffle_partitions=2, driver_memory="1g")
    yield session
    session.stop()
