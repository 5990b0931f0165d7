"""Redaction for diagnoses: the one implementation lives in `provisioner.redaction`."""

from provisioner.redaction import MASK, redact

__all__ = ["MASK", "redact"]
