"""Alibaba DataWorks' JSON: the encoder."""
