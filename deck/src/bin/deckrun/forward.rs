//! Forwarding the nodes' output: every line of a node's stdout (stderr)
//! goes to deckrun's stdout (stderr) with the prefix `[N] `, whole, so the
//! nodes' lines never mix within a line.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::mpsc::Sender;
use std::thread;

use crate::job::Event;

/// Longest piece forwarded as one line: a longer line is cut into pieces
/// of this size, each on a line of its own, so a node that never writes a
/// newline cannot make deckrun buffer without bound.
const MAX_LINE: u64 = 64 * 1024;

/// Which of deckrun's streams a pipe goes to.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Forwards `pipe` on a thread of its own; sends [`Event::OutputDone`]
/// when it reaches end of file.
pub fn start<R: Read + Send + 'static>(
    node: u32,
    pipe: R,
    to: Stream,
    done: Sender<Event>,
) -> io::Result<()> {
    thread::Builder::new()
        .name(format!("deckrun-out-{node}"))
        .spawn(move || {
            forward(node, pipe, to);
            let _ = done.send(Event::OutputDone);
        })
        .map(drop)
}

fn forward(node: u32, pipe: impl Read, to: Stream) {
    let prefix = format!("[{node}] ");
    let mut reader = BufReader::with_capacity(MAX_LINE as usize, pipe);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        line.extend_from_slice(prefix.as_bytes());
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                // A last line without newline (or a cut one) gets one, so
                // the next line starts with its own prefix.
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                write_line(to, &line);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Writes one whole line; errors (deckrun's reader went away) are
/// ignored so the node's pipe keeps draining.
fn write_line(to: Stream, line: &[u8]) {
    let _ = match to {
        Stream::Stdout => {
            let mut out = io::stdout().lock();
            out.write_all(line).and_then(|()| out.flush())
        }
        Stream::Stderr => io::stderr().lock().write_all(line),
    };
}
