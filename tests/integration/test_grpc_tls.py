"""TLS and mutual TLS on the gRPC server, with certificates made in the test (a CA, a
server certificate for 127.0.0.1/localhost, client certificates from that CA and from an
unrelated one): the right credentials get through, everything else is refused."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_harness import TOKEN, running_service

from services.client import RemoteError, SketchClient, TlsOptions

pytestmark = [pytest.mark.grpc, pytest.mark.integration]


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(common: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def issue(ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], common: str,
          server: bool) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) signed by ``ca``, for a server or a client."""
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(common))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(
                   [ExtendedKeyUsageOID.SERVER_AUTH if server
                    else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return _pem(builder.sign(ca_key, hashes.SHA256())), _pem_key(key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path | bytes]:
    folder = tmp_path_factory.mktemp("pki")
    ca, other = make_ca("imp test CA"), make_ca("someone else's CA")
    out: dict[str, Path | bytes] = {"ca": _pem(ca[0]), "other_ca": _pem(other[0])}
    server_cert, server_key = issue(ca, "imp server", server=True)
    for name, data in (("server.pem", server_cert), ("server.key", server_key),
                       ("ca.pem", _pem(ca[0]))):
        (folder / name).write_bytes(data)
        out[name] = folder / name
    out["client"] = issue(ca, "imp client", server=False)
    out["stranger"] = issue(other, "stranger", server=False)
    return out


def _tls_files(pki, mutual: bool) -> dict[str, str]:
    files = {"tls_cert": str(pki["server.pem"]), "tls_key": str(pki["server.key"])}
    if mutual:
        files["tls_client_ca"] = str(pki["ca.pem"])
    return files


def _refused(address: str, **kw) -> RemoteError:
    client = SketchClient(address, token=TOKEN, timeout=5, retries=0, **kw)
    try:
        with pytest.raises(RemoteError) as info:
            client.queries()
        return info.value
    finally:
        client.close()


def test_tls_with_the_server_ca(tmp_path, pki):
    with running_service(tmp_path, fill=False, tls_files=_tls_files(pki, mutual=False),
                         client_tls=TlsOptions(root_certificates=pki["ca"])) as svc:
        client = svc.client()
        assert client.health() == "SERVING"
        assert client.queries() == []
        # the certificate's DNS name works as well as its IP address
        named = svc.client(tls=TlsOptions(root_certificates=pki["ca"],
                                          server_name="localhost"))
        assert named.tables() == []
        assert _refused(svc.address).code == "UNAVAILABLE"  # plaintext to a TLS port
        wrong = _refused(svc.address, tls=TlsOptions(root_certificates=pki["other_ca"]))
        assert wrong.code == "UNAVAILABLE"
        # TLS does not replace the token
        anonymous = svc.client(token=None)
        with pytest.raises(RemoteError) as info:
            anonymous.queries()
        assert info.value.code == "UNAUTHENTICATED"


def test_mutual_tls_needs_a_client_certificate_from_the_ca(tmp_path, pki):
    cert, key = pki["client"]
    with running_service(tmp_path, fill=False, tls_files=_tls_files(pki, mutual=True),
                         client_tls=TlsOptions(pki["ca"], cert, key)) as svc:
        assert svc.client().queries() == []
        assert svc.client().health() == "SERVING"
        no_cert = _refused(svc.address, tls=TlsOptions(root_certificates=pki["ca"]))
        assert no_cert.code == "UNAVAILABLE"
        s_cert, s_key = pki["stranger"]
        stranger = _refused(svc.address, tls=TlsOptions(pki["ca"], s_cert, s_key))
        assert stranger.code == "UNAVAILABLE"
