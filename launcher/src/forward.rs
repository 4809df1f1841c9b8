//! Reading a process's output pipe on a thread of its own. Each line
//! either goes to the launcher's stdout (stderr) with the prefix `[N] `,
//! whole, so the processes' lines never mix within a line, or is handed to
//! the job's owner.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::thread;

/// Longest piece forwarded as one prefixed line: a longer line is cut
/// into pieces of this size, each on a line of its own, so a process that
/// never writes a newline cannot make the launcher buffer without bound.
/// (Lines handed to the owner are whole: they are its protocol.)
const MAX_LINE: u64 = 64 * 1024;

/// One of a process's output streams, and the launcher's stream of the
/// same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What becomes of a pipe's lines.
pub(crate) enum Sink {
    /// To the launcher's own `to`, each line after `prefix`.
    Prefixed { prefix: String, to: Stream },
    /// To this function, each line without its newline.
    Lines(Box<dyn FnMut(String) + Send>),
}

/// Reads `pipe` into `sink` on a thread named `name`; calls `done` at end
/// of file.
pub(crate) fn start<R: Read + Send + 'static>(
    name: String,
    pipe: R,
    sink: Sink,
    done: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    thread::Builder::new()
        .name(name)
        .spawn(move || {
            match sink {
                Sink::Prefixed { prefix, to } => {
                    prefixed(&prefix, pipe, |line| write_line(to, line));
                }
                Sink::Lines(each) => lines(pipe, each),
            }
            done();
        })
        .map(drop)
}

/// Every line of `pipe`, cut at [`MAX_LINE`], with `prefix` and a newline
/// (a last line without one, or a cut one, gets one, so the next line
/// starts with its own prefix).
fn prefixed(prefix: &str, pipe: impl Read, mut out: impl FnMut(&[u8])) {
    let mut reader = BufReader::with_capacity(MAX_LINE as usize, pipe);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        line.extend_from_slice(prefix.as_bytes());
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                out(&line);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Every line of `pipe`, whole, without its newline (bytes that are not
/// UTF-8 replaced).
fn lines(pipe: impl Read, mut each: impl FnMut(String)) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                each(String::from_utf8_lossy(&line).into_owned());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Writes one whole line; errors (the launcher's reader went away) are
/// ignored so the process's pipe keeps draining.
fn write_line(to: Stream, line: &[u8]) {
    let _ = match to {
        Stream::Stdout => {
            let mut out = io::stdout().lock();
            out.write_all(line).and_then(|()| out.flush())
        }
        Stream::Stderr => io::stderr().lock().write_all(line),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_lines_are_whole_cut_and_terminated() {
        let long = "x".repeat(MAX_LINE as usize + 10);
        let input = format!("one\n{long}\nlast without newline");
        let mut got = Vec::new();
        prefixed("[3] ", input.as_bytes(), |l| {
            got.push(String::from_utf8(l.to_vec()).unwrap())
        });
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], "[3] one\n");
        // The long line: a first piece of MAX_LINE bytes of the process's,
        // then the rest on a line of its own.
        let first = MAX_LINE as usize;
        assert!(got[1] == format!("[3] {}\n", &long[..first]), "first piece");
        assert!(got[2] == format!("[3] {}\n", &long[first..]), "the rest");
        assert_eq!(got[3], "[3] last without newline\n");
    }

    #[test]
    fn owner_lines_are_whole_however_long() {
        let long = "y".repeat(3 * MAX_LINE as usize);
        let input = [&b"a\n"[..], long.as_bytes(), &b"\n\xff tail"[..]].concat();
        let mut got = Vec::new();
        lines(&input[..], |l| got.push(l));
        assert_eq!(got.len(), 3);
        assert!(got[0] == "a" && got[1] == long, "whole lines");
        assert_eq!(got[2], "\u{fffd} tail");
    }
}
