"""Alibaba Canal's JSON (FlatMessage): the encoder."""
