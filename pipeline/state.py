"""Persistence of the normalize job's sequencing state, one version per micro-batch.

``<checkpoint>/walcast-state/<batch id>/`` holds the state after that batch (JSON, small:
one row per Kafka partition, see :data:`pipeline.sequencing.STATE`). A batch reads the
newest complete version older than itself, so a re-run of batch *n* (after a crash
before Spark committed it) starts from the same state as the first attempt and
overwrites its version. Old versions are pruned (the two newest are kept).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from pipeline.sequencing import STATE, empty_state

KEEP = 2


class StateStore:
    """Versions of the sequencing state under ``<checkpoint>/walcast-state``."""

    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        self.spark = spark
        self.root = checkpoint.rstrip("/") + "/walcast-state"
        jvm = spark._jvm  # noqa: SLF001
        assert jvm is not None
        self._jvm = jvm
        path = jvm.org.apache.hadoop.fs.Path(self.root)
        self._fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001

    def _versions(self) -> list[int]:
        path = self._jvm.org.apache.hadoop.fs.Path(self.root)
        if not self._fs.exists(path):
            return []
        out = []
        for status in self._fs.listStatus(path):
            name = status.getPath().getName()
            done = self._jvm.org.apache.hadoop.fs.Path(status.getPath(), "_SUCCESS")
            if name.isdigit() and self._fs.exists(done):
                out.append(int(name))
        return sorted(out)

    def load(self, batch_id: int) -> DataFrame:
        """The state after the newest batch before ``batch_id`` (empty at the start)."""
        older = [v for v in self._versions() if v < batch_id]
        if not older:
            return empty_state(self.spark)
        return self.spark.read.schema(STATE).json(f"{self.root}/{older[-1]}")

    def save(self, batch_id: int, state: DataFrame) -> None:
        """Store the state after ``batch_id`` and prune old versions."""
        state.coalesce(1).write.mode("overwrite").json(f"{self.root}/{batch_id}")
        for old in self._versions()[:-KEEP]:
            self._fs.delete(self._jvm.org.apache.hadoop.fs.Path(f"{self.root}/{old}"), True)  # noqa: FBT003
