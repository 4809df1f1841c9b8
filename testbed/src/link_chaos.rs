//! Damage frames on a test link from outside the stack under test: a tc BPF
//! program (`bpf/link_chaos.bpf.c`, compiled by `build.rs`) on the egress hook
//! of an interface drops, duplicates or corrupts frames with probabilities the
//! test sets through a BPF map, and counts what it did. The kernel of the test
//! machine has cls_bpf and clsact but no netem.
//!
//! Put it on the hub ports of a [`crate::Bridged`] switch: every frame a host
//! sends, over AF_PACKET or AF_XDP alike, leaves the bridge through a port's
//! egress hook (AF_XDP's copy-mode transmit bypasses the sending interface's
//! own qdisc layer, and XDP on the receiving interface runs before its tc
//! ingress hook, so the hosts' own interfaces are the wrong place).
//!
//! The filter lives as long as the interface: dropping [`LinkChaos`] removes
//! the clsact qdisc, and deleting the namespace (also on panic) removes
//! everything with the interface.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use libbpf_rs::{MapCore, MapFlags, MapHandle, ObjectBuilder, TcHookBuilder, TC_EGRESS};

use crate::netns::{run_checked, HarnessError, Netns};

/// The compiled BPF object (ELF).
pub const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/link_chaos.bpf.o"));

/// What the program does to each selected frame. Probabilities are per frame.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChaosSettings {
    /// Probability a frame is dropped.
    pub drop: f64,
    /// Probability a frame is sent twice.
    pub duplicate: f64,
    /// Probability one bit after the Ethernet header is flipped.
    pub corrupt: f64,
    /// Seed of the per-CPU generators (writing a new one reseeds them).
    pub seed: u64,
    /// `Some(sap)`: only 802.2 LLC frames for this DSAP; `None`: every frame.
    pub sap: Option<u8>,
}

/// What the program did so far (all hooked interfaces together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChaosCounters {
    /// Frames seen (duplicates excluded).
    pub seen: u64,
    /// Frames the settings select.
    pub matched: u64,
    /// Frames dropped.
    pub dropped: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Frames with a flipped bit.
    pub corrupted: u64,
}

/// The program attached to the egress hook of some interfaces of a namespace.
#[derive(Debug)]
pub struct LinkChaos {
    config: MapHandle,
    counters: MapHandle,
    netns: String,
    ifaces: Vec<String>,
}

fn bpf_error(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> HarnessError {
    let what = what.into();
    move |e| HarnessError::Io {
        what,
        source: io::Error::other(format!("{e:#}")),
    }
}

/// Probability as a threshold out of 2^32.
fn threshold(p: f64) -> u64 {
    (p.clamp(0.0, 1.0) * 4_294_967_296.0) as u64
}

/// The `struct chaos_config` of the C source, in native byte order.
fn encode(s: &ChaosSettings) -> [u8; 40] {
    let mut v = [0u8; 40];
    v[0..8].copy_from_slice(&threshold(s.drop).to_ne_bytes());
    v[8..16].copy_from_slice(&threshold(s.duplicate).to_ne_bytes());
    v[16..24].copy_from_slice(&threshold(s.corrupt).to_ne_bytes());
    v[24..32].copy_from_slice(&s.seed.to_ne_bytes());
    let sap = s.sap.map_or(256u32, u32::from);
    v[32..36].copy_from_slice(&sap.to_ne_bytes());
    v
}

/// Interface index of `iface` in `ns`, from `ip -o link show` ("7: name@...: ...").
fn ifindex(ns: &Netns, iface: &str) -> Result<u32, HarnessError> {
    let out = ns.ip(&["-o", "link", "show", "dev", iface])?;
    out.split(':')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| HarnessError::Io {
            what: format!("reading the index of {iface} in {}", ns.name()),
            source: io::Error::other(format!("unexpected `ip -o link` output {out:?}")),
        })
}

