"""Textual faces of gpu-provisioner."""
