"""Debezium's change events, as the PostgreSQL connector writes them.

``encode`` is the encoder; ``settings`` its options, ``schemas`` the Connect schemas,
``encode_values`` and ``scalars`` the values, ``headers`` the connector's Kafka headers.
"""
