//! The classic BPF filters of packet sockets: which frames the kernel hands
//! an AF_PACKET endpoint (our SAP's; with a port, that port's and the link
//! role's), and a granted endpoint's, which first checks the interface.

use crate::link::local::{CONTROL_OFFSET, DST_PORT_OFFSET};
use crate::wire::ethernet::{ETHERTYPE_JUMBO_LLC, HEADER_LEN, MAX_LENGTH_FIELD};
use crate::wire::llc::{CONTROL_TEST, CONTROL_UI, PF_BIT, SAP_RESPONSE_BIT};

// Classic BPF opcodes (linux/bpf_common.h, linux/filter.h).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_LD_H_ABS: u16 = 0x28;
const BPF_LD_B_ABS: u16 = 0x30;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGT_K: u16 = 0x25;
const BPF_JSET_K: u16 = 0x45;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_RET_K: u16 = 0x06;
/// Ancillary load of `skb->pkt_type` (`SKF_AD_OFF + SKF_AD_PKTTYPE`).
const ANC_PKTTYPE: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32;
/// Ancillary load of "the skb carries a VLAN tag".
const ANC_VLAN_PRESENT: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_VLAN_TAG_PRESENT) as u32;
/// Largest `pkt_type` we accept: PACKET_HOST (0), BROADCAST (1), MULTICAST (2).
const PKTTYPE_MAX_ACCEPTED: u32 = libc::PACKET_MULTICAST as u32;
/// Offset of the length/type field in the Ethernet header.
const LENGTH_TYPE_OFFSET: u32 = 12;
/// Offset of the DSAP: the first byte after the Ethernet header.
const DSAP_OFFSET: u32 = HEADER_LEN as u32;
/// Offset of the SSAP.
const SSAP_OFFSET: u32 = HEADER_LEN as u32 + 1;
/// Offset of a TEST frame's information field.
const INFO_OFFSET: u32 = HEADER_LEN as u32 + 3;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter of an endpoint that shares the interface: [`llc_filter`]'s
/// checks, then only UI frames whose transport `dst_port` is `port`, and
/// TEST answers to a reachability probe of `port` (information field
/// "LLCR" + port, `proto::PROBE_MAGIC`); other LLC commands (TEST, XID)
/// only when `link_role` says this endpoint answers them.
///
/// ```text
/// 0-8: as llc_filter, up to the DSAP check
/// 9:  ldb [16]            ; LLC control
/// 10: jeq #0x03    -> 11 else 13
/// 11: ldh [23]            ; UI: transport dst_port
/// 12: jeq #port    -> ACCEPT else REJECT
/// 13: and #0xef           ; control without P/F
/// 14: jeq #0xe3    -> 15 else OTHER
/// 15: ldb [15]            ; SSAP
/// 16: jset #1      -> 17 else OTHER  (a TEST response)
/// 17: ld [17]             ; information field
/// 18: jeq #"LLCR"  -> 19 else OTHER
/// 19: ldh [21]            ; the prober's port
/// 20: jeq #port    -> ACCEPT else REJECT
/// 21: OTHER: ret #(link_role ? -1 : 0)
/// 22: ACCEPT: ret #-1
/// 23: REJECT: ret #0
/// ```
pub(crate) fn endpoint_filter(sap: u8, port: u16, link_role: bool) -> [libc::sock_filter; 24] {
    const OTHER: u8 = 21;
    const ACCEPT: u8 = 22;
    const REJECT: u8 = 23;
    let to = |from: u8, target: u8| target - from - 1;
    let magic = u32::from_be_bytes(crate::proto::PROBE_MAGIC);
    [
        insn(BPF_LD_W_ABS, 0, 0, ANC_PKTTYPE),
        insn(BPF_JGT_K, to(1, REJECT), 0, PKTTYPE_MAX_ACCEPTED),
        insn(BPF_LD_W_ABS, 0, 0, ANC_VLAN_PRESENT),
        insn(BPF_JEQ_K, 0, to(3, REJECT), 0),
        insn(BPF_LD_H_ABS, 0, 0, LENGTH_TYPE_OFFSET),
        insn(BPF_JGT_K, 0, 1, MAX_LENGTH_FIELD as u32),
        insn(BPF_JEQ_K, 0, to(6, REJECT), ETHERTYPE_JUMBO_LLC as u32),
        insn(BPF_LD_B_ABS, 0, 0, DSAP_OFFSET),
        insn(BPF_JEQ_K, 0, to(8, REJECT), sap as u32),
        insn(BPF_LD_B_ABS, 0, 0, CONTROL_OFFSET as u32),
        insn(BPF_JEQ_K, 0, to(10, 13), CONTROL_UI as u32),
        insn(BPF_LD_H_ABS, 0, 0, DST_PORT_OFFSET as u32),
        insn(BPF_JEQ_K, to(12, ACCEPT), to(12, REJECT), port as u32),
        insn(BPF_ALU_AND_K, 0, 0, !u32::from(PF_BIT) & 0xff),
        insn(BPF_JEQ_K, 0, to(14, OTHER), CONTROL_TEST as u32),
        insn(BPF_LD_B_ABS, 0, 0, SSAP_OFFSET),
        insn(BPF_JSET_K, 0, to(16, OTHER), SAP_RESPONSE_BIT as u32),
        insn(BPF_LD_W_ABS, 0, 0, INFO_OFFSET),
        insn(BPF_JEQ_K, 0, to(18, OTHER), magic),
        insn(BPF_LD_H_ABS, 0, 0, INFO_OFFSET + 4),
        insn(BPF_JEQ_K, to(20, ACCEPT), to(20, REJECT), port as u32),
        insn(BPF_RET_K, 0, 0, if link_role { u32::MAX } else { 0 }),
        insn(BPF_RET_K, 0, 0, u32::MAX),
        insn(BPF_RET_K, 0, 0, 0),
    ]
}

