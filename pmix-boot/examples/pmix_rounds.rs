//! A job's bootstrap through PMIx, as the stack's APIs do it: rank 0's value handed to
//! all, then `ROUNDS` all-gather rounds of one card per process. Prints one line per
//! process: `rank R of N (local L): first=... round0=c0,c1,... ...`. Started by a PMIx
//! launcher (`srun --mpi=pmix`, `mpirun`); on its own it says it was not.

use std::process::ExitCode;

fn main() -> ExitCode {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let pmix = match pmix_boot::Pmix::from_env() {
        Ok(Some(p)) => p,
        Ok(None) => {
            eprintln!("pmix_rounds: not started by a PMIx launcher");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("pmix_rounds: {e}");
            return ExitCode::FAILURE;
        }
    };
    let run = || -> Result<String, Box<dyn std::error::Error>> {
        let first = pmix.from_first("llc.example.first", || {
            Ok::<_, std::convert::Infallible>(format!("chosen-by-{}", pmix.rank()))
        })?;
        let mut line = format!(
            "rank {} of {} (local {}): first={first}",
            pmix.rank(),
            pmix.size(),
            pmix.local_rank()
        );
        for r in 0..rounds {
            let cards = pmix.all_gather(
                &format!("llc.example.card.{r}"),
                &format!("r{r}-from-{}", pmix.rank()),
            )?;
            line.push_str(&format!(" round{r}={}", cards.join(",")));
        }
        Ok(line)
    };
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pmix_rounds: rank {}: {e}", pmix.rank());
            ExitCode::FAILURE
        }
    }
}
