"""Transports run commands on a target and stream their output line by line."""

from provisioner.transport.base import CommandFailed, CommandResult, Transport, TransportError

__all__ = ["CommandFailed", "CommandResult", "Transport", "TransportError"]
