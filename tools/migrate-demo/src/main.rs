//! `migrate-demo`: tasks that stream to each other while they migrate
//! between the hosts of a multi-host bed, over LLC and over TCP.
//!
//! As root it builds the bed itself (testbed::Cluster: one network
//! namespace per host on one bridge), starts one runtime process per host
//! (`migrate-demo host ...`, this same program) through the bed's rsh agent
//! with the project's launcher (`launcher`, as deckrun starts DECK nodes),
//! and drives them through their stdin/stdout: start, stop sending, report,
//! exit. Every task checks what it receives (content, sender, order,
//! duplicates) in its own state, which migrates with it; the launcher adds
//! up the reports and exits non-zero if any property was violated.
//!
//! `migrate-demo --hosts 4 --tasks 16 --migrations 400 --transport both --json`

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use launcher::{Event as JobEvent, Graces, Job, Launch, Output, Start};
use migrate::{Event, Runtime, TaskId};
use msg_layer::addr::{LlcAddr, MacAddr};
use msg_layer::transport::TransportSpec;
use msg_layer::Addr;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// The runtimes' TCP port on every host.
const TCP_PORT: u16 = 7310;
/// A message whose send time is this close after its addressee's last
/// migration counts as "sent just after a migration".
const AFTER_MIGRATION: Duration = Duration::from_millis(5);
/// How long the launcher waits for every message to be delivered once the
/// tasks stopped sending.
const DRAIN: Duration = Duration::from_secs(30);
/// Bound of every step of the launcher's conversation with its hosts.
const STEP: Duration = Duration::from_secs(60);
/// How long the hosts have to exit once told `exit`, before the launcher's
/// teardown signals them.
const EXIT_GRACE: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(about = "Migrating tasks over LLC and TCP on a multi-host bed built here (root)")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Hosts of the bed.
    #[arg(long, default_value_t = 4)]
    hosts: u32,
    /// Tasks (spread over the hosts at the start).
    #[arg(long, default_value_t = 16)]
    tasks: u32,
    /// Migrations in all (spread over the hosts and over the run).
    #[arg(long, default_value_t = 200)]
    migrations: u32,
    #[arg(long, value_enum, default_value_t = TransportArg::Both)]
    transport: TransportArg,
    /// The transport spec every host's runtime opens for the LLC run, as
    /// every API of the stack takes one: no interface named is each host's
    /// one Ethernet interface (as btl/llc picks); e.g.
    /// `llc://?backend=xdp`. Its port (default 7) is in every host's
    /// address.
    #[arg(long, value_name = "SPEC", default_value = "llc://")]
    llc: String,
    /// How long the tasks stream (ms).
    #[arg(long, default_value_t = 2000)]
    duration_ms: u64,
    /// Every task sends a message this often (µs).
    #[arg(long, default_value_t = 1000)]
    send_every_us: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum TransportArg {
    Llc,
    Tcp,
    Both,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One host's runtime (started by the launcher inside the host).
    Host(HostArgs),
}

#[derive(Parser, Debug, Clone)]
struct HostArgs {
    #[arg(long)]
    index: u32,
    /// The transport spec this host opens.
    #[arg(long)]
    spec: String,
    /// Every host's address, in host order, comma-separated.
    #[arg(long)]
    addrs: String,
    #[arg(long)]
    tasks: u32,
    /// Migrations this host makes.
    #[arg(long)]
    migrations: u32,
    #[arg(long)]
    duration_ms: u64,
    #[arg(long)]
    send_every_us: u64,
    #[arg(long)]
    seed: u64,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match &cli.cmd {
        Some(Cmd::Host(a)) => host(a.clone()),
        None => match launch(&cli) {
            // The hosts are stopped and the bed is gone: end as a shell
            // reports Ctrl-C.
            Err(e) if e.is::<Interrupted>() => {
                eprintln!("migrate-demo: interrupted");
                std::process::exit(launcher::status::EXIT_INTERRUPTED);
            }
            other => other,
        },
    }
}

/// SIGINT, SIGTERM or SIGHUP ended the run.
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

// ----- the application: what a task keeps (and takes along) -----

