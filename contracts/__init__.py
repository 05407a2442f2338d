"""Engram contracts: the only code shared between services. Pydantic models and names only; no I/O."""

SCHEMA_VERSION = 1
