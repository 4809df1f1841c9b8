//! deckrun: start a DECK job.
//!
//! Starts N processes of a program, nodes 0..N-1, on this host or on the
//! hosts given (block placement; remote ones through an rsh agent such as
//! ssh), serves the bootstrap through which `deck_init` learns the peers
//! (`deck::boot`), forwards the nodes' output with a `[N] ` prefix, and
//! stops the whole job when one node fails. See `deck/README.md`.
//!
//! The workspace's `launcher` starts, watches and tears down the processes;
//! what is DECK's is here: the nodes' environment (`env.rs`), and the
//! bootstrap server with ABORT, the teardown's graceful step (`boot.rs`).

// A binary's root looks for modules beside it: point at deckrun/.
#[path = "deckrun/boot.rs"]
mod boot;
#[path = "deckrun/env.rs"]
mod env;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use deck::boot::{
    BootServer, Incoming, KeyMaterial, DEFAULT_TRANSPORT, ENV_BOOT, ENV_JOB, ENV_LOCAL_RANK,
    ENV_NODE, ENV_NUMNODES, ENV_TRANSPORT, MAX_NODES,
};
use launcher::hosts::{is_local, own_hostname, place, resolve_ipv4, route_source};
use launcher::start::{check_remote_program, random_job_id, resolve_program};
use launcher::status::EXIT_LAUNCHER;
use launcher::{HostSpec, Job, Launch, Start};
use msg_layer::transport::llc::AUTH_KEY_ENV;
use msg_layer::transport::TransportSpec;

#[derive(Parser, Debug)]
#[command(
    name = "deckrun",
    version,
    about = "Start a DECK job: N processes of PROGRAM, nodes 0..N-1",
    after_help = "Examples:\n  \
        deckrun -n 4 ./ring\n  \
        deckrun -n 8 --host n1:4,n2:4 --transport llc://eth0 -x OMP_NUM_THREADS=1 ./solver in.dat\n  \
        deckrun -n 2 --transport 'llc://?backend=packet' ./ring\n  \
        deckrun -n 2 --transport tcp://0.0.0.0:0 ./ring\n\n\
        Every node gets DECK_NODE, DECK_LOCAL_RANK, DECK_NUMNODES, DECK_BOOT, DECK_JOB and\n\
        DECK_TRANSPORT, and over LLC the job's key (through deckrun's connection, never\n\
        on a command line): LLC_AUTH_KEY's when deckrun has it, else a random one.\n\
        deckrun exits 0 when every node exited 0, else with the status of\n\
        the first node that failed (128+N for signal N), after stopping the others.\n\
        Log: RUST_LOG=deckrun=debug,launcher=debug,deck=debug"
)]
struct Args {
    /// Number of nodes (processes) to start.
    #[arg(short = 'n', value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_NODES)))]
    n: u32,
    /// Hosts to run on, filled in order: H1's slots first, then H2's...
    /// SLOTS defaults to ceil(N / number of hosts). Default: all on this host.
    #[arg(
        long = "host",
        value_name = "H1[:SLOTS],H2[:SLOTS],...",
        value_delimiter = ','
    )]
    hosts: Vec<HostSpec>,
    /// Remote shell that starts the nodes of other hosts, called as
    /// `AGENT HOST COMMAND...` like ssh (may be a script, or carry options:
    /// "ssh -x").
    #[arg(long, value_name = "AGENT", default_value = "ssh")]
    rsh: String,
    /// The transport spec every node opens (DECK_TRANSPORT), as every API
    /// of the stack takes one: `llc://` (each node on the interface btl/llc
    /// would pick for its local rank: its host's up Ethernet interfaces),
    /// `llc://eth0?backend=xdp`, or `tcp://0.0.0.0:0` (TCP; an unspecified
    /// IP is the address the hosts reach each other by). Default:
    /// deckrun's own DECK_TRANSPORT, else `llc://`.
    #[arg(long, value_name = "SPEC")]
    transport: Option<String>,
    /// Give every node this variable: NAME=VALUE, or NAME for deckrun's
    /// own value. Repeatable.
    #[arg(short = 'x', value_name = "NAME[=VALUE]")]
    export: Vec<String>,
    /// Seconds every node has to connect to deckrun (call deck_init)
    /// before the job is stopped.
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    boot_timeout: u64,
    /// Do not key the job: the nodes' LLC frames carry no authentication
    /// tag, and anyone on the segment can inject frames into the job
    /// (docs/SECURITY.md). By default deckrun hands every node a per-job
    /// key: LLC_AUTH_KEY's when deckrun has it, else one drawn at random.
    #[arg(long)]
    no_auth: bool,
    /// The program, found in PATH as on this host and started with the
    /// same absolute path on every host, and its arguments.
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .without_time()
        .init();
    let args = Args::parse();
    let code = match run(args) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "deckrun: {e:#}");
            EXIT_LAUNCHER
        }
    };
    std::process::exit(code);
}

