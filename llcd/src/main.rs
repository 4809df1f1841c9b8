//! `llcd`: the LLC stack's endpoint service. Installed once per host by
//! root, it lets ordinary users open endpoints: a process without
//! privileges asks it (over the abstract unix socket `llc/llcd` of its
//! network namespace) and receives a packet socket whose filter, set and
//! locked here, passes only that endpoint's frames. The data path then runs
//! in the process; this service is not on it. docs/ARCHITECTURE.md,
//! "Ordinary users", has the design; the policy file is described in
//! `llcd --help` and docs/SECURITY.md.

#![deny(unsafe_code)]

mod policy;
mod responder;
mod service;
#[allow(unsafe_code)]
mod sys;
#[allow(unsafe_code)]
mod users;
mod xdp;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Parser;
use llc_stack::link::grant::{self, Listener};

use policy::Policy;
use service::Service;

/// The LLC stack's endpoint service: opens endpoints for ordinary users.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "The policy file (TOML; every key optional):\n  \
        interfaces = [\"eth0\", \"eth1\"]     # where users may open endpoints (default: any)\n  \
        allow = [\"alice\", \"@hpc\", \"uid:4242\"] # who may (default: every user)\n  \
        max_endpoints_per_user = 256         # endpoints one user may hold at once\n  \
        max_locked_mib_per_user = 1024       # AF_XDP buffer memory one user may pin (0: AF_PACKET only)\n\n\
        One service runs per network namespace (the host's, or each simulated host's).\n\
        Installed with scripts/install.sh, it runs as the systemd unit llcd.service."
)]
struct Args {
    /// Stay in the foreground and log to standard output (systemd, test beds).
    /// Without it, llcd detaches once it serves and logs to --log.
    #[arg(long)]
    foreground: bool,
    /// The policy file; the defaults when it does not exist.
    #[arg(long, default_value = policy::DEFAULT_PATH)]
    config: PathBuf,
    /// Where a detached llcd writes its log.
    #[arg(long, default_value = "/var/log/llcd.log")]
    log: PathBuf,
    /// Check the policy file, print the policy and exit.
    #[arg(long)]
    check_config: bool,
    /// Ask the running service of this network namespace for its counters
    /// and the endpoints held (your own; every user's for root), and exit.
    #[arg(long)]
    status: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.status {
        let status = grant::status().context(format!(
            "no llcd answers in this network namespace (@{})",
            grant::SERVICE_NAME
        ))?;
        println!("{status}");
        return Ok(());
    }
    // A file named on the command line must exist; the default one may not.
    let explicit = std::env::args_os()
        .any(|a| a == "--config" || a.to_string_lossy().starts_with("--config="));
    let policy = Policy::load(&args.config, explicit)?;
    if args.check_config {
        println!("{policy:#?}");
        return Ok(());
    }
    if !sys::can_open_packet_sockets() {
        bail!(
            "llcd opens raw packet sockets for its users and needs CAP_NET_RAW: start it as root \
             (systemctl start llcd)"
        );
    }
    let listener = match Listener::bind() {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => bail!(
            "another llcd already serves this network namespace{} (its socket @{} is taken)",
            sys::holder_of_service()
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default(),
            grant::SERVICE_NAME
        ),
        Err(e) => return Err(e).context(format!("binding @{}", grant::SERVICE_NAME)),
    };
    if args.foreground {
        init_logging(None)?;
    } else {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.log)
            .with_context(|| format!("opening the log {}", args.log.display()))?;
        sys::detach()?;
        init_logging(Some(log))?;
    }
    sys::raise_descriptor_limit();
    let service = Service::new(policy.clone());
    service.sweep_in_background();
    tracing::info!(
        config = %args.config.display(),
        interfaces = ?policy.interfaces,
        allow = ?policy.allow,
        max_endpoints_per_user = policy.max_endpoints_per_user,
        max_locked_mib_per_user = policy.max_locked_mib_per_user,
        "llcd serving @{}", grant::SERVICE_NAME
    );
    // The line the test beds wait for.
    if args.foreground {
        println!("llcd: ready, pid {}", std::process::id());
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    service.serve(listener).context("accepting clients")
}

fn init_logging(file: Option<std::fs::File>) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LLCD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match file {
        Some(f) => builder
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(f))
            .try_init(),
        // In the foreground the log goes to standard output, line by line
        // (systemd's journal takes it; a test bed reads it as it comes).
        None => {
            use std::io::IsTerminal;
            builder
                .with_ansi(std::io::stdout().is_terminal())
                .with_writer(std::io::stdout)
                .try_init()
        }
    }
    .map_err(|e| anyhow::anyhow!("logging: {e}"))
}
