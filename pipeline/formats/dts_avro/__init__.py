"""Alibaba DTS's Avro records: the parser (``decode``)."""
