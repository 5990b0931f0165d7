"""Facts: read-only probes (a command plus a pure parser), cached per run."""