/// The socket filter: accept whole frames that are ours, reject the rest.
///
/// ```text
/// 0: ld  pkttype          ; reject frames for other hosts (and our own)
/// 1: jgt #2        -> 10
/// 2: ld  vlan_present     ; reject VLAN-tagged frames
/// 3: jeq #0        -> 4 else 10
/// 4: ldh [12]             ; length/type
/// 5: jgt #1500     -> 6 else 7
/// 6: jeq #0x8870   -> 7 else 10
/// 7: ldb [14]             ; DSAP (a frame too short to have one aborts: reject)
/// 8: jeq #sap      -> 9 else 10
/// 9: ret #-1              ; accept, whole frame
/// 10: ret #0              ; reject
/// ```
pub(crate) fn llc_filter(sap: u8) -> [libc::sock_filter; 11] {
    [
        insn(BPF_LD_W_ABS, 0, 0, ANC_PKTTYPE),
        insn(BPF_JGT_K, 8, 0, PKTTYPE_MAX_ACCEPTED),
        insn(BPF_LD_W_ABS, 0, 0, ANC_VLAN_PRESENT),
        insn(BPF_JEQ_K, 0, 6, 0),
        insn(BPF_LD_H_ABS, 0, 0, LENGTH_TYPE_OFFSET),
        insn(BPF_JGT_K, 0, 1, MAX_LENGTH_FIELD as u32),
        insn(BPF_JEQ_K, 0, 3, ETHERTYPE_JUMBO_LLC as u32),
        insn(BPF_LD_B_ABS, 0, 0, DSAP_OFFSET),
        insn(BPF_JEQ_K, 0, 1, sap as u32),
        insn(BPF_RET_K, 0, 0, u32::MAX),
        insn(BPF_RET_K, 0, 0, 0),
    ]
}

