//! boot_probe: a tiny DECK-like process for deckrun's tests, using only
//! `deck::boot`: reads its job environment, connects to deckrun, exchanges
//! cards (`node-N@HOSTNAME`), prints what it got, then exits, fails, or
//! sleeps as its arguments say.
//!
//! `deckrun -n 4 --transport tcp://0.0.0.0:0 target/debug/examples/boot_probe --stderr`
//!
//! Prints on stdout `pid PID host HOST ip IP`, one `round R: CARD...` line
//! per round and `env NAME=VALUE` for each `--show-env`.

use std::time::Duration;

use clap::Parser;
use deck::boot::{Boot, JobEnv, CONNECT_TIMEOUT};

#[derive(Parser, Debug)]
struct Args {
    /// Rounds of the all-gather.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// After the exchange, node NODE exits with CODE (no deck_done).
    #[arg(long, value_name = "NODE:CODE", value_parser = pair)]
    exit_on: Option<(u32, i32)>,
    /// After the exchange, node NODE kills itself with signal SIG.
    #[arg(long, value_name = "NODE:SIG", value_parser = pair)]
    raise_on: Option<(u32, i32)>,
    /// Nodes not named by --exit-on/--raise-on sleep for ever after the
    /// exchange (until deckrun stops them).
    #[arg(long)]
    sleep_others: bool,
    /// Print one line on stderr.
    #[arg(long)]
    stderr: bool,
    /// End stdout with text that has no newline.
    #[arg(long)]
    partial: bool,
    /// Print the value of this variable (repeatable).
    #[arg(long, value_name = "NAME")]
    show_env: Vec<String>,
    /// Exit 0 without calling finish (deck_done).
    #[arg(long)]
    no_finish: bool,
}

fn pair(s: &str) -> Result<(u32, i32), String> {
    let (a, b) = s.split_once(':').ok_or("expected NODE:NUMBER")?;
    Ok((
        a.parse().map_err(|e| format!("{a}: {e}"))?,
        b.parse().map_err(|e| format!("{b}: {e}"))?,
    ))
}

fn main() {
    let args = Args::parse();
    let env = match JobEnv::from_env() {
        Ok(Some(env)) => env,
        Ok(None) => {
            eprintln!("boot_probe: not started by deckrun (DECK_BOOT unset)");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("boot_probe: {e}");
            std::process::exit(2);
        }
    };
    let node = env.node;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let fail = |e: deck::boot::BootError| -> ! {
        eprintln!("boot_probe: node {node}: {e}");
        std::process::exit(3);
    };
    let timeout = Duration::from_secs(30);
    let mut boot = Boot::connect(&env, CONNECT_TIMEOUT).unwrap_or_else(|e| fail(e));
    println!(
        "pid {} host {host} ip {}",
        std::process::id(),
        boot.local_ip()
    );
    for name in &args.show_env {
        let value = std::env::var(name).unwrap_or_else(|_| "<unset>".into());
        println!("env {name}={value}");
    }
    if args.stderr {
        eprintln!("node {node} says hello on stderr");
    }
    for round in 0..args.rounds {
        let card = match round {
            0 => format!("node-{node}@{host}"),
            r => format!("node-{node}@{host}#{r}"),
        };
        let cards = boot.exchange(&card, timeout).unwrap_or_else(|e| fail(e));
        println!("round {round}: {}", cards.join(" "));
    }
    let handle = boot.watch();
    if let Some((n, code)) = args.exit_on {
        if n == node {
            std::process::exit(code);
        }
    }
    if let Some((n, sig)) = args.raise_on {
        if n == node {
            let sig = nix::sys::signal::Signal::try_from(sig).unwrap_or_else(|e| {
                eprintln!("boot_probe: signal {sig}: {e}");
                std::process::exit(2);
            });
            let _ = nix::sys::signal::raise(sig);
            std::process::exit(2);
        }
    }
    if args.sleep_others {
        // Until deckrun's ABORT makes the watchdog exit the process.
        loop {
            std::thread::park();
        }
    }
    if !args.no_finish {
        handle.finish().unwrap_or_else(|e| fail(e));
    }
    if args.partial {
        print!("tail without newline from {node}");
    }
}
