//! Construct/deconstruct tests over literal bytes, and property tests: round
//! trips, and arbitrary bytes never panic the parser.

use super::*;
use proptest::prelude::*;

const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);

fn addr() -> Addresses {
    Addresses {
        dst: B,
        src: A,
        dsap: llc::DEFAULT_SAP,
        ssap: llc::DEFAULT_SAP,
    }
}

fn data_header() -> TransportHeader {
    TransportHeader {
        kind: FrameType::Data.into(),
        flags: transport::flags::LAST_FRAGMENT,
        src_port: 7.into(),
        dst_port: 9.into(),
        src_cookie: 0xdeadbeef.into(),
        dst_cookie: 0x01020304.into(),
        seq: 100.into(),
        ack: 50.into(),
        window_end: 1074.into(),
        msg_id: 3.into(),
        msg_len: 5.into(),
        ..Default::default()
    }
}

#[test]
fn data_frame_literal_bytes() {
    let mut buf = [0u8; 128];
    let n = emit_transport(
        &mut buf,
        &addr(),
        &data_header(),
        &[SackBlock::new(102, 104)],
        b"hello",
    )
    .unwrap();
    assert_eq!(n, 14 + 3 + 56 + 8 + 5);
    // Ethernet: dst, src, 802.3 length = LLC + transport + sack + payload.
    assert_eq!(&buf[..12], &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    assert_eq!(&buf[12..14], &(3u16 + 56 + 8 + 5).to_be_bytes());
    assert_eq!(&buf[14..17], &[0x7C, 0x7C, 0x03]);
    assert_eq!(&buf[17..21], &[4, 3, 1, 1]); // version, DATA, LAST_FRAGMENT, 1 sack
    assert_eq!(&buf[73..81], &[0, 0, 0, 102, 0, 0, 0, 104]);
    assert_eq!(&buf[81..86], b"hello");

    let f = parse(&buf[..n], Some(llc::DEFAULT_SAP)).unwrap();
    assert_eq!(f.addr, addr());
    let Body::Transport(t) = f.body else {
        panic!("not transport")
    };
    assert_eq!(t.header.frame_type(), FrameType::Data);
    assert_eq!(t.header.seq.get(), 100);
    assert_eq!(t.sacks, &[SackBlock::new(102, 104)]);
    assert_eq!(t.payload, b"hello");
}

#[test]
fn padding_after_length_is_ignored() {
    let mut buf = [0u8; 128];
    let n = emit_transport(&mut buf, &addr(), &data_header(), &[], b"x").unwrap();
    // A NIC pads to 60 bytes at least; padding garbage must not matter.
    buf[n..n + 10].fill(0xAB);
    let f = parse(&buf[..n + 10], None).unwrap();
    let Body::Transport(t) = f.body else { panic!() };
    assert_eq!(t.payload, b"x");
}

#[test]
fn corruption_is_detected() {
    let mut buf = [0u8; 128];
    let n = emit_transport(&mut buf, &addr(), &data_header(), &[], b"payload").unwrap();
    for i in 14..n {
        let mut c = buf;
        c[i] ^= 0x40;
        let accepted = matches!(
            parse(&c[..n], Some(llc::DEFAULT_SAP)),
            Ok(Frame {
                body: Body::Transport(_),
                ..
            })
        );
        assert!(!accepted, "flip at {i} not detected");
    }
}

#[test]
fn jumbo_form_above_1500() {
    let payload = vec![0x5A; 4000];
    let mut buf = vec![0u8; 5000];
    let n = emit_transport(&mut buf, &addr(), &data_header(), &[], &payload).unwrap();
    assert_eq!(&buf[12..14], &[0x88, 0x70]);
    let Body::Transport(t) = parse(&buf[..n], None).unwrap().body else {
        panic!()
    };
    assert_eq!(t.payload, &payload[..]);
}

#[test]
fn test_and_xid_frames() {
    let mut buf = [0u8; 64];
    let n = emit_llc_control(
        &mut buf,
        &addr(),
        false,
        Command::Test { pf: true },
        b"ping",
    )
    .unwrap();
    assert_eq!(n, 60, "padded to the Ethernet minimum");
    assert_eq!(&buf[12..14], &[0, 7]);
    assert_eq!(&buf[14..21], &[0x7C, 0x7C, 0xF3, b'p', b'i', b'n', b'g']);
    match parse(&buf[..n], Some(0x7C)).unwrap().body {
        Body::Test {
            response: false,
            pf: true,
            info,
        } => assert_eq!(info, b"ping"),
        other => panic!("{other:?}"),
    }
    let n = emit_llc_control(
        &mut buf,
        &addr(),
        true,
        Command::Xid { pf: true },
        &XID_INFO,
    )
    .unwrap();
    assert_eq!(&buf[14..20], &[0x7C, 0x7D, 0xBF, 0x81, 0x01, 0x00]);
    assert!(matches!(
        parse(&buf[..n], None).unwrap().body,
        Body::Xid {
            response: true,
            pf: true,
            ..
        }
    ));
}

#[test]
fn rejections() {
    let mut buf = [0u8; 128];
    let n = emit_transport(&mut buf, &addr(), &data_header(), &[], b"abc").unwrap();
    assert_eq!(
        parse(&buf[..n], Some(0x42)).unwrap_err(),
        WireError::OtherSap
    );
    assert_eq!(parse(&buf[..10], None).unwrap_err(), WireError::Truncated);
    assert_eq!(
        parse(&buf[..n - 1], None).unwrap_err(),
        WireError::BadLength
    );
    let mut ip = buf;
    ip[12..14].copy_from_slice(&[0x08, 0x00]);
    assert_eq!(parse(&ip[..n], None).unwrap_err(), WireError::NotLlc);
    // Versions 1 (BLAKE3 tags, issue 7) and 2 (POLYVAL tags without NH,
    // issue 43) are no longer spoken.
    for version in [1, 2] {
        let mut v = buf;
        v[17] = version;
        assert_eq!(parse(&v[..n], None).unwrap_err(), WireError::BadVersion);
    }
    let mut s = buf;
    s[20] = 5;
    assert_eq!(parse(&s[..n], None).unwrap_err(), WireError::BadSackCount);
    let mut i_frame = buf;
    i_frame[16] = 0x00;
    assert_eq!(
        parse(&i_frame[..n], None).unwrap_err(),
        WireError::UnsupportedControl
    );
    assert_eq!(
        emit_transport(&mut buf[..40], &addr(), &data_header(), &[], b"abc").unwrap_err(),
        WireError::BufferTooSmall
    );
    // A UI frame sent as a response is not one of ours.
    let mut r = buf;
    r[15] |= 1;
    assert_eq!(
        parse(&r[..n], None).unwrap_err(),
        WireError::UnsupportedControl
    );
}

fn arb_header() -> impl Strategy<Value = TransportHeader> {
    (
        any::<[u8; 3]>(),
        any::<[u16; 2]>(),
        any::<[u32; 8]>(),
        any::<u32>(),
    )
        .prop_map(|(b, p, w, ts)| TransportHeader {
            version: transport::VERSION,
            kind: b[0],
            flags: b[1],
            sack_count: 0,
            src_port: p[0].into(),
            dst_port: p[1].into(),
            src_cookie: w[0].into(),
            dst_cookie: w[1].into(),
            seq: w[2].into(),
            ack: w[3].into(),
            window_end: w[4].into(),
            msg_id: w[5].into(),
            msg_len: w[6].into(),
            frag_off: w[7].into(),
            payload_len: 0.into(),
            ack_delay: 0.into(),
            ts_val: ts.into(),
            ts_ecr: (!ts).into(),
            crc: 0.into(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn transport_round_trip(
        h in arb_header(),
        sacks in proptest::collection::vec(any::<(u32, u32)>(), 0..=4),
        payload in proptest::collection::vec(any::<u8>(), 0..3000),
    ) {
        let sacks: Vec<SackBlock> = sacks.into_iter().map(|(a, b)| SackBlock::new(a, b)).collect();
        let mut buf = vec![0u8; 4000];
        let n = emit_transport(&mut buf, &addr(), &h, &sacks, &payload).unwrap();
        let f = parse(&buf[..n], Some(llc::DEFAULT_SAP)).unwrap();
        prop_assert_eq!(f.addr, addr());
        let Body::Transport(t) = f.body else { panic!("not transport") };
        let mut expect = h;
        // The emitter owns the AUTH bit: no trailer, no flag.
        expect.flags &= !transport::flags::AUTH;
        expect.sack_count = sacks.len() as u8;
        expect.payload_len = (payload.len() as u16).into();
        expect.crc = t.header.crc;
        prop_assert_eq!(*t.header, expect);
        prop_assert_eq!(t.sacks, &sacks[..]);
        prop_assert_eq!(t.payload, &payload[..]);
    }

    #[test]
    fn control_round_trip(info in proptest::collection::vec(any::<u8>(), 0..1400), response: bool, pf: bool, xid: bool) {
        let mut buf = vec![0u8; 1500];
        let cmd = if xid { Command::Xid { pf } } else { Command::Test { pf } };
        let n = emit_llc_control(&mut buf, &addr(), response, cmd, &info).unwrap();
        match (parse(&buf[..n], None).unwrap().body, xid) {
            (Body::Test { response: r, pf: p, info: i }, false) | (Body::Xid { response: r, pf: p, info: i }, true) => {
                prop_assert_eq!((r, p, i), (response, pf, &info[..]));
            }
            (other, _) => panic!("{other:?}"),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let _ = parse(&bytes, None);
        let _ = parse(&bytes, Some(llc::DEFAULT_SAP));
        let _ = transport_header(&bytes);
    }

    #[test]
    fn mutated_frames_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..200),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let mut buf = vec![0u8; 400];
        let n = emit_transport(&mut buf, &addr(), &data_header(), &[SackBlock::new(1, 2)], &payload).unwrap();
        for (at, v) in edits {
            buf[at % n] = v;
        }
        let _ = parse(&buf[..cut % (n + 1)], None);
        let _ = parse(&buf[..n], None);
    }
}

/// The fuzz seed corpus was written by an independent implementation of
/// docs/PROTOCOL.md (a short Python script); the parser must agree with it.
#[test]
fn frames_built_from_the_spec_parse() {
    let data = include_bytes!("../../fuzz/corpus/parse_frame/data_sack");
    let f = parse(data, Some(llc::DEFAULT_SAP)).expect("spec-built frame parses");
    let Body::Transport(t) = f.body else {
        panic!("not transport")
    };
    assert_eq!(t.header.frame_type(), FrameType::Data);
    assert_eq!((t.header.src_port.get(), t.header.dst_port.get()), (7, 9));
    assert_eq!(
        t.sacks,
        &[SackBlock::new(102, 104), SackBlock::new(110, 111)]
    );
    assert_eq!(t.payload, &[b'x'; 100][..]);
    let jumbo = include_bytes!("../../fuzz/corpus/parse_frame/jumbo");
    let Body::Transport(t) = parse(jumbo, None).unwrap().body else {
        panic!()
    };
    assert_eq!(t.payload.len(), 3000);
    let test = include_bytes!("../../fuzz/corpus/parse_frame/test");
    assert!(
        matches!(parse(test, None).unwrap().body, Body::Test { response: false, pf: true, info } if info.starts_with(b"LLCP"))
    );
    let xid = include_bytes!("../../fuzz/corpus/parse_frame/xid");
    assert!(matches!(parse(xid, None).unwrap().body, Body::Xid { info, .. } if info == XID_INFO));
}

#[test]
fn authenticated_frame_layout_and_verification() {
    let key = AuthKey::derive(b"job 42 secret");
    let mut buf = [0u8; 160];
    let n = emit_transport_with(
        &mut buf,
        &addr(),
        &data_header(),
        &[],
        b"hello",
        Trailer::Key(&key),
    )
    .unwrap();
    assert_eq!(n, 14 + 3 + 56 + 5 + auth::TAG_LEN);
    // The 802.3 length counts the trailer; the flag announces it.
    assert_eq!(&buf[12..14], &(3u16 + 56 + 5 + 16).to_be_bytes());
    assert_eq!(
        buf[19],
        transport::flags::LAST_FRAGMENT | transport::flags::AUTH
    );
    let f = parse(&buf[..n], Some(llc::DEFAULT_SAP)).unwrap();
    let Body::Transport(t) = f.body else {
        panic!("not transport")
    };
    assert_eq!(t.payload, b"hello");
    let tag = *t.auth_tag.expect("tag present");
    assert_eq!(&tag[..], &buf[n - 16..n]);
    assert_eq!(t.signed_len(), 3 + 56 + 5);
    assert!(key.verify(&buf[..n], t.signed_len()));
    // Known answer: pins the key derivation, the covered bytes and their order.
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, KNOWN_TAG, "tag of the PROTOCOL.md example changed");
    // Another key does not verify.
    assert!(!AuthKey::derive(b"job 43 secret").verify(&buf[..n], t.signed_len()));
    // The CRC field stays zero: the tag is the frame's integrity check, so
    // the parser lets a changed frame through to the receiver's MAC, which
    // refuses it wherever the change is (Ethernet source, cookie, sequence
    // number, payload, tag). A CRC field that is not zero is refused by the
    // parser, even when it holds the CRC the frame would have without AUTH.
    assert_eq!(t.header.crc.get(), 0);
    for at in [6, 14 + 3 + 8, 14 + 3 + 16, n - 17, n - 1] {
        let mut forged = buf;
        forged[at] ^= 0x20;
        let t = match parse(&forged[..n], None).unwrap().body {
            Body::Transport(t) => t,
            _ => panic!(),
        };
        assert!(!key.verify(&forged[..n], t.signed_len()), "byte {at}");
    }
    let mut with_crc = buf;
    with_crc[14 + 3 + 52] ^= 0x01;
    assert_eq!(
        parse(&with_crc[..n], None).unwrap_err(),
        WireError::BadChecksum
    );
    refresh_crc(&mut with_crc[..n - auth::TAG_LEN]);
    assert_eq!(
        parse(&with_crc[..n], None).unwrap_err(),
        WireError::BadChecksum
    );
    // Re-emitting with the raw tag reproduces the frame exactly.
    let mut again = [0u8; 160];
    let m = emit_transport_with(
        &mut again,
        &addr(),
        t.header,
        t.sacks,
        t.payload,
        Trailer::Raw(&tag),
    )
    .unwrap();
    assert_eq!(&again[..m], &buf[..n]);
    // A frame claiming a trailer it does not have is truncated.
    let short = n - 1;
    let mut cut = buf;
    cut[12..14].copy_from_slice(&((short - 14) as u16).to_be_bytes());
    assert_eq!(
        parse(&cut[..short], None).unwrap_err(),
        WireError::Truncated
    );
    // Without a trailer the flag is cleared even if the header had it.
    let mut h = data_header();
    h.flags |= transport::flags::AUTH;
    let n = emit_transport(&mut buf, &addr(), &h, &[], b"hello").unwrap();
    assert_eq!(n, 14 + 3 + 56 + 5);
    let Body::Transport(t) = parse(&buf[..n], None).unwrap().body else {
        panic!()
    };
    assert!(t.auth_tag.is_none());
    assert_eq!(
        format!("{key:?}"),
        format!("AuthKey(fingerprint {})", key.fingerprint())
    );
}

/// Tag of the frame above (the example of PROTOCOL.md 3.12, key material
/// "job 42 secret"), computed by scripts/frame_mac_reference.py.
const KNOWN_TAG: &str = "271297b2b81aa017fb3a65ca7465e86a";

fn refresh_crc(frame: &mut [u8]) {
    let span_end = frame.len();
    let crc = checksum(&frame[14..span_end]);
    let at = 14 + 3 + transport::CRC_OFFSET;
    frame[at..at + 4].copy_from_slice(&crc.to_be_bytes());
}

/// A long payload in two pieces (a message's fragment that straddles its
/// buffers), with and without a trailer: the receiver's CRC and MAC accept
/// it and the payload arrives whole.
#[test]
fn gathered_long_payloads_carry_a_valid_crc() {
    let key = AuthKey::derive(b"gather");
    let data: Vec<u8> = (0..9000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for len in [1, 700, 5000, 8900] {
        for cut in [0, 1, len / 2, len] {
            for keyed in [false, true] {
                let payload = &data[..len];
                let (p0, p1) = payload.split_at(cut);
                let trailer = if keyed {
                    Trailer::Key(&key)
                } else {
                    Trailer::None
                };
                let mut buf = vec![0u8; 9100];
                let n = emit_transport_gather(
                    &mut buf,
                    &addr(),
                    &data_header(),
                    &[],
                    [p0, p1],
                    trailer,
                )
                .unwrap();
                let f =
                    parse(&buf[..n], None).unwrap_or_else(|e| panic!("{len}/{cut}/{keyed}: {e:?}"));
                let Body::Transport(t) = f.body else {
                    panic!("not transport")
                };
                assert_eq!(t.payload, payload, "{len}/{cut}/{keyed}");
                assert_eq!(t.auth_tag.is_some(), keyed);
                if keyed {
                    assert!(key.verify(&buf[..n], t.signed_len()), "{len}/{cut}");
                }
            }
        }
    }
}

/// A frame whose payload end stays out of the buffer (scatter-gather) is,
/// once the device puts the two together, the frame written whole: same
/// bytes, same CRC; the buffer must still have room for the whole frame.
#[test]
fn frame_with_payload_left_out_is_the_whole_frame() {
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let (inline, tail) = payload.split_at(40);
    let mut whole = [0u8; 3200];
    let n = emit_transport_gather(
        &mut whole,
        &addr(),
        &data_header(),
        &[],
        [inline, tail],
        Trailer::None,
    )
    .unwrap();
    let mut head = [0u8; 3200];
    let h = emit_transport_head(&mut head, &addr(), &data_header(), &[], [inline, tail]).unwrap();
    assert_eq!(h + tail.len(), n);
    assert!(
        head[h..].iter().all(|&b| b == 0),
        "nothing written past the head"
    );
    let mut joined = head[..h].to_vec();
    joined.extend_from_slice(tail);
    assert_eq!(joined, &whole[..n]);
    assert!(parse(&joined, Some(llc::DEFAULT_SAP)).is_ok());
    assert_eq!(
        emit_transport_head(
            &mut head[..n - 1],
            &addr(),
            &data_header(),
            &[],
            [inline, tail]
        ),
        Err(WireError::BufferTooSmall)
    );
}

/// A frame started from a connection's prefix is the frame written from
/// the addresses and the whole header, whatever its length, SACK blocks,
/// trailer or payload left out; the header's own ports and cookies are
/// not read.
#[test]
fn a_prefixed_frame_is_the_frame_written_whole() {
    let prefix = FramePrefix::new(&addr(), &data_header());
    let other = TransportHeader {
        src_port: 1.into(),
        dst_port: 2.into(),
        src_cookie: 3.into(),
        dst_cookie: 4.into(),
        ..data_header()
    };
    let key = AuthKey::derive(b"prefix");
    let sacks = [SackBlock::new(120, 130), SackBlock::new(140, 141)];
    for len in [0usize, 3, 64, 1400, 1600, 3000] {
        let payload: Vec<u8> = (0..len as u32).map(|i| (i * 13) as u8).collect();
        let (a, b) = payload.split_at(len / 3);
        for (s, trailer) in [(0, Trailer::None), (2, Trailer::Key(&key))] {
            let mut whole = [0u8; 3200];
            let n = emit_transport_gather(
                &mut whole,
                &addr(),
                &data_header(),
                &sacks[..s],
                [a, b],
                trailer,
            )
            .unwrap();
            let mut from_prefix = [0u8; 3200];
            let m = emit_transport_prefixed(
                &mut from_prefix,
                &prefix,
                &other,
                &sacks[..s],
                [a, b],
                trailer,
            )
            .unwrap();
            assert_eq!(
                &from_prefix[..m],
                &whole[..n],
                "payload {len}, {s} SACK blocks"
            );
        }
        let mut head = [0u8; 3200];
        let mut head_prefixed = [0u8; 3200];
        let h = emit_transport_head(&mut head, &addr(), &data_header(), &[], [a, b]).unwrap();
        let hp = emit_transport_head_prefixed(
            &mut head_prefixed,
            &prefix,
            &other,
            &[],
            [a, b],
            Trailer::None,
        )
        .unwrap();
        assert_eq!(&head_prefixed[..hp], &head[..h]);
    }
}

/// An authenticated frame whose payload end stays out of the buffer is,
/// once joined (start, payload end, then the tag written after the start),
/// the frame written whole: the tag computed over the two pieces where
/// they lie is the tag of the whole, wherever the cut falls against the
/// MAC's 1 KiB chunks, with and without SACK blocks.
#[test]
fn keyed_frame_with_payload_left_out_is_the_whole_frame() {
    let key = AuthKey::derive(b"gathered");
    let prefix = FramePrefix::new(&addr(), &data_header());
    let sacks = [SackBlock::new(120, 130); 4];
    let payload: Vec<u8> = (0..65_535u32).map(|i| (i * 13 + i / 511) as u8).collect();
    let mut whole = vec![0u8; 66_000];
    let mut head = vec![0u8; 66_000];
    for len in [
        0usize, 1, 500, 968, 969, 1000, 1500, 2100, 3000, 9000, 65_000, 65_535,
    ] {
        // Cuts that put a chunk boundary (1024 bytes after the first
        // block: 969 payload bytes in without SACK blocks, 937 with four)
        // just before, at and after the end of the start.
        let cuts = [0, 1, 40, len / 2, len.saturating_sub(1), len]
            .into_iter()
            .chain([936, 937, 938, 968, 969, 970, 1993, 1994]);
        for cut in cuts.filter(|&c| c <= len) {
            for s in [0, 4] {
                let (a, b) = payload[..len].split_at(cut);
                let n = emit_transport_prefixed(
                    &mut whole,
                    &prefix,
                    &data_header(),
                    &sacks[..s],
                    [a, b],
                    Trailer::Key(&key),
                )
                .unwrap();
                head.fill(0);
                let h = emit_transport_head_prefixed(
                    &mut head,
                    &prefix,
                    &data_header(),
                    &sacks[..s],
                    [a, b],
                    Trailer::Key(&key),
                )
                .unwrap();
                assert!(head[h + auth::TAG_LEN..].iter().all(|&b| b == 0));
                let tail = Tail {
                    body: bytes::Bytes::copy_from_slice(b),
                    trailer: auth::TAG_LEN,
                };
                assert_eq!(tail.join(&mut head, h), Some(n), "{len}/{cut}/{s}");
                assert!(head[..n] == whole[..n], "{len}/{cut}/{s}");
                let Body::Transport(t) = parse(&head[..n], None).unwrap().body else {
                    panic!("not transport")
                };
                assert!(key.verify(&head[..n], t.signed_len()));
            }
        }
    }
}

/// The short copy writes exactly `src` over `dst`, for every length around
/// its fixed-size steps.
#[test]
fn copy_short_matches_copy_from_slice() {
    let src: Vec<u8> = (0..100u8)
        .map(|i| i.wrapping_mul(7).wrapping_add(1))
        .collect();
    for n in 0..=100 {
        let mut dst = vec![0xaa; n];
        copy_short(&mut dst, &src[..n]);
        assert_eq!(dst, &src[..n], "{n}");
    }
}
