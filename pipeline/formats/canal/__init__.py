"""Alibaba Canal's JSON (FlatMessage): the parser (``decode``)."""
