"""Renderers of the event stream for the headless face."""
