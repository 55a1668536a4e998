"""``walcast run``: the daemon that streams a replication slot into Kafka.

The run loop with its retries (:mod:`capture.daemon.runner`), the checks before anything is
written (:mod:`capture.daemon.preconditions`), metrics and health
(:mod:`capture.daemon.health`, :mod:`capture.daemon.metrics`), the side queries' thread
(:mod:`capture.daemon.sidework`), timelines and the daemon's own walsenders after a
failover or a network cut. Its settings are read and checked by :mod:`capture.config`.
"""
