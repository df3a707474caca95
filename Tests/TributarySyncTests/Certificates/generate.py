#!/usr/bin/env python3
"""Writes the certificates the TLS tests use (Python's `cryptography` package).

- ca.pem: the authority that signs the daemon's certificates (what an app is told to trust).
- daemon.pem, daemon-key.pem: for localhost and 127.0.0.1, valid 2026 to 2126.
- expired.pem, expired-key.pem: the same names, valid in 2020 only.
- wrong-host.pem, wrong-host-key.pem: valid, but for other.example and 10.9.8.7.
- self-signed.pem, self-signed-key.pem: for localhost and 127.0.0.1, signed by itself.
- peer-ca.pem: the authority whose certificates make a connection a peer daemon's (mutual TLS).
- peer.pem, peer-key.pem: a peer daemon's certificate from it (for client and server use).

The authorities' keys are thrown away: nothing else is ever signed by them. Run from this directory.
"""
import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

UTC = datetime.timezone.utc
LONG = (datetime.datetime(2026, 1, 1, tzinfo=UTC), datetime.datetime(2126, 1, 1, tzinfo=UTC))
EXPIRED = (datetime.datetime(2020, 1, 1, tzinfo=UTC), datetime.datetime(2021, 1, 1, tzinfo=UTC))


def name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def write(path, certificate, key=None):
    with open(path, "wb") as out:
        out.write(certificate.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        with open(path.replace(".pem", "-key.pem"), "wb") as out:
            out.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )


def authority(common):
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name(common))
        .issuer_name(name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(LONG[0])
        .not_valid_after(LONG[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return certificate, key


def leaf(common, names, addresses, issuer, issuer_key, validity):
    key = ec.generate_private_key(ec.SECP256R1())
    alternative = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name(common))
        .issuer_name(issuer.subject if issuer is not None else name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(issuer_key if issuer_key is not None else key, hashes.SHA256())
    )
    return certificate, key


ca, ca_key = authority("Tributary test authority")
write("ca.pem", ca)
local = (["localhost"], ["127.0.0.1"])
write("daemon.pem", *leaf("tributaryd test daemon", *local, ca, ca_key, LONG))
write("expired.pem", *leaf("tributaryd expired", *local, ca, ca_key, EXPIRED))
write("wrong-host.pem", *leaf("other.example", ["other.example"], ["10.9.8.7"], ca, ca_key, LONG))
write("self-signed.pem", *leaf("tributaryd self-signed", *local, None, None, LONG))

peer_ca, peer_ca_key = authority("Tributary test peer authority")
write("peer-ca.pem", peer_ca)
write("peer.pem", *leaf("tributaryd test peer", *local, peer_ca, peer_ca_key, LONG))
