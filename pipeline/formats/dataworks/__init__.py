"""Alibaba DataWorks' JSON: the parser (``decode``)."""
