//! A BMI job started by a PMIx launcher (`srun --mpi=pmix -n N pmix_job LISTEN`): rank 0
//! is a server listening at LISTEN (e.g. `llc://eth0?port=0`), every other rank a client
//! that finds it through PMIx, sends it a request and waits for the reply. The server
//! prints `server: served N clients` once every client was answered; each client
//! `client R: reply "ok R"`.

use std::process::ExitCode;
use std::time::Duration;

use bmi::{Bmi, InitFlags, Posted};

const WAIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "llc://?port=0".into());
    match run(&listen) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmix_job: {e}");
            ExitCode::FAILURE
        }
    }
}

fn finish(b: &Bmi, p: Posted, ctx: i32) -> Result<bmi::Done, String> {
    match p {
        Posted::Now(d) => Ok(d),
        Posted::Pending(op) => b
            .test(op, ctx, WAIT)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("operation {op} did not complete in {WAIT:?}")),
    }
}

fn run(listen: &str) -> Result<(), String> {
    let listen = listen.to_string();
    let (b, peers) = Bmi::initialize_in_job(
        "bmi_llc",
        |rank, _| (rank == 0).then_some(listen),
        InitFlags::default(),
    )
    .map_err(|e| e.to_string())?
    .ok_or("not started by a PMIx launcher")?;
    let ctx = b.open_context();
    if peers.rank == 0 {
        let clients = peers.size - 1;
        for _ in 0..clients {
            let mut got = b.testunexpected(1, WAIT).map_err(|e| e.to_string())?;
            let u = got.pop().ok_or("no request within the time allowed")?;
            let text =
                String::from_utf8_lossy(u.result.as_ref().map_err(|e| e.to_string())?.data())
                    .into_owned();
            let rank = text.trim_start_matches("hello from ").to_string();
            let to = u.addr;
            b.unexpected_free(u);
            let p = b
                .post_send(to, format!("ok {rank}").into_bytes(), 2, 0, ctx)
                .map_err(|e| e.to_string())?;
            finish(&b, p, ctx)?.result.map_err(|e| e.to_string())?;
        }
        println!("server: served {clients} clients");
    } else {
        let (srank, addr) = peers.servers.first().ok_or("no server in the job")?;
        let to = b.addr_lookup(addr).map_err(|e| e.to_string())?;
        let req = format!("hello from {}", peers.rank).into_bytes();
        let p = b
            .post_sendunexpected(to, req, 1, 0, ctx)
            .map_err(|e| e.to_string())?;
        finish(&b, p, ctx)?.result.map_err(|e| e.to_string())?;
        let p = b.post_recv(to, 64, 2, 0, ctx).map_err(|e| e.to_string())?;
        let d = finish(&b, p, ctx)?;
        d.result.map_err(|e| e.to_string())?;
        let reply = String::from_utf8_lossy(&d.data.unwrap_or_default()).into_owned();
        println!(
            "client {}: reply {reply:?} from server rank {srank}",
            peers.rank
        );
    }
    Ok(())
}
