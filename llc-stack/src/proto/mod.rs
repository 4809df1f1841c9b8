//! The reliable transport as sans-IO state machines: frames and time in,
//! frames, events and timer deadlines out.
//!
//! [`Endpoint`] owns every connection of one interface and SAP;
//! [`Connection`] is one reliable, message-oriented, flow- and
//! congestion-controlled connection. Neither reads a clock nor does I/O, so the
//! same code runs under the deterministic simulator and on a real link.

pub mod buf_pool;
pub mod config;
mod conn_table;
pub mod connection;
pub mod endpoint;
pub mod error;
pub mod placement;
pub mod rtt;
pub mod seq;

pub use buf_pool::BufPool;
pub use config::Config;
pub use conn_table::ConnHandle;
pub use connection::{ConnStats, Connection, Event, SendError, State};
pub use endpoint::{ConnectError, DropStats, Endpoint, EndpointStats, PROBE_MAGIC};
pub use error::ConnectionError;
pub use placement::{Placement, Sink};
