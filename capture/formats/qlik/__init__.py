"""Qlik Replicate's JSON: the encoder."""