/// Where and how each node starts (everything but the bootstrap port).
struct Plan {
    program: PathBuf,
    args: Vec<OsString>,
    /// How the nodes of other hosts start: the agent's program and
    /// options, split on white space (None: --rsh is empty).
    agent: Option<Start>,
    /// Per node: host name, and for a remote host the route's source
    /// address (what its nodes reach deckrun at).
    nodes: Vec<(String, Option<std::net::IpAddr>)>,
    /// Distinct source addresses towards the remote hosts: the other
    /// addresses of DECK_BOOT.
    sources: Vec<std::net::IpAddr>,
    /// DECK_NUMNODES, DECK_JOB, DECK_TRANSPORT and `-x`, for every node.
    common_env: Vec<(String, OsString)>,
    /// The job's id (DECK_JOB).
    job: u64,
    /// The key material the nodes get through the bootstrap (LLC only).
    key: Option<KeyMaterial>,
}

fn plan(args: &Args) -> Result<Plan> {
    // No interface named (`llc://`): each node picks as btl/llc does
    // (every up Ethernet interface of its host, its local rank choosing).
    let spec_text = match &args.transport {
        Some(s) => s.clone(),
        None => std::env::var(ENV_TRANSPORT)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_TRANSPORT.to_owned()),
    };
    let spec: TransportSpec = spec_text
        .parse()
        .with_context(|| format!("--transport {spec_text}"))?;
    let exports = args
        .export
        .iter()
        .map(|x| env::parse_export(x, |name| std::env::var_os(name)))
        .collect::<Result<Vec<_>>>()?;
    let (program, prog_args) = args.command.split_first().context("PROGRAM is missing")?;
    if let Some(opt) = program.to_str().filter(|p| p.starts_with('-')) {
        let hint = if matches!(opt, "--backend" | "--iface") {
            " (the transport is one spec now: --transport llc://IF?backend=B, or tcp://0.0.0.0:0)"
        } else {
            ""
        };
        bail!("unknown option {opt}{hint}; see deckrun --help");
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let program = resolve_program(program, std::env::var_os("PATH").as_deref(), &cwd)?;

    let hostname = own_hostname();
    let placement = place(args.n, &args.hosts)?;
    let hosts: Vec<String> = if args.hosts.is_empty() {
        vec![if hostname.is_empty() {
            "localhost".to_owned()
        } else {
            hostname.clone()
        }]
    } else {
        args.hosts.iter().map(|h| h.name.clone()).collect()
    };
    // Per host in use: None when local, else the source address of the
    // route to it.
    let mut source = vec![None; hosts.len()];
    let mut sources = Vec::new();
    for &h in placement.iter().collect::<std::collections::BTreeSet<_>>() {
        if args.hosts.is_empty() || is_local(&hosts[h], &hostname) {
            continue;
        }
        let ip = match resolve_ipv4(&hosts[h]) {
            Err(launcher::Error::NoIpv4 { host }) => {
                bail!("host {host} has no IPv4 address (deckrun's bootstrap server uses IPv4)")
            }
            ip => ip?,
        };
        let src =
            route_source(ip).with_context(|| format!("no route to host {} ({ip})", hosts[h]))?;
        if src.is_loopback() {
            // The name is an alias of this host (e.g. 127.0.1.1 in /etc/hosts).
            continue;
        }
        source[h] = Some(src);
        if !sources.contains(&src) {
            sources.push(src);
        }
    }
    let agent = Start::agent(&args.rsh);
    if source.iter().any(Option::is_some) {
        let Some(Start::Agent { program: prog, .. }) = &agent else {
            bail!("--rsh is empty");
        };
        resolve_program(prog, std::env::var_os("PATH").as_deref(), &cwd)
            .context("the remote shell agent (--rsh)")?;
        check_remote_program(&program)?;
    }

    let job = random_job_id()?;
    let key = if args.no_auth || !matches!(spec, TransportSpec::Llc(_)) {
        None
    } else {
        Some(env::job_key(std::env::var_os(AUTH_KEY_ENV))?)
    };
    let mut common_env = vec![
        (ENV_NUMNODES.to_owned(), OsString::from(args.n.to_string())),
        (ENV_JOB.to_owned(), OsString::from(format!("{job:016x}"))),
        (ENV_TRANSPORT.to_owned(), OsString::from(spec.to_string())),
    ];
    common_env.extend(exports);
    Ok(Plan {
        program,
        args: prog_args.to_vec(),
        agent,
        nodes: placement
            .iter()
            .map(|&h| (hosts[h].clone(), source[h]))
            .collect(),
        sources,
        common_env,
        job,
        key,
    })
}

