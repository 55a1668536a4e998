"""Quest SharePlex's JSON: the parser (``decode``)."""
