//! A ring of tasks passing a token while its members move between hosts:
//! three host runtimes in this process (TCP on 127.0.0.1), five tasks.
//! Each task forwards the token to the next id; after each pass the task
//! that held it migrates to another host, taking the count along. No task
//! ever names a host to send to.
//!
//! `cargo run -p migrate --example ring`

use std::time::Duration;

use migrate::{Config, Runtime, TaskId};
use msg_layer::transport::TransportSpec;

fn main() -> anyhow::Result<()> {
    let spec: TransportSpec = "tcp://127.0.0.1:0".parse()?;
    let hosts = Runtime::in_process(&[spec.clone(), spec.clone(), spec], Config::default())?;
    let ring = 5u64;
    for t in 0..ring {
        hosts[(t % 3) as usize].spawn(TaskId(t), Vec::new())?;
    }
    // Task 0 starts the token.
    hosts[0].send(TaskId(0), TaskId(1), 1u64.to_le_bytes().to_vec())?;
    let mut passes = 0;
    while passes < 50 {
        for (h, rt) in hosts.iter().enumerate() {
            for task in rt.tasks() {
                let Some((_, token)) = rt.try_recv(task)? else {
                    continue;
                };
                let n = u64::from_le_bytes(token.try_into().expect("8 bytes"));
                let next = TaskId((task.0 + 1) % ring);
                rt.send(task, next, (n + 1).to_le_bytes().to_vec())?;
                passes += 1;
                // Move on after passing the token.
                let to = ((h + 1 + (n as usize % 2)) % 3) as u32;
                rt.migrate(task, to, n.to_le_bytes().to_vec())?;
                println!("token {n} passed by {task} on host {h}; {task} moves to host {to}");
            }
            while rt.poll_event().is_some() {}
        }
    }
    for rt in &hosts {
        rt.close(Duration::from_secs(1))?;
    }
    Ok(())
}
