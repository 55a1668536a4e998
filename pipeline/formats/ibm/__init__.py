"""IBM Q Replication's delimited records: the parser (``decode``)."""
