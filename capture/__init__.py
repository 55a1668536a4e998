"""walcast capture: PostgreSQL logical replication (pgoutput) to vendor CDC formats."""

__version__ = "0.1.0"
