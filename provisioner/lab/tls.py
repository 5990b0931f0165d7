"""LAB TLS material: a small root CA and a server certificate, like PVE's pve-root-ca.pem + pve-ssl.pem.

`ensure_lab_tls(directory)` creates (once) and returns the paths and the server certificate's
SHA-256 fingerprint in PVE's notation (``AB:CD:...``, as shown by ``pvenode cert info``).
Private keys are written with mode 0600 and never printed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class LabTls:
    """Paths of the lab's TLS files and the server certificate fingerprint."""

    ca_cert: Path  # trust anchor for clients (`verify=` / cafile)
    cert: Path  # server certificate (PEM)
    key: Path  # server key (PEM, 0600)
    fingerprint: str  # SHA-256 of the server certificate, "AB:CD:..."


def fingerprint_sha256(cert_pem_or_der: bytes) -> str:
    """SHA-256 fingerprint of a certificate (PEM or DER) as colon-separated upper-case hex."""
    if cert_pem_or_der.lstrip().startswith(b"-----BEGIN"):
        der = x509.load_pem_x509_certificate(cert_pem_or_der).public_bytes(serialization.Encoding.DER)
    else:
        der = cert_pem_or_der
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate_lab_tls(directory: Path, node: str = "pve", hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> LabTls:
    """Generate a fresh CA + server certificate for `hosts` (IP addresses and DNS names)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "LAB Proxmox Virtual Environment"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "LAB gpu-provisioner"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Manager CA"),
        ]
    )
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    alt_names.append(x509.DNSName(node))
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, f"{node}.lab"),
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "LAB gpu-provisioner"),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Node"),
                ]
            )
        )
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=730))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=True,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = directory / "pve-root-ca.pem", directory / "pve-ssl.pem", directory / "pve-ssl.key"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, _key_pem(key))
    _write_private(directory / "pve-root-ca.key", _key_pem(ca_key))
    return LabTls(ca_path, cert_path, key_path, fingerprint_sha256(cert_path.read_bytes()))


def ensure_lab_tls(directory: Path, node: str = "pve") -> LabTls:
    """Reuse the TLS files in `directory` if complete, else generate them."""
    ca_path, cert_path, key_path = directory / "pve-root-ca.pem", directory / "pve-ssl.pem", directory / "pve-ssl.key"
    if ca_path.exists() and cert_path.exists() and key_path.exists():
        return LabTls(ca_path, cert_path, key_path, fingerprint_sha256(cert_path.read_bytes()))
    return generate_lab_tls(directory, node)
