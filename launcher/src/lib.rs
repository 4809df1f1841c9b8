//! The project's launcher: what starts a job's processes on hosts, watches
//! them, forwards or captures their output and tears the job down. deckrun
//! (DECK's jobs) and migrate-demo (its simulated hosts) both start their
//! processes here; what is theirs stays with them, as the job's *owner*.
//!
//! - [`hosts`]: host lists (`H[:SLOTS]`), block placement, which host is
//!   this one, the route towards another.
//! - [`start`]: one process to start ([`Launch`]) and how it starts on its
//!   host ([`Start`]: here, or through an rsh agent such as ssh, with its
//!   environment on the remote command line, quoted for the remote shell).
//! - [`job`]: the running job ([`Job`]). Every process leads a process group
//!   of its own; threads wait for the exits and read the output, which is
//!   forwarded with a `[N] ` prefix or handed to the owner line by line;
//!   a process may get a stdin pipe. The owner pulls [`Event`]s (its own
//!   ones, sent through a [`Sink`], among them) and decides; the teardown
//!   (the owner's graceful step, then SIGTERM, then SIGKILL, each after its
//!   grace) and the exit status are the launcher's.
//! - [`status`]: how a process's end maps to the launcher's exit status.
//! - [`catch_interrupts`]: SIGINT, SIGTERM and SIGHUP become
//!   [`Event::Interrupted`] of the running jobs.
//!
//! **Why through the agent.** migrate-demo used to start each simulated
//! host with `testbed::Cluster::command`, whose fresh PID namespace ended a
//! host's whole process tree with its first process. It now starts them
//! as deckrun starts remote nodes, through the cluster's rsh agent: the
//! process group the launcher gives every process does that job (the
//! agent's chain `ip netns exec`, `unshare`, `sh -c` stays in the group),
//! and the agent provides everything else the PID namespace came with
//! (the host's hostname, `/dev/shm`, `/etc/hosts`, `TMPDIR`).
//!
//! Starting nodes through Slurm's `srun` would be one more [`Start`].

#![forbid(unsafe_code)]

pub mod error;
mod forward;
pub mod hosts;
mod interrupt;
pub mod job;
pub mod start;
pub mod status;

pub use error::Error;
pub use forward::Stream;
pub use hosts::HostSpec;
pub use interrupt::catch_interrupts;
pub use job::{Event, Graces, Job, Sink};
pub use start::{Launch, Output, Start};
