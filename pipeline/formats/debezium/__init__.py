"""Debezium's change events: the parser and its value decoding.

``decode`` is the parser (the connector's topics and walcast's), ``decode_values`` turns
Connect's value forms back into PostgreSQL's text.
"""
