"""Hostile input, broken dependencies and planted secrets: every run still ends, within its budget,
with a typed stop reason and its log intact."""
