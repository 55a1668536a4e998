"""Qlik Replicate's JSON: the parser (``decode``)."""
