"""IBM Q Replication's delimited records.

``encode`` is the encoder; ``records`` lays out one record, ``settings`` its options.
"""
