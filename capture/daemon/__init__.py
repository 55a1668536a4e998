"""``walcast run``: the daemon that streams a replication slot into Kafka."""