/// The nodes to start, given the bootstrap server's port.
fn launches(plan: &Plan, port: u16) -> Vec<Launch> {
    plan.nodes
        .iter()
        .enumerate()
        .map(|(node, (host, source))| {
            let boot: Vec<String> = match source {
                // Local nodes reach the launcher from the address the other
                // hosts are reached from (first), so that what they bind
                // for a TCP transport is reachable from those hosts;
                // loopback when the job is all here.
                None => plan
                    .sources
                    .iter()
                    .map(|ip| std::net::SocketAddr::new(*ip, port).to_string())
                    .chain(std::iter::once(format!("127.0.0.1:{port}")))
                    .collect(),
                Some(first) => std::iter::once(first)
                    .chain(plan.sources.iter().filter(|s| *s != first))
                    .map(|ip| std::net::SocketAddr::new(*ip, port).to_string())
                    .collect(),
            };
            let local_rank = plan.nodes[..node].iter().filter(|(h, _)| h == host).count();
            let mut env = vec![
                (ENV_NODE.to_owned(), OsString::from(node.to_string())),
                (
                    ENV_LOCAL_RANK.to_owned(),
                    OsString::from(local_rank.to_string()),
                ),
                (ENV_BOOT.to_owned(), OsString::from(boot.join(","))),
            ];
            env.extend(plan.common_env.iter().cloned());
            let how = match (source, &plan.agent) {
                (Some(_), Some(agent)) => agent.clone(),
                // `plan` refuses remote hosts without an agent.
                _ => Start::Local,
            };
            let mut launch = Launch::new(node as u32, host.clone(), how, &plan.program);
            launch.args = plan.args.clone();
            launch.env = env;
            launch
        })
        .collect()
}

fn run(args: Args) -> Result<i32> {
    let plan = plan(&args)?;
    let mut job = Job::<Incoming>::new("deckrun");
    let sink = job.sink();
    let mut server = BootServer::start(plan.job, args.n, move |incoming| sink.send(incoming))?;
    if let Some(k) = &plan.key {
        server.set_key(k.clone());
    }
    let nodes = launches(&plan, server.port());
    launcher::catch_interrupts()?;
    tracing::debug!(port = server.port(), nodes = nodes.len(), "starting");
    let boot_timeout = Duration::from_secs(args.boot_timeout);
    let boot_deadline = Instant::now() + boot_timeout;
    for launch in nodes {
        let node = launch.node;
        if let Err(e) = job.spawn(launch) {
            job.fail(EXIT_LAUNCHER, node, &e.to_string(), |why| server.abort(why));
            break;
        }
    }
    Ok(boot::run(job, server, boot_deadline, boot_timeout))
}
