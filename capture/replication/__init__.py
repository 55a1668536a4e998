"""The replication connection: CopyBoth framing, slot/publication setup, the stream client."""
