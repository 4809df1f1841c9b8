//! The migrating-task ring in a job started by a PMIx launcher
//! (`srun --mpi=pmix -n N pmix_ring SPEC`): host H starts task H; each task sends to the
//! next one (lap 1), every task then migrates to the next host, and each sends to the
//! next task again from there (lap 2). Each host prints
//! `host H of N: lap1 from task P, task P arrived, lap2 from task Q`.

use std::process::ExitCode;
use std::time::Duration;

use migrate::{Config, Event, Runtime, TaskId};
use msg_layer::transport::TransportSpec;

const WAIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let spec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "llc://?port=0".into());
    match run(&spec) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pmix_ring: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(spec: &str) -> Result<String, Box<dyn std::error::Error>> {
    let spec: TransportSpec = spec.parse()?;
    let rt =
        Runtime::open_in_job(&spec, Config::default())?.ok_or("not started by a PMIx launcher")?;
    let (me, n) = (rt.host(), rt.hosts());
    let task = |h: u32| TaskId(u64::from(h % n));
    let (mine, prev) = (task(me), task(me + n - 1));
    rt.spawn(mine, Vec::new())?;
    rt.send(
        mine,
        task(me + 1),
        format!("lap1 from {}", mine.0).into_bytes(),
    )?;
    let (from1, _) = rt.recv_timeout(mine, WAIT)?;
    // Every task moves one host on; this host receives its predecessor's.
    rt.migrate(mine, (me + 1) % n, Vec::new())?;
    loop {
        match rt.wait_event(WAIT)? {
            Event::Arrived { task, .. } if task == prev => break,
            Event::Arrived { task, .. } => return Err(format!("task {} arrived", task.0).into()),
            Event::Left { .. } => {}
            other => return Err(format!("unexpected {other:?}").into()),
        }
    }
    rt.send(prev, mine, format!("lap2 from {}", prev.0).into_bytes())?;
    let (from2, _) = rt.recv_timeout(prev, WAIT)?;
    let line = format!(
        "host {me} of {n}: lap1 from task {}, task {} arrived, lap2 from task {}",
        from1.0, prev.0, from2.0
    );
    rt.close(Duration::from_secs(5))?;
    Ok(line)
}
