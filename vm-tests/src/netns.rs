//! Test hosts on one machine: the beds of the `testbed` crate (re-exported here, so
//! `vm_tests::netns::...` names them as before) and [`MultiPort`], a bed of the MPI tests:
//! many ports in one namespace.

use std::net::Ipv4Addr;

pub use testbed::netns::*;

/// One namespace with `n` ports `llc0..llc{n-1}` on one Linux bridge (in a separate hub
/// namespace): for programs that start all their processes in one namespace, as `mpirun`
/// does, each process taking its own port. Port `i` has address `.i+1` of a per-run /24,
/// so TCP between the ports works too; by default the kernel delivers local addresses via
/// loopback, [`MultiPort::route_through_bridge`] makes it cross the bridge instead.
#[derive(Debug)]
pub struct MultiPort {
    /// The namespace holding the bridge and the hub-side veth ends `p0..pN`.
    pub hub: Netns,
    /// The namespace holding the ports.
    pub ns: Netns,
    /// Port names, in order (`llc0`, `llc1`, ...).
    pub ports: Vec<String>,
    /// Their MACs.
    pub macs: Vec<[u8; 6]>,
    /// Their IPv4 addresses.
    pub ipv4: Vec<Ipv4Addr>,
    /// The MTU of every link.
    pub mtu: u32,
}

impl MultiPort {
    /// Builds the bridge and `n` (1..=254) ports; on error everything created is deleted.
    pub fn new(n: usize, mtu: u32) -> Result<MultiPort, HarnessError> {
        check_mtu(mtu)?;
        if !(1..=254).contains(&n) {
            return Err(HarnessError::InvalidArgument(format!(
                "{n} ports: 1..=254 allowed"
            )));
        }
        let plan = AddressPlan::next();
        let hub = Netns::new("mhub")?;
        let ns = Netns::new("multi")?;
        let mtu_s = mtu.to_string();
        #[rustfmt::skip]
        hub.ip(&["link", "add", BRIDGE_NAME, "mtu", &mtu_s, "type", "bridge", "stp_state", "0"])?;
        hub.ip(&["link", "set", "dev", BRIDGE_NAME, "up"])?;
        let (mut ports, mut macs, mut ipv4) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            let index = (i + 1) as u8;
            let (port, hub_port) = (format!("llc{i}"), format!("p{i}"));
            let (mac, hub_mac) = (plan.host_mac(index), plan.hub_mac(index));
            add_veth(&hub, &hub_port, &hub_mac, &ns, &port, &mac, mtu)?;
            hub.ip(&["link", "set", "dev", &hub_port, "master", BRIDGE_NAME, "up"])?;
            let addr = plan.ipv4(index);
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", &port])?;
            ns.ip(&["link", "set", "dev", &port, "up"])?;
            ports.push(port);
            macs.push(mac);
            ipv4.push(addr);
        }
        hub.ip(&["link", "set", "dev", BRIDGE_NAME, "mtu", &mtu_s])?;
        bridge_without_netfilter(&hub);
        Ok(MultiPort {
            hub,
            ns,
            ports,
            macs,
            ipv4,
            mtu,
        })
    }
}

impl MultiPort {
    /// Bytes the bridge has received from port `i` (what the namespace sent
    /// out of it), from the hub-side veth end's counters.
    pub fn bridge_rx_bytes(&self, i: usize) -> Result<u64, HarnessError> {
        let dev = format!("p{i}");
        let out = self.hub.ip(&["-s", "-o", "link", "show", "dev", &dev])?;
        // "... RX: bytes packets ...\    <bytes> <packets> ..."
        out.split("RX:")
            .nth(1)
            .and_then(|rx| rx.split('\\').nth(1))
            .and_then(|f| f.split_whitespace().next())
            .and_then(|b| b.parse().ok())
            .ok_or_else(|| {
                HarnessError::InvalidArgument(format!("no RX byte count for {dev} in {out:?}"))
            })
    }

    /// Makes IPv4 traffic between two ports of this namespace leave by the sender's port,
    /// cross the bridge and arrive on the receiver's port, as it would between two hosts,
    /// instead of taking the loopback shortcut the kernel uses for local addresses: so that
    /// TCP measured here crosses the same link as LLC. Policy routing: frames arriving on
    /// a port are looked up in the local table first; a socket bound to port `i`'s address
    /// (or, unbound, sending to port `j`) routes through its own table, which sends to the
    /// other ports out of port `i` (for unbound sockets, out of the port before `j`); the local
    /// table comes after these rules. Neighbours are static and local sources are accepted.
    pub fn route_through_bridge(&self) -> Result<(), HarnessError> {
        let n = self.ports.len();
        if n < 2 {
            return Ok(());
        }
        let mut sysctl = self.ns.command("sysctl");
        sysctl.args([
            "-qw",
            "net.ipv4.conf.all.accept_local=1",
            "net.ipv4.conf.all.rp_filter=0",
        ]);
        for port in &self.ports {
            sysctl.arg(format!("net.ipv4.conf.{port}.accept_local=1"));
            sysctl.arg(format!("net.ipv4.conf.{port}.rp_filter=0"));
        }
        run_checked(&mut sysctl, IP_TIMEOUT)?;
        for (i, port) in self.ports.iter().enumerate() {
            let (table, pref) = ((100 + i).to_string(), (100 + i).to_string());
            let src = self.ipv4[i].to_string();
            self.ns
                .ip(&["rule", "add", "pref", "10", "iif", port, "lookup", "local"])?;
            self.ns
                .ip(&["rule", "add", "pref", &pref, "from", &src, "lookup", &table])?;
            for (j, dst) in self.ipv4.iter().enumerate() {
                if j != i {
                    let (dst, mac) = (dst.to_string(), format_mac(&self.macs[j]));
                    #[rustfmt::skip]
                    self.ns.ip(&["route", "add", &dst, "dev", port, "src", &src, "table", &table])?;
                    #[rustfmt::skip]
                    self.ns.ip(&["neigh", "replace", &dst, "lladdr", &mac, "dev", port, "nud", "permanent"])?;
                }
            }
        }
        for (j, dst) in self.ipv4.iter().enumerate() {
            let out = (j + n - 1) % n;
            let (table, pref) = ((100 + out).to_string(), (400 + j).to_string());
            #[rustfmt::skip]
            self.ns.ip(&["rule", "add", "pref", &pref, "to", &dst.to_string(), "lookup", &table])?;
        }
        self.ns
            .ip(&["rule", "add", "pref", "1000", "lookup", "local"])?;
        self.ns
            .ip(&["rule", "del", "pref", "0", "lookup", "local"])?;
        Ok(())
    }
}
