//! The frame parser must never panic, whatever the bytes; and a frame it
//! accepts must survive emit -> parse unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llc_stack::wire::{self, Body};

fuzz_target!(|data: &[u8]| {
    for sap in [None, Some(wire::llc::DEFAULT_SAP)] {
        if let Ok(f) = wire::parse(data, sap) {
            if let Body::Transport(t) = f.body {
                let mut buf = vec![0u8; data.len() + 64];
                let trailer = t.auth_tag.map_or(wire::Trailer::None, wire::Trailer::Raw);
                let n = wire::emit_transport_with(
                    &mut buf, &f.addr, t.header, t.sacks, t.payload, trailer,
                )
                .expect("an accepted frame fits its own length");
                let again = wire::parse(&buf[..n], sap).expect("re-emitted frame parses");
                let Body::Transport(t2) = again.body else { panic!("type changed") };
                assert_eq!(t2.header, t.header);
                assert_eq!(t2.sacks, t.sacks);
                assert_eq!(t2.payload, t.payload);
                assert_eq!(t2.auth_tag, t.auth_tag);
            }
        }
    }
    let _ = wire::transport_header(data);
});
