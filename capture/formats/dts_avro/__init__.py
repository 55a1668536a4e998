"""Alibaba DTS's Avro records.

``encode`` is the encoder; ``values`` maps PostgreSQL values to DTS's value records.
"""
