"""Support: collect evidence from a node and its container, bundle it redacted, diagnose it.

    from provisioner.support import collect, write_bundle, read_bundle
    evidence = await collect(node_transport, vmid=200, venv="/opt/torch-venv")   # never raises on a probe
    result = write_bundle(evidence, "support.tar.gz", known_secrets=[...])        # redacted tar.gz + manifest
    evidence = read_bundle("support.tar.gz")                                      # for `diagnose --bundle`

Modules: probes (the probe list, as data), collect (runs them), derive (probe outputs -> live
facts, pure), summary (collect_env-like text, pure), scrub (redaction), bundle (tar.gz),
diagnose_sources (findings for `diagnose --host/--bundle`), target (which node).
"""

from provisioner.support.bundle import BundleError, BundleResult, read_bundle, write_bundle
from provisioner.support.collect import collect
from provisioner.support.evidence import Evidence, ProbeRecord
from provisioner.support.probes import PROBES, Probe

__all__ = ["PROBES", "BundleError", "BundleResult", "Evidence", "Probe", "ProbeRecord", "collect", "read_bundle",
           "write_bundle"]
