"""Quest SharePlex's JSON: the encoder."""
