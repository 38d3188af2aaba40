"""The upstream lab's certificate authority and every credential its processes use.

One CA (EC P-256, one year) generated per ``up`` in ``<lab>/pki``; every identity is a
client certificate whose CN is the user name and whose O entries are the groups — the
API server's x509 authenticator reads exactly that. Serving certificates (API server,
kubelet, our admission webhook) carry the IP SANs their clients dial. The service-account
key pair is RSA (the API server signs tokens with it, the controller manager mints them).
Nothing here is used outside the lab; the files are removed by ``down``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_PEM = serialization.Encoding.PEM


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@dataclass(frozen=True)
class Credential:
    cert: Path
    key: Path


class LabCA:
    """A CA whose files live in ``directory`` (``ca.crt``/``ca.key``)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("dmn-lab-ca"))
            .issuer_name(_name("dmn-lab-ca"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )  # fmt: skip
        _write(self.ca_cert, self.cert.public_bytes(_PEM))
        _write(directory / "ca.key", _key_pem(self.key), private=True)

    @classmethod
    def load(cls, directory: Path) -> LabCA:
        """The CA an earlier :class:`LabCA` wrote into ``directory`` (a running lab's, to
        issue more certificates it signs)."""
        ca = cls.__new__(cls)
        ca.dir = directory
        key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{directory / 'ca.key'}: not the lab CA's key")
        ca.key = key
        ca.cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
        return ca

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    def issue(
        self,
        name: str,
        cn: str,
        orgs: tuple[str, ...] = (),
        *,
        server_ips: tuple[str, ...] = (),
        server_names: tuple[str, ...] = (),
    ) -> Credential:
        """Write ``<name>.crt``/``<name>.key``: a client certificate, and a serving one too
        when ``server_ips``/``server_names`` are given."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, orgs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server_ips or server_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cred = Credential(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        _write(cred.key, _key_pem(key), private=True)
        _write(cred.cert, cert.public_bytes(_PEM))
        return cred

    def service_account_keys(self) -> Credential:
        """``sa.key`` (RSA private) and ``sa.pub`` (public) for service-account tokens."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pub = key.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        cred = Credential(self.dir / "sa.pub", self.dir / "sa.key")
        _write(cred.key, _key_pem(key), private=True)
        _write(cred.cert, pub)
        return cred