impl LinkChaos {
    /// Load the program with `settings` and attach it to the egress hook of
    /// each interface in `ifaces` (in namespace `ns`), creating their clsact
    /// qdiscs.
    pub fn attach(
        ns: &Netns,
        ifaces: &[&str],
        settings: &ChaosSettings,
    ) -> Result<LinkChaos, HarnessError> {
        let indices = ifaces
            .iter()
            .map(|i| ifindex(ns, i))
            .collect::<Result<Vec<_>, _>>()?;
        let value = encode(settings);
        // Netlink requests go to the namespace of the calling thread.
        let (config, counters) = ns.run(move || -> Result<_, HarnessError> {
            let obj = ObjectBuilder::default()
                .open_memory(OBJECT)
                .map_err(bpf_error("opening the link_chaos BPF object"))?
                .load()
                .map_err(bpf_error("loading the link_chaos BPF program"))?;
            let handle = |name: &str| {
                let map =
                    obj.maps()
                        .find(|m| m.name() == name)
                        .ok_or_else(|| HarnessError::Io {
                            what: "loading link_chaos".into(),
                            source: io::Error::other(format!("map {name} missing")),
                        })?;
                MapHandle::try_from(&map).map_err(bpf_error("taking a BPF map handle"))
            };
            let config = handle("config")?;
            let counters = handle("counters")?;
            config
                .update(&0u32.to_ne_bytes(), &value, MapFlags::ANY)
                .map_err(bpf_error("writing the link_chaos configuration"))?;
            let prog = obj
                .progs()
                .find(|p| p.name() == "link_chaos")
                .ok_or_else(|| HarnessError::Io {
                    what: "loading link_chaos".into(),
                    source: io::Error::other("program link_chaos missing"),
                })?;
            for &index in &indices {
                let mut hook = TcHookBuilder::new(prog.as_fd())
                    .ifindex(index as i32)
                    .replace(true)
                    .handle(1)
                    .priority(1)
                    .hook(TC_EGRESS);
                hook.create()
                    .map_err(bpf_error(format!("creating clsact on ifindex {index}")))?;
                hook.attach().map_err(bpf_error(format!(
                    "attaching link_chaos to ifindex {index}"
                )))?;
            }
            // The filters hold the program; our handles hold the maps.
            Ok((config, counters))
        })?;
        Ok(LinkChaos {
            config,
            counters,
            netns: ns.name().to_owned(),
            ifaces: ifaces.iter().map(|s| s.to_string()).collect(),
        })
    }

    /// Change what is done from the next frame on.
    pub fn set(&self, settings: &ChaosSettings) -> Result<(), HarnessError> {
        self.config
            .update(&0u32.to_ne_bytes(), &encode(settings), MapFlags::ANY)
            .map_err(bpf_error("writing the link_chaos configuration"))
    }

    /// What was done so far.
    pub fn counters(&self) -> ChaosCounters {
        let read = |i: u32| -> u64 {
            match self.counters.lookup(&i.to_ne_bytes(), MapFlags::ANY) {
                Ok(Some(v)) if v.len() >= 8 => {
                    u64::from_ne_bytes(v[..8].try_into().expect("8 bytes"))
                }
                _ => 0,
            }
        };
        ChaosCounters {
            seen: read(0),
            matched: read(1),
            dropped: read(2),
            duplicated: read(3),
            corrupted: read(4),
        }
    }
}

impl Drop for LinkChaos {
    fn drop(&mut self) {
        for iface in &self.ifaces {
            let mut cmd = std::process::Command::new("tc");
            cmd.args(["-n", &self.netns, "qdisc", "del", "dev", iface, "clsact"]);
            // Fails harmlessly when the namespace went first.
            if let Err(e) = run_checked(&mut cmd, Duration::from_secs(10)) {
                tracing::debug!("removing link_chaos from {iface}: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_encode_as_the_c_struct() {
        let v = encode(&ChaosSettings {
            drop: 0.5,
            duplicate: 1.0,
            corrupt: 0.0,
            seed: 7,
            sap: Some(0x7c),
        });
        let word = |i: usize| u64::from_ne_bytes(v[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(word(0), 1 << 31, "half of 2^32");
        assert_eq!(word(1), 1 << 32, "certain: above every 32-bit draw");
        assert_eq!((word(2), word(3)), (0, 7));
        assert_eq!(u32::from_ne_bytes(v[32..36].try_into().unwrap()), 0x7c);
        let all = encode(&ChaosSettings::default());
        assert_eq!(
            u32::from_ne_bytes(all[32..36].try_into().unwrap()),
            256,
            "every frame"
        );
    }
}
