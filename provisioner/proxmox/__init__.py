"""Proxmox VE support: config-file format, API schema validation, tasks, and our API client."""