/// A task's books, serialized into its migration.
#[derive(Default, Debug)]
struct Books {
    /// Per addressee: messages sent.
    sent: BTreeMap<u64, u64>,
    /// Per sender: last message received.
    got: BTreeMap<u64, u64>,
    duplicates: u64,
    out_of_order: u64,
    corrupted: u64,
    /// When its last migration started (wall clock, ns).
    migrated_ns: u64,
}

impl Books {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        let mut put = |x: u64| v.extend_from_slice(&x.to_le_bytes());
        for m in [&self.sent, &self.got] {
            put(m.len() as u64);
            for (k, n) in m {
                put(*k);
                put(*n);
            }
        }
        for x in [
            self.duplicates,
            self.out_of_order,
            self.corrupted,
            self.migrated_ns,
        ] {
            put(x);
        }
        v
    }

    fn decode(b: &[u8]) -> Result<Books> {
        let mut words = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")));
        let mut next = || words.next().context("task state truncated");
        let mut books = Books::default();
        for which in 0..2 {
            let n = next()?;
            for _ in 0..n {
                let (k, c) = (next()?, next()?);
                if which == 0 {
                    books.sent.insert(k, c);
                } else {
                    books.got.insert(k, c);
                }
            }
        }
        books.duplicates = next()?;
        books.out_of_order = next()?;
        books.corrupted = next()?;
        books.migrated_ns = next()?;
        Ok(books)
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A message: sender, addressee, number, send time, and filler derived
/// from them (so any alteration shows).
fn message(src: u64, dst: u64, k: u64, sent_ns: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(96);
    for x in [src, dst, k, sent_ns] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    let f = (src * 131 + dst * 7 + k) as u8;
    v.extend((0..(k % 64)).map(|i| f.wrapping_add(i as u8)));
    v
}

// ----- one host -----

#[derive(Default)]
struct HostFigures {
    /// One-way latencies (ns): steady state, and sent just after the
    /// addressee's migration.
    steady: Vec<u64>,
    after: Vec<u64>,
    /// Migration times (ns), measured where the task arrived.
    migration: Vec<u64>,
    migrations: u64,
}

fn host(a: HostArgs) -> Result<()> {
    let spec: TransportSpec = a.spec.parse().context("--spec")?;
    let addrs: Vec<Addr> = a
        .addrs
        .split(',')
        .map(|s| s.parse().with_context(|| format!("address {s:?}")))
        .collect::<Result<_>>()?;
    let hosts = addrs.len() as u32;
    // Listen first; add the peers once every host listens.
    let ep = migrate::runtime::open_endpoint(&spec)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}",
        json!({"ready": a.index, "transport": ep.transport_name()})
    )?;
    out.flush()?;
    let lines = stdin_lines();
    wait_line(&lines, "go", || {
        ep.progress().map(|_| ()).map_err(Into::into)
    })?;
    let rt = Runtime::with_endpoint(a.index, ep, &addrs, migrate::Config::default())?;

    let mut rng = SmallRng::seed_from_u64(a.seed ^ (a.index as u64) << 32);
    let mut books: HashMap<TaskId, Books> = HashMap::new();
    for t in (0..a.tasks).filter(|t| t % hosts == a.index) {
        let id = TaskId(t as u64);
        rt.spawn(id, Vec::new())?;
        books.insert(id, Books::default());
    }
    let mut fig = HostFigures::default();
    let start = Instant::now();
    let run = Duration::from_millis(a.duration_ms);
    let send_every = Duration::from_micros(a.send_every_us);
    let migrate_every = run / (a.migrations + 1);
    let mut next_send = start;
    let mut next_migration = start + migrate_every;
    let mut migrations_left = a.migrations;
    let mut quiet = false;
    loop {
        let now = Instant::now();
        // Stop once the time is up and this host made its migrations (or
        // cannot: every task left it, or twice the time has passed).
        let elapsed = now.duration_since(start);
        if !quiet
            && elapsed >= run
            && (migrations_left == 0 || books.is_empty() || elapsed >= 2 * run)
        {
            quiet = true;
            writeln!(out, "{}", json!({"quiet": a.index}))?;
            out.flush()?;
        }
        // Events: tasks that arrived bring their books along.
        while let Some(ev) = rt.poll_event() {
            match ev {
                Event::Arrived {
                    task,
                    app,
                    started_ns,
                    ..
                } => {
                    let mut b = Books::decode(&app)?;
                    b.migrated_ns = started_ns;
                    fig.migration.push(wall_ns().saturating_sub(started_ns));
                    books.insert(task, b);
                }
                Event::Left { .. } => {}
                // Hosts end one after another once told to exit.
                other if quiet => tracing::debug!(?other, "while ending"),
                other => bail!("host {}: unexpected {other:?}", a.index),
            }
        }
        // Every task here reads its mailbox and checks what it got.
        let mut ids: Vec<TaskId> = books.keys().copied().collect();
        ids.sort_unstable();
        for id in &ids {
            while let Some((from, data)) = rt.try_recv(*id)? {
                let now_ns = wall_ns();
                let b = books.get_mut(id).expect("books");
                if data.len() < 32 {
                    b.corrupted += 1;
                    continue;
                }
                let w =
                    |i: usize| u64::from_le_bytes(data[i * 8..i * 8 + 8].try_into().expect("8"));
                let (src, dst, k, sent_ns) = (w(0), w(1), w(2), w(3));
                if src != from.0 || dst != id.0 || data != message(src, dst, k, sent_ns) {
                    b.corrupted += 1;
                    continue;
                }
                let last = b.got.entry(src).or_insert(0);
                if k <= *last {
                    b.duplicates += 1;
                    continue;
                }
                if k != *last + 1 {
                    b.out_of_order += 1;
                }
                *last = k;
                let lat = now_ns.saturating_sub(sent_ns);
                if sent_ns >= b.migrated_ns
                    && sent_ns - b.migrated_ns < AFTER_MIGRATION.as_nanos() as u64
                {
                    fig.after.push(lat);
                } else {
                    fig.steady.push(lat);
                }
            }
        }
        if quiet {
            match lines.try_recv() {
                Ok(line) => match line.as_str() {
                    "report" => {
                        report(&mut out, a.index, &rt, &books, &fig)?;
                    }
                    "exit" => break,
                    other => bail!("unknown command {other:?}"),
                },
                // The host runs in a process group of its own: when the
                // launcher dies without its teardown, nothing else ends it.
                Err(mpsc::TryRecvError::Disconnected) => bail!("launcher went away"),
                Err(mpsc::TryRecvError::Empty) => {}
            }
            rt.progress()?;
            continue;
        }
        if now >= next_send {
            next_send += send_every;
            for id in &ids {
                let n = a.tasks as u64;
                // Two partners each: the next task and one further on.
                for dst in [(id.0 + 1) % n, (id.0 + 3) % n] {
                    if dst == id.0 {
                        continue;
                    }
                    let b = books.get_mut(id).expect("books");
                    let k = b.sent.get(&dst).copied().unwrap_or(0) + 1;
                    rt.send(*id, TaskId(dst), message(id.0, dst, k, wall_ns()))?;
                    b.sent.insert(dst, k);
                }
            }
        }
        if migrations_left > 0 && now >= next_migration && !ids.is_empty() && hosts > 1 {
            next_migration += migrate_every;
            let id = ids[rng.gen_range(0..ids.len())];
            let mut to = rng.gen_range(0..hosts - 1);
            if to >= a.index {
                to += 1;
            }
            let b = books.remove(&id).expect("books");
            rt.migrate(id, to, b.encode())?;
            migrations_left -= 1;
            fig.migrations += 1;
        }
        if !rt.progress()? {
            std::thread::yield_now();
        }
    }
    rt.close(Duration::from_secs(2))?;
    Ok(())
}

