//! The provider's parameters (`FI_LLC_*`, listed by `fi_info -e`): btl/llc's
//! MCA parameters under libfabric's names, turned into the LLC spec each
//! endpoint opens.

use std::ffi::CStr;
use std::time::Duration;

use msg_layer::transport::llc::select_interfaces;
use msg_layer::transport::spec::{AuthKey, Backend, KeySource, LlcSpec, AUTH_KEY_ENV};

use crate::core;

const PARAMS: &[(&CStr, &str)] = &[
    (
        c"iface",
        "Interfaces to offer, comma-separated (default: every up Ethernet interface that can carry LLC; each process's first choice rotates with its local rank, as btl/llc chooses)",
    ),
    (
        c"backend",
        "auto (AF_XDP when it can be set up, else AF_PACKET), xdp or packet",
    ),
    (c"sap", "The LLC SAP endpoints use (default 0x7c)"),
    (
        c"idle_timeout_ms",
        "Fail a peer silent this long, in milliseconds: its pending operations complete with an error",
    ),
    (
        c"auth",
        "env (default: frames are authenticated with the key LLC_AUTH_KEY derives, when set) or off",
    ),
];

/// Declare the parameters with the core.
pub fn define() {
    for (name, help) in PARAMS {
        core::define_param(name, help);
    }
}

fn get(name: &CStr) -> Option<String> {
    core::param(name).filter(|v| !v.is_empty())
}

/// The local rank a launcher gave this process (Open MPI, MPICH's hydra,
/// PMIx launchers, Slurm), for the first choice of interface.
fn local_rank() -> usize {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "PMIX_LOCAL_RANK",
        "SLURM_LOCALID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
    .unwrap_or(0)
}

/// The names of the interfaces to offer, in the kernel's order: those
/// `FI_LLC_IFACE` lists, or every one that can carry LLC.
fn offered_names() -> Result<Vec<String>, String> {
    let named = get(c"iface").unwrap_or_default();
    let include: Vec<&str> = named
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    select_interfaces(&include, &[]).map_err(|e| e.to_string())
}

/// How many processes of this job run on this host, when a launcher says
/// (Open MPI, MPICH's hydra, PMIx launchers, Slurm with one count per node).
fn local_size() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "PMIX_LOCAL_SIZE",
        "SLURM_NTASKS_PER_NODE",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// Whether this process's endpoint on `ifname` is the only one of the job
/// on it (each local rank takes the interface its rank rotates to, as
/// [`interfaces`] offers them): then backend `auto` may take AF_PACKET for
/// jumbo frames, as btl/llc does for a rank alone on its NIC. Unknown (no
/// launcher's count): shared.
fn alone_on(ifname: &str) -> bool {
    let Some(size) = local_size() else {
        return false;
    };
    let Ok(names) = offered_names() else {
        return false;
    };
    let Some(index) = names.iter().position(|n| n == ifname) else {
        return false;
    };
    (0..size).filter(|r| r % names.len() == index).count() == 1
}

/// The interfaces to offer, with their MACs, the local rank's choice first
/// (the rest in the kernel's order after it), as one `fi_info` each.
pub fn interfaces() -> Result<Vec<(String, [u8; 6])>, String> {
    let names = offered_names()?;
    let all = llc_stack::link::interfaces::interfaces().map_err(|e| e.to_string())?;
    let mut out: Vec<(String, [u8; 6])> = names
        .iter()
        .filter_map(|n| {
            all.iter()
                .find(|i| &i.name == n)
                .map(|i| (n.clone(), i.mac))
        })
        .collect();
    if !out.is_empty() {
        let first = local_rank() % out.len();
        out.rotate_left(first);
    }
    Ok(out)
}

/// Whether `node` names this host (see [`crate::info::Host::this_host`]):
/// `localhost`, the host name, a loopback address, or an IP address one of
/// its interfaces holds (then that interface). Launchers and test programs
/// pass such names; a peer elsewhere is named by its `[MAC]`.
pub fn this_host(node: &str) -> Option<Option<String>> {
    if node == "localhost" || Some(node) == host_name().as_deref() {
        return Some(None);
    }
    let ip: std::net::IpAddr = node.parse().ok()?;
    if ip.is_loopback() {
        return Some(None);
    }
    llc_stack::link::interfaces::interface_with_address(ip)
        .ok()
        .flatten()
        .map(Some)
}

/// This host's name (gethostname(2)).
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; the kernel
    // NUL-terminates names shorter than it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&buf[..end]).ok().map(str::to_owned)
}

/// The spec an endpoint on `ifname` opens, from the parameters.
pub fn spec(ifname: &str) -> Result<LlcSpec, String> {
    let mut s = LlcSpec::new(ifname);
    s.port = 0;
    s.alone = alone_on(ifname);
    if let Some(b) = get(c"backend") {
        s.backend = b
            .parse::<Backend>()
            .map_err(|e| format!("FI_LLC_BACKEND {e}"))?;
    }
    if let Some(v) = get(c"sap") {
        let n = match v.strip_prefix("0x") {
            Some(h) => u8::from_str_radix(h, 16),
            None => v.parse(),
        }
        .map_err(|_| format!("FI_LLC_SAP {v:?} is not a byte"))?;
        s.config.sap = n;
    }
    if let Some(v) = get(c"idle_timeout_ms") {
        let ms: u64 = v
            .parse()
            .map_err(|_| format!("FI_LLC_IDLE_TIMEOUT_MS {v:?} is not a number of milliseconds"))?;
        s.set_idle_timeout(Duration::from_millis(ms));
    }
    if let Some(v) = get(c"auth") {
        s.auth = match v.parse::<KeySource>() {
            Ok(k @ (KeySource::Env | KeySource::Off)) => k,
            _ => return Err(format!("FI_LLC_AUTH {v:?}: expected env or off")),
        };
    }
    if s.auth == KeySource::Env && std::env::var_os(AUTH_KEY_ENV).is_none() {
        match std::env::var(JOB_SECRET_ENV) {
            Ok(m) if !m.is_empty() => s.config.auth_key = Some(AuthKey::derive(m.as_bytes())),
            _ => crate::warn(
                crate::abi::FI_LOG_DOMAIN,
                &format!(
                    "this job's frames are not authenticated: give its processes key material in \
                     {AUTH_KEY_ENV} (mpirun -x {AUTH_KEY_ENV}, mpiexec -genv {AUTH_KEY_ENV} ...), \
                     or set FI_LLC_AUTH=off to say so"
                ),
            ),
        }
    }
    Ok(s)
}

/// Open MPI 4.1's per-job random value (128 bits), which its mpirun gives
/// every process of the job through its own launch channel (psm2 keys its
/// jobs with it): the key material of a job that sets no `LLC_AUTH_KEY`,
/// so that Open MPI jobs over the provider are keyed by default.
pub const JOB_SECRET_ENV: &str = "OMPI_MCA_orte_precondition_transports";
