//! Tasks that migrate between hosts while they communicate (seed 003).
//!
//! A task has a 64-bit id that never changes; the application sends to ids,
//! never to hosts. Each host runs a runtime (the seed's communication
//! processor) that keeps a table of task locations with their freshness,
//! forwards messages that reach a host their task has left (rewriting their
//! destination and telling the stale sender where the task is now), holds
//! messages at a task's home hosts until its location is known, and keeps
//! per-pair order with sequence numbers and a resequencing queue that
//! travel with the task. Beyond the seed, a task keeps what it sent until
//! the receiver's runtime acknowledges it and sends it again when a host
//! fails, so a failure loses only the failed host's own tasks.
//! docs/MIGRATION.md specifies the protocol.
//!
//! - [`proto`]: the sans-IO core, one [`proto::Node`] per host;
//! - [`sim`]: many nodes in one process over a simulated network
//!   (deterministic seeds), with the seed's protocol and two baselines;
//! - [`Runtime`]: a node over the message layer (LLC or TCP), with tasks'
//!   mailboxes, migration and events.
#![deny(unsafe_code)]

pub mod proto;
pub mod runtime;
pub mod sim;

pub use proto::{Config, Event, HostId, Loc, Mode, ProtoError, RefuseReason, Stats, TaskId};
pub use runtime::{MigrateError, Runtime, AM_ID};

/// The key that authenticates a runtime's LLC frames: give it with
/// `TransportSpec::with_auth_key` (the spec's `config.auth_key`); without
/// one, the key of `LLC_AUTH_KEY` when it is set, else none
/// (docs/MIGRATION.md, docs/SECURITY.md).
pub use msg_layer::transport::llc::AuthKey;
