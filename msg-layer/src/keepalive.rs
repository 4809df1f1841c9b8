//! A thread that makes progress for a layer whose progress is otherwise made
//! by its callers' calls (DECK, BMI): while the application computes and
//! calls nothing, acknowledgements, retransmissions and rendezvous transfers
//! must still move, but a thread that spins beside a rank on its core would
//! cost it. So the thread sleeps a period at a time and makes one round only
//! when the caller made none since it last looked.

use std::sync::Weak;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the keep-alive thread needs of the layer it serves.
pub trait KeepAlive: Send + Sync + 'static {
    /// A number that changes whenever the application makes progress
    /// itself (a count of its calls); `None` once the thread should stop.
    fn activity(&self) -> Option<u64>;
    /// One round of progress on the application's behalf.
    fn round(&self);
}

/// Start the thread, named `name`. It ends when `target` is dropped or its
/// [`KeepAlive::activity`] says `None`.
pub fn spawn_keepalive<T: KeepAlive>(
    name: &str,
    target: Weak<T>,
    period: Duration,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let mut seen = None;
            loop {
                std::thread::sleep(period);
                let Some(t) = target.upgrade() else { return };
                let Some(now) = t.activity() else { return };
                if seen != Some(now) {
                    seen = Some(now);
                    continue;
                }
                t.round();
            }
        })
}
