"""The lab's certificates: one CA, one serving certificate, and client certificates per identity."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=3650)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


class Pki:
    """Creates the lab's key material in ``directory`` (pki/ of the run directory)."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.ca_cert = directory / "ca.crt"
        self.ca_key = directory / "ca.key"
        self.serving_cert = directory / "apiserver.crt"
        self.serving_key = directory / "apiserver.key"
        # Signs ServiceAccount tokens (TokenRequest) and verifies them.
        self.sa_key = directory / "sa.key"
        self.sa_pub = directory / "sa.pub"

    def client(self, name: str) -> tuple[Path, Path]:
        return self.dir / f"{name}.crt", self.dir / f"{name}.key"

    def create(self, clients: dict[str, tuple[str, str | None]], server_ips: Sequence[str] = ()) -> None:
        """``clients`` maps a file name to (CommonName = user, Organization = group);
        ``server_ips``: addresses the serving certificate names besides 127.0.0.1."""
        self.dir.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
        ca_key = _key()
        ca_name = _name("dra-operators-lab-ca")
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        _write_key(self.ca_key, ca_key)

        def leaf(cert_path: Path, key_path: Path, name: x509.Name, server: bool) -> None:
            key = _key()
            builder = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now)
                .not_valid_after(now + _VALIDITY)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            )
            if server:
                builder = builder.add_extension(
                    x509.SubjectAlternativeName(
                        [
                            x509.DNSName("localhost"),
                            x509.DNSName("kubernetes"),
                            x509.DNSName("kubernetes.default"),
                            x509.DNSName("kubernetes.default.svc"),
                            x509.DNSName("kubernetes.default.svc.cluster.local"),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                            *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips),
                        ]
                    ),
                    critical=False,
                ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            else:
                builder = builder.add_extension(
                    x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
                )
            cert_path.write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
            _write_key(key_path, key)

        leaf(self.serving_cert, self.serving_key, _name("kube-apiserver"), server=True)
        for file_name, (user, group) in clients.items():
            leaf(*self.client(file_name), _name(user, group), server=False)

        sa_key = _key()
        _write_key(self.sa_key, sa_key)
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
