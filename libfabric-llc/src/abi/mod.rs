//! Hand-written mirrors of libfabric's public C ABI: the structs a provider
//! fills, reads and hands out, at libfabric 2.5's layout (1.17's is a
//! prefix of it: every struct the two share only grew at its end), and the
//! constants. `tests/layout.rs` compiles a C program against Debian's
//! `rdma/*.h` and checks every offset and size shared with 1.17.
//!
//! Only what this provider uses is mirrored; pointer fields to structs it
//! never reads are `*mut c_void`.

#![allow(missing_docs)]

mod consts;
mod types;

pub use consts::*;
pub use types::*;
