"""gpu-provisioner engine: never imports Textual or screens."""

__version__ = "0.1.0"