/// The filter of a granted endpoint: frames that arrived on interface
/// `ifindex` (so binding the socket elsewhere yields nothing), then the
/// shared-interface filter of `port`, with the link role (the service's
/// TEST/XID responder) or without (every granted endpoint).
///
/// ```text
/// 0: ld  ifidx
/// 1: jeq #ifindex  -> 2 else REJECT (the last instruction)
/// 2..: endpoint_filter(sap, port, link_role)
/// ```
pub(crate) fn granted_filter(
    sap: u8,
    port: u16,
    link_role: bool,
    ifindex: u32,
) -> Vec<libc::sock_filter> {
    let inner = endpoint_filter(sap, port, link_role);
    // The inner filter's last instruction (a reject) is at index
    // `inner.len() + 1`; a jump from instruction 1 skips `inner.len() - 1`.
    let to_reject = u8::try_from(inner.len() - 1).expect("short filter");
    let mut f = vec![
        libc::sock_filter {
            code: 0x20, // ld word abs (ancillary)
            jt: 0,
            jf: 0,
            k: (libc::SKF_AD_OFF + libc::SKF_AD_IFINDEX) as u32,
        },
        libc::sock_filter {
            code: 0x15, // jeq k
            jt: 0,
            jf: to_reject,
            k: ifindex,
        },
    ];
    f.extend_from_slice(&inner);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packet types as the kernel's `skb->pkt_type`.
    const HOST: u32 = 0;
    const BROADCAST: u32 = 1;
    const OTHERHOST: u32 = 3;
    const OUTGOING: u32 = 4;

    /// What a filter sees besides the bytes.
    struct Meta {
        pkttype: u32,
        vlan: bool,
    }

    const PLAIN: Meta = Meta {
        pkttype: HOST,
        vlan: false,
    };

    /// A classic BPF interpreter for the instructions `llc_filter` uses, with
    /// the kernel's rules: out-of-bounds loads abort with 0, forward jumps
    /// only, the program must end in a return.
    fn run(prog: &[libc::sock_filter], pkt: &[u8], meta: &Meta) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let i = prog[pc];
            pc += 1;
            let load = |size: usize| -> Option<u32> {
                match i.k {
                    ANC_PKTTYPE => Some(meta.pkttype),
                    ANC_VLAN_PRESENT => Some(meta.vlan as u32),
                    k if k >= (libc::SKF_AD_OFF as u32) => panic!("unknown ancillary load {k:#x}"),
                    k => {
                        let k = k as usize;
                        let bytes = pkt.get(k..k.checked_add(size)?)?;
                        Some(bytes.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b)))
                    }
                }
            };
            match i.code {
                BPF_LD_W_ABS | BPF_LD_H_ABS | BPF_LD_B_ABS => {
                    let size = match i.code {
                        BPF_LD_W_ABS => 4,
                        BPF_LD_H_ABS => 2,
                        _ => 1,
                    };
                    match load(size) {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                BPF_JEQ_K | BPF_JGT_K => {
                    let taken = if i.code == BPF_JEQ_K {
                        a == i.k
                    } else {
                        a > i.k
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                BPF_RET_K => return i.k,
                other => panic!("opcode {other:#x} not modelled"),
            }
            assert!(pc < prog.len(), "fell off the end of the program");
        }
    }

    /// A frame of `total` bytes (cut short if under 17) with this
    /// length/type field and DSAP.
    fn frame(length_type: u16, dsap: u8, total: usize) -> Vec<u8> {
        let mut f = vec![0u8; total.max(17)];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&length_type.to_be_bytes());
        f[14] = dsap;
        f[15] = dsap;
        f[16] = 0x03;
        f.truncate(total);
        f
    }

    #[test]
    fn filter_accepts_exactly_our_llc_frames() {
        let prog = llc_filter(0x7C);
        let accept = |f: &[u8], m: &Meta| run(&prog, f, m) != 0;

        // Length form, any length value up to 1500, our DSAP.
        assert!(accept(&frame(46, 0x7C, 60), &PLAIN));
        assert!(accept(&frame(1500, 0x7C, 1514), &PLAIN));
        assert!(accept(&frame(0, 0x7C, 60), &PLAIN));
        assert!(accept(&frame(3, 0x7C, 17), &PLAIN));
        // Jumbo form.
        assert!(accept(&frame(0x8870, 0x7C, 9014), &PLAIN));
        // Broadcast and multicast are for us too.
        let bcast = Meta {
            pkttype: BROADCAST,
            vlan: false,
        };
        assert!(accept(&frame(46, 0x7C, 60), &bcast));

        // Another SAP, in either form.
        assert!(!accept(&frame(46, 0x42, 60), &PLAIN));
        assert!(!accept(&frame(0x8870, 0x7D, 9014), &PLAIN));
        // Length/type values just above 1500 are EtherTypes (or invalid).
        assert!(!accept(&frame(1501, 0x7C, 1515), &PLAIN));
        assert!(!accept(&frame(1536, 0x7C, 60), &PLAIN));
        // Other protocols whose byte 14 happens to equal our SAP.
        for ethertype in [0x0800u16, 0x0806, 0x86DD, 0x88CC, 0x8871, 0x8100] {
            assert!(
                !accept(&frame(ethertype, 0x7C, 60), &PLAIN),
                "{ethertype:#x}"
            );
        }
        // Runts without a DSAP byte.
        assert!(!accept(&frame(46, 0x7C, 14), &PLAIN));
        assert!(!accept(&frame(46, 0x7C, 12), &PLAIN));
        assert!(!accept(&[], &PLAIN));
        // Not addressed to this host, our own outgoing frames, VLAN-tagged.
        for m in [
            Meta {
                pkttype: OTHERHOST,
                vlan: false,
            },
            Meta {
                pkttype: OUTGOING,
                vlan: false,
            },
            Meta {
                pkttype: HOST,
                vlan: true,
            },
        ] {
            assert!(!accept(&frame(46, 0x7C, 60), &m));
        }
    }

    #[test]
    fn filter_keeps_whole_frames_and_follows_the_sap() {
        for sap in [0x00u8, 0x7C, 0xAA, 0xFE, 0xFF] {
            let prog = llc_filter(sap);
            assert_eq!(run(&prog, &frame(46, sap, 60), &PLAIN), u32::MAX);
            assert_eq!(run(&prog, &frame(46, sap.wrapping_add(1), 60), &PLAIN), 0);
        }
    }

    #[test]
    fn filter_is_well_formed() {
        let prog = llc_filter(0x7C);
        assert_eq!(prog.last().unwrap().code, BPF_RET_K);
        for (pc, i) in prog.iter().enumerate() {
            if matches!(i.code, BPF_JEQ_K | BPF_JGT_K) {
                for off in [i.jt, i.jf] {
                    assert!(
                        pc + 1 + usize::from(off) < prog.len(),
                        "jump out of program at {pc}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_granted_filter_rejects_other_interfaces_first() {
        let f = granted_filter(0x7c, 5000, false, 9);
        assert_eq!(f[1].k, 9);
        // The jump from instruction 1 lands on the last instruction: ret #0.
        let target = 1 + 1 + f[1].jf as usize;
        assert_eq!(target, f.len() - 1);
        assert_eq!((f[target].code, f[target].k), (0x06, 0));
    }
}