fn report(
    out: &mut impl Write,
    index: u32,
    rt: &Runtime,
    books: &HashMap<TaskId, Books>,
    fig: &HostFigures,
) -> Result<()> {
    let s = rt.stats();
    let tasks: Vec<Value> = books
        .iter()
        .map(|(id, b)| {
            json!({
                "id": id.0,
                "sent": b.sent.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
                "got": b.got.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
                "duplicates": b.duplicates,
                "out_of_order": b.out_of_order,
                "corrupted": b.corrupted,
            })
        })
        .collect();
    writeln!(
        out,
        "{}",
        json!({
            "report": index,
            "tasks": tasks,
            "forwarded": s.forwarded,
            "held": s.held,
            "local_sent": s.local_sent,
            "duplicates_dropped": s.duplicates,
            "max_hops": s.max_hops,
            "migrations": fig.migrations,
            "steady": fig.steady,
            "after": fig.after,
            "migration": fig.migration,
        })
    )?;
    out.flush()?;
    Ok(())
}

/// Lines from stdin, read by a thread.
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if tx.send(line.trim().to_string()).is_err() {
                return;
            }
        }
    });
    rx
}

/// Wait for `want` on stdin, making progress meanwhile.
fn wait_line(
    lines: &mpsc::Receiver<String>,
    want: &str,
    mut progress: impl FnMut() -> Result<()>,
) -> Result<()> {
    let start = Instant::now();
    loop {
        match lines.try_recv() {
            Ok(l) if l == want => return Ok(()),
            Ok(l) => bail!("expected {want:?}, got {l:?}"),
            Err(mpsc::TryRecvError::Disconnected) => bail!("launcher went away"),
            Err(mpsc::TryRecvError::Empty) => {}
        }
        if start.elapsed() > STEP {
            bail!("no {want:?} from the launcher");
        }
        progress()?;
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ----- the launcher -----

fn launch(cli: &Cli) -> Result<()> {
    if let Err(why) = testbed::check_privileges() {
        bail!("migrate-demo builds network namespaces (run it as root): {why}");
    }
    // The hosts run in process groups of their own: a Ctrl-C stops them
    // through the job's teardown, and the bed is deleted.
    launcher::catch_interrupts()?;
    if cli.hosts < 2 || cli.tasks < 2 {
        bail!("--hosts and --tasks must be at least 2");
    }
    let cluster = testbed::Cluster::new(cli.hosts as usize, 1500)?;
    let transports = match cli.transport {
        TransportArg::Llc => vec!["llc"],
        TransportArg::Tcp => vec!["tcp"],
        TransportArg::Both => vec!["llc", "tcp"],
    };
    let mut runs = serde_json::Map::new();
    let mut ok = true;
    for t in &transports {
        let r = run_job(cli, &cluster, t)?;
        ok &= r["ok"].as_bool().unwrap_or(false);
        if !cli.json {
            print_table(t, &r);
        }
        runs.insert(t.to_string(), r);
    }
    if cli.json {
        let v = if runs.len() == 1 {
            runs.into_iter().next().expect("one").1
        } else {
            let mut m = runs;
            m.insert("ok".into(), json!(ok));
            Value::Object(m)
        };
        println!("{v}");
    }
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

fn run_job(cli: &Cli, cluster: &testbed::Cluster, transport: &str) -> Result<Value> {
    let exe = std::env::current_exe()?;
    let hosts = cluster.hosts();
    let llc = match cli.llc.parse::<TransportSpec>() {
        Ok(TransportSpec::Llc(l)) => l,
        Ok(other) => bail!("--llc {other}: not an LLC spec (llc://...)"),
        Err(e) => bail!("--llc: {e}"),
    };
    let port = llc.port;
    let llc = TransportSpec::Llc(llc).to_string();
    let (specs, addrs): (Vec<String>, Vec<String>) = hosts
        .iter()
        .map(|h| match transport {
            "llc" => (llc.clone(), LlcAddr::new(MacAddr(h.mac), port).to_string()),
            _ => (
                format!("tcp://{}:{TCP_PORT}", h.ipv4),
                format!("{}:{TCP_PORT}", h.ipv4),
            ),
        })
        .unzip();
    // Every host's runtime starts through the bed's rsh agent, as deckrun
    // starts the nodes of other hosts: its stdout is its half of the
    // conversation, its stdin the launcher's.
    let agent = Start::Agent {
        program: cluster.agent().into(),
        options: Vec::new(),
    };
    let mut job = Job::<Infallible>::new("migrate-demo").with_graces(Graces {
        ask: EXIT_GRACE,
        ..Graces::default()
    });
    let n = hosts.len() as u32;
    for (i, spec) in specs.iter().enumerate() {
        let share = cli.migrations / n + u32::from((i as u32) < cli.migrations % n);
        let mut host = Launch::new(i as u32, &hosts[i].hostname, agent.clone(), &exe);
        host.args = [
            "host",
            "--index",
            &i.to_string(),
            "--spec",
            spec,
            "--addrs",
            &addrs.join(","),
            "--tasks",
            &cli.tasks.to_string(),
            "--migrations",
            &share.to_string(),
            "--duration-ms",
            &cli.duration_ms.to_string(),
            "--send-every-us",
            &cli.send_every_us.to_string(),
            "--seed",
            &cli.seed.to_string(),
        ]
        .map(OsString::from)
        .to_vec();
        // What a remote login would not pass on by itself.
        if let Some(filter) = std::env::var_os("RUST_LOG") {
            host.env.push(("RUST_LOG".into(), filter));
        }
        host.stdin = true;
        host.stdout = Output::Lines;
        host.stderr = Output::Inherit;
        job.spawn(host).context("starting a host")?;
    }
    let ready = expect(&mut job, "ready")?;
    let transport_name = ready[0]["transport"].as_str().unwrap_or("?").to_string();
    let t0 = Instant::now();
    say(&mut job, "go")?;
    expect(&mut job, "quiet")?;
    let streamed = t0.elapsed();
    // Ask for reports until every message sent was delivered (or DRAIN).
    let drain_start = Instant::now();
    let summary = loop {
        say(&mut job, "report")?;
        let reports = expect(&mut job, "report")?;
        let s = summarize(&reports, cli.tasks);
        if s.lost == 0 || drain_start.elapsed() > DRAIN {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The teardown's graceful step: `exit` to every host.
    say(&mut job, "exit")?;
    let told = job.nodes();
    job.stop(0, "the run is over", |_| told);
    while job.next(None).is_some() {}
    let ok = summary.lost == 0
        && summary.duplicates == 0
        && summary.out_of_order == 0
        && summary.corrupted == 0
        && summary.tasks_seen == cli.tasks as u64;
    let pct = |v: &[u64], p: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3
    };
    let lat = |v: &[u64]| json!({"count": v.len(), "p50_us": pct(v, 0.5), "p99_us": pct(v, 0.99), "max_us": pct(v, 1.0)});
    Ok(json!({
        "transport": transport,
        "transport_name": transport_name,
        "hosts": cli.hosts,
        "tasks": cli.tasks,
        "seconds": streamed.as_secs_f64(),
        "sent": summary.sent,
        "delivered": summary.delivered,
        "duplicates": summary.duplicates,
        "out_of_order": summary.out_of_order,
        "corrupted": summary.corrupted,
        "lost": summary.lost,
        "migrations": summary.migrations,
        "forwarded": summary.forwarded,
        "held": summary.held,
        "local_sent": summary.local_sent,
        "max_hops": summary.max_hops,
        "migration_time_us": lat(&summary.migration),
        "latency_steady_us": lat(&summary.steady),
        "latency_after_migration_us": lat(&summary.after),
        "ok": ok,
    }))
}

/// Waits (bounded by [`STEP`]) until every host has said a JSON line
/// with `key`; returns those lines in host order. A host that ends, or an
/// interrupt, ends the run.
fn expect(job: &mut Job<Infallible>, key: &str) -> Result<Vec<Value>> {
    let mut got: Vec<Option<Value>> = vec![None; job.nodes().len()];
    let deadline = Instant::now() + STEP;
    while got.iter().any(Option::is_none) {
        match job.next(Some(deadline)) {
            Some(JobEvent::Line { node, line, .. }) => {
                let v: Value = serde_json::from_str(&line)
                    .with_context(|| format!("host {node}: {line:?}"))?;
                if v.get(key).is_some() {
                    got[node as usize] = Some(v);
                }
            }
            Some(JobEvent::Exited { node, status }) => {
                let how = match status {
                    Ok(s) => launcher::status::describe(&s),
                    Err(e) => format!("could not be waited for ({e})"),
                };
                bail!("host {node} {how} while the launcher waited for its {key:?}");
            }
            Some(JobEvent::Interrupted) => return Err(Interrupted.into()),
            Some(JobEvent::Timeout) => bail!("waiting for every host's {key:?}: timed out"),
            Some(JobEvent::Owner(never)) => match never {},
            None => bail!("every host has ended; waiting for their {key:?}"),
        }
    }
    Ok(got.into_iter().map(|v| v.expect("all")).collect())
}

/// Writes `what` to every host.
fn say(job: &mut Job<Infallible>, what: &str) -> Result<()> {
    for node in job.nodes() {
        job.write_line(node, what).context("writing to a host")?;
    }
    Ok(())
}

#[derive(Default)]
struct Summary {
    sent: u64,
    delivered: u64,
    duplicates: u64,
    out_of_order: u64,
    corrupted: u64,
    lost: u64,
    migrations: u64,
    forwarded: u64,
    held: u64,
    local_sent: u64,
    max_hops: u64,
    tasks_seen: u64,
    steady: Vec<u64>,
    after: Vec<u64>,
    migration: Vec<u64>,
}

fn summarize(reports: &[Value], tasks: u32) -> Summary {
    let mut s = Summary::default();
    let mut sent: HashMap<(u64, u64), u64> = HashMap::new();
    let mut got: HashMap<(u64, u64), u64> = HashMap::new();
    let num = |v: &Value| v.as_u64().unwrap_or(0);
    let nums = |v: &Value| -> Vec<u64> {
        v.as_array()
            .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
            .unwrap_or_default()
    };
    for r in reports {
        for t in r["tasks"].as_array().into_iter().flatten() {
            s.tasks_seen += 1;
            let id = num(&t["id"]);
            for p in t["sent"].as_array().into_iter().flatten() {
                sent.insert((id, num(&p[0])), num(&p[1]));
            }
            for p in t["got"].as_array().into_iter().flatten() {
                got.insert((num(&p[0]), id), num(&p[1]));
            }
            s.duplicates += num(&t["duplicates"]);
            s.out_of_order += num(&t["out_of_order"]);
            s.corrupted += num(&t["corrupted"]);
        }
        s.duplicates += num(&r["duplicates_dropped"]);
        s.forwarded += num(&r["forwarded"]);
        s.held += num(&r["held"]);
        s.local_sent += num(&r["local_sent"]);
        s.migrations += num(&r["migrations"]);
        s.max_hops = s.max_hops.max(num(&r["max_hops"]));
        s.steady.extend(nums(&r["steady"]));
        s.after.extend(nums(&r["after"]));
        s.migration.extend(nums(&r["migration"]));
    }
    for (pair, n) in &sent {
        s.sent += n;
        let g = got.get(pair).copied().unwrap_or(0);
        s.delivered += g.min(*n);
        s.lost += n.saturating_sub(g);
    }
    // A task missing from every report counts all that was sent to it as lost.
    if s.tasks_seen < tasks as u64 && s.lost == 0 {
        s.lost = 1;
    }
    s.steady.sort_unstable();
    s.after.sort_unstable();
    s.migration.sort_unstable();
    s
}

fn print_table(t: &str, r: &Value) {
    println!(
        "{t} ({}): {} hosts, {} tasks, {} migrations in {:.2} s",
        r["transport_name"].as_str().unwrap_or("?"),
        r["hosts"],
        r["tasks"],
        r["migrations"],
        r["seconds"].as_f64().unwrap_or(0.0)
    );
    println!(
        "  sent {} delivered {} lost {} duplicates {} out of order {} corrupted {} forwarded {} held {} max hops {}",
        r["sent"], r["delivered"], r["lost"], r["duplicates"], r["out_of_order"], r["corrupted"], r["forwarded"], r["held"], r["max_hops"]
    );
    for (name, key) in [
        ("migration time", "migration_time_us"),
        ("one-way, steady state", "latency_steady_us"),
        (
            "one-way, just after a migration",
            "latency_after_migration_us",
        ),
    ] {
        let v = &r[key];
        println!(
            "  {name}: p50 {:.1} us, p99 {:.1} us, max {:.1} us ({} samples)",
            v["p50_us"].as_f64().unwrap_or(0.0),
            v["p99_us"].as_f64().unwrap_or(0.0),
            v["max_us"].as_f64().unwrap_or(0.0),
            v["count"]
        );
    }
    println!(
        "  properties: {}",
        if r["ok"] == json!(true) {
            "all held"
        } else {
            "VIOLATED"
        }
    );
}
