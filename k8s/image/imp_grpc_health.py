#!/usr/bin/env python3
"""Exec probe: one grpc.health.v1.Health/Check call to the IMP server in this pod.

Kubelet's native gRPC probes speak plaintext only, so where the server runs with TLS
(the production overlay) the probes run this instead. It reads the server's own settings
(IMP_LISTEN for the port, IMP_TLS_CERT / IMP_TLS_KEY / IMP_TLS_CLIENT_CA,
IMP_AUTH_TOKEN_FILE), connects to the loopback address and exits 0 only when the
service answers SERVING. With mutual TLS it presents the server's certificate as its
client certificate, so that certificate must allow client authentication.

The request and response messages are encoded by hand (one field each), so only grpcio
is needed: HealthCheckRequest{string service = 1}, HealthCheckResponse{enum status = 1},
SERVING = 1.
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc

SERVING = 1


def encode_request(service: str) -> bytes:
    raw = service.encode()
    if not raw:
        return b""
    return b"\x0a" + _varint(len(raw)) + raw


def decode_status(message: bytes) -> int:
    """The status field of a HealthCheckResponse (0, UNKNOWN, when absent)."""
    status, i = 0, 0
    while i < len(message):
        key, i = _read_varint(message, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(message, i)
            if field == 1:
                status = value
        elif wire == 2:
            size, i = _read_varint(message, i)
            i += size
        else:
            raise ValueError(f"unexpected wire type {wire} in HealthCheckResponse")
    return status


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint in HealthCheckResponse")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def channel(args: argparse.Namespace, env: dict[str, str]) -> grpc.Channel:
    port = env.get("IMP_LISTEN", "127.0.0.1:50051").rsplit(":", 1)[1]
    target = f"{args.host}:{port}"
    cert = env.get("IMP_TLS_CERT")
    if not cert:
        return grpc.insecure_channel(target)
    client_key = client_chain = None
    if env.get("IMP_TLS_CLIENT_CA"):
        client_key, client_chain = _read(env["IMP_TLS_KEY"]), _read(cert)
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(args.ca or env.get("IMP_TLS_CLIENT_CA") or cert),
        private_key=client_key, certificate_chain=client_chain)
    # the certificate names the Service (e.g. imp.imp.svc), not the loopback address
    return grpc.secure_channel(target, creds,
                               options=[("grpc.ssl_target_name_override", args.tls_name)])


def check(args: argparse.Namespace, env: dict[str, str]) -> int:
    metadata = []
    token_file = env.get("IMP_AUTH_TOKEN_FILE")
    if token_file and os.path.exists(token_file):
        metadata.append(("authorization", "Bearer " + _read(token_file).decode().strip()))
    with channel(args, env) as ch:
        call = ch.unary_unary("/grpc.health.v1.Health/Check",
                              request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        return decode_status(call(encode_request(args.service), timeout=args.timeout,
                                  metadata=metadata))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--service", default="", help='health service name ("" = the server)')
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--tls-name", default="imp.imp.svc",
                   help="name the server certificate is checked against")
    p.add_argument("--ca", default=None, help="CA file (default: IMP_TLS_CLIENT_CA, else "
                   "the server certificate itself)")
    p.add_argument("--timeout", type=float, default=3.0)
    args = p.parse_args(argv)
    try:
        status = check(args, dict(os.environ))
    except grpc.RpcError as e:
        print(f"health check failed: {e.code().name}: {e.details()}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"health check failed: {e}", file=sys.stderr)
        return 2
    if status != SERVING:
        print(f"service {args.service!r} is not serving (status {status})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
