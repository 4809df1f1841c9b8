#!/usr/bin/env python3
"""Reference implementation of the frame MAC of docs/PROTOCOL.md 3.12 (wire
version 4), written from the spec and independent of llc-stack's code: its
NH is plain carry-less polynomial arithmetic on Python integers, its POLYVAL
plain GF(2^128) arithmetic (checked against RFC 8452's test vector), AES-128
comes from the `cryptography` package, key derivation from the `blake3`
package (`pip install blake3 cryptography`). The known-answer tests in
llc-stack/src/wire/auth.rs and wire/tests.rs were computed with it.

    python3 scripts/frame_mac_reference.py            # the known answers
    python3 scripts/frame_mac_reference.py --material 'job 42 secret' --frame HEX
"""

import argparse

import blake3
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

KEY_CONTEXT = "llc-stack 2026-11 transport frame authentication v4 nh-polyval-aes128"
NH_KEY_CONTEXT = "llc-stack 2026-11 transport frame authentication v4 nh key"
CHUNK = 1024
# Covered bytes hashed by POLYVAL directly before the NH chunks of a long
# frame, and the covered length from which NH is used.
HEAD = 80
NH_FROM = HEAD + 256

# POLYVAL's field: GF(2^128) modulo x^128 + x^127 + x^126 + x^121 + 1, with
# bit i of a little-endian 16-byte string the coefficient of x^i.
P = (1 << 128) | (1 << 127) | (1 << 126) | (1 << 121) | 1


def gf_mul(a, b):
    r = 0
    while b:
        if b & 1:
            r ^= a
        b >>= 1
        a <<= 1
        if a >> 128:
            a ^= P
    return r


def gf_pow(a, n):
    r = 1
    while n:
        if n & 1:
            r = gf_mul(r, a)
        a = gf_mul(a, a)
        n >>= 1
    return r


# x^-1 = (P - 1) / x, then x^-128.
X_INV_128 = gf_pow((P ^ 1) >> 1, 128)


def dot(a, b):
    return gf_mul(gf_mul(a, b), X_INV_128)


def polyval(h, data):
    assert len(data) % 16 == 0
    hi = int.from_bytes(h, "little")
    s = 0
    for i in range(0, len(data), 16):
        s = dot(s ^ int.from_bytes(data[i : i + 16], "little"), hi)
    return s.to_bytes(16, "little")


def check_polyval():
    h = bytes.fromhex("25629347589242761d31f826ba4b757b")
    x = bytes.fromhex("4f4f95668c83dfb6401762bb2d01a262d1a24ddd2721d006bbe45f20d3c9f362")
    assert polyval(h, x).hex() == "f7a3b47b846119fae5b7866cf5e5b77e", "RFC 8452 vector"


def clmul(a, b):
    """Carry-less product of two polynomials over GF(2) (bit i: x^i)."""
    r = 0
    while b:
        if b & 1:
            r ^= a
        b >>= 1
        a <<= 1
    return r


def check_clmul():
    assert clmul(0b11, 0b11) == 0b101, "(x + 1)^2 = x^2 + 1"
    assert clmul(1 << 63, 1 << 63) == 1 << 126


def words(b):
    return [int.from_bytes(b[i : i + 8], "little") for i in range(0, len(b), 8)]


def nh(k, chunk):
    """NH of a chunk of at most CHUNK bytes, zero-padded to 16 bytes: XOR of
    (c_2j ^ k_2j) * (c_2j+1 ^ k_2j+1), carry-less."""
    chunk = chunk + bytes(-len(chunk) % 16)
    c, k = words(chunk), words(k)
    r = 0
    for j in range(0, len(c), 2):
        r ^= clmul(c[j] ^ k[j], c[j + 1] ^ k[j + 1])
    return r.to_bytes(16, "little")


def nh_key(key):
    return blake3.blake3(key, derive_key_context=NH_KEY_CONTEXT).digest(length=CHUNK)


def tag(key, frame, span_len):
    """Tag of `frame` (Ethernet header, then an LLC span of span_len bytes)."""
    covered = frame[:12] + frame[14 : 14 + span_len]
    if len(covered) < NH_FROM:
        hashed = covered + bytes(-len(covered) % 16)
    else:
        k = nh_key(key)
        hashed = covered[:HEAD]
        body = covered[HEAD:]
        for i in range(0, len(body), CHUNK):
            hashed += nh(k, body[i : i + CHUNK])
    lengths = (8 * len(covered)).to_bytes(8, "little") + bytes(8)
    s = polyval(key[16:], hashed + lengths)
    enc = Cipher(algorithms.AES(key[:16]), modes.ECB()).encryptor()
    return enc.update(s) + enc.finalize()


def derive(material):
    return blake3.blake3(material, derive_key_context=KEY_CONTEXT).digest()


def synthetic_frame(payload_len):
    """The frames of auth.rs's known-answer test: byte i is (7 i + 3) mod 256,
    an LLC span of 3 + 56 + payload_len bytes and room for the tag."""
    span = 3 + 56 + payload_len
    return bytes((7 * i + 3) % 256 for i in range(14 + span + 16)), span


def main():
    check_polyval()
    check_clmul()
    ap = argparse.ArgumentParser()
    ap.add_argument("--material", help="key material, as AuthKey::derive takes it")
    ap.add_argument("--frame", help="a whole frame in hex, tag included")
    a = ap.parse_args()
    if a.frame:
        frame = bytes.fromhex(a.frame)
        print(tag(derive(a.material.encode()), frame, len(frame) - 14 - 16).hex())
        return
    key = bytes(range(32))
    for n in [0, 1, 5, 13, 64, 264, 265, 266, 281, 968, 969, 1288, 1289, 1290, 1441, 8941, 65000, 65535]:
        frame, span = synthetic_frame(n)
        print(f"payload {n:5}: {tag(key, frame, span).hex()}")


if __name__ == "__main__":
    main()
