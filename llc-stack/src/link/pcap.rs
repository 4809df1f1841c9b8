//! Capture middleware: wraps any [`Device`] and writes every frame it
//! receives or transmits to a classic libpcap file (link type Ethernet) that
//! tshark and Wireshark open.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Capabilities, Device, RxToken, TxToken};
use crate::time::Instant;

const LINKTYPE_ETHERNET: u32 = 1;

/// Writes pcap records; timestamps are wall-clock time at the first frame plus
/// the device's `now` offsets (virtual time in simulations).
#[derive(Debug)]
struct Recorder<W: Write> {
    out: W,
    snaplen: u32,
    base: Option<(Instant, Duration)>,
    error: Option<io::Error>,
}

impl<W: Write> Recorder<W> {
    fn record(&mut self, now: Instant, frame: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let (t0, wall0) = *self.base.get_or_insert_with(|| {
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            (now, wall)
        });
        let ts = wall0 + now.saturating_duration_since(t0);
        let caplen = frame.len().min(self.snaplen as usize);
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
        rec[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        let r = self
            .out
            .write_all(&rec)
            .and_then(|_| self.out.write_all(&frame[..caplen]));
        if let Err(e) = r {
            tracing::warn!("pcap capture stopped: {e}");
            self.error = Some(e);
        }
    }
}

/// The wrapper.
#[derive(Debug)]
pub struct PcapWriter<D, W: Write = BufWriter<File>> {
    inner: D,
    rec: Recorder<W>,
}

impl<D: Device> PcapWriter<D, BufWriter<File>> {
    /// Capture to a new file at `path`.
    pub fn create(inner: D, path: impl AsRef<Path>) -> io::Result<Self> {
        let f = File::create(path)?;
        PcapWriter::new(inner, BufWriter::new(f))
    }
}

impl<D: Device, W: Write> PcapWriter<D, W> {
    /// Capture to `out`; the pcap file header is written at once.
    pub fn new(inner: D, mut out: W) -> io::Result<Self> {
        let snaplen = (inner.capabilities().max_frame_len() as u32).max(65535);
        let mut hdr = [0u8; 24];
        hdr[0..4].copy_from_slice(&0xa1b2c3d4u32.to_le_bytes());
        hdr[4..6].copy_from_slice(&2u16.to_le_bytes());
        hdr[6..8].copy_from_slice(&4u16.to_le_bytes());
        hdr[16..20].copy_from_slice(&snaplen.to_le_bytes());
        hdr[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&hdr)?;
        Ok(PcapWriter {
            inner,
            rec: Recorder {
                out,
                snaplen,
                base: None,
                error: None,
            },
        })
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// Flush the capture and return the output (and any write error seen).
    pub fn finish(mut self) -> io::Result<W> {
        if let Some(e) = self.rec.error.take() {
            return Err(e);
        }
        self.rec.out.flush()?;
        Ok(self.rec.out)
    }
}

/// A received frame that is recorded when consumed.
pub struct PcapRx<'a, T, W: Write> {
    tok: T,
    rec: &'a mut Recorder<W>,
    now: Instant,
}

impl<T: RxToken, W: Write> RxToken for PcapRx<'_, T, W> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let rec = self.rec;
        let now = self.now;
        self.tok.consume(|frame| {
            rec.record(now, frame);
            f(frame)
        })
    }
}

/// A transmit slot whose frame is recorded when written.
pub struct PcapTx<'a, T, W: Write> {
    tok: T,
    rec: &'a mut Recorder<W>,
    now: Instant,
}

impl<T: TxToken, W: Write> TxToken for PcapTx<'_, T, W> {
    fn consume<F: FnOnce(&mut [u8]) -> usize>(self, f: F) -> usize {
        let rec = self.rec;
        let now = self.now;
        self.tok.consume(|buf| {
            let n = f(buf);
            if n > 0 {
                rec.record(now, &buf[..n.min(buf.len())]);
            }
            n
        })
    }
}

impl<D: Device, W: Write> Device for PcapWriter<D, W> {
    type RxToken<'a>
        = PcapRx<'a, D::RxToken<'a>, W>
    where
        Self: 'a;
    type TxToken<'a>
        = PcapTx<'a, D::TxToken<'a>, W>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>> {
        let tok = self.inner.receive(now)?;
        Some(PcapRx {
            tok,
            rec: &mut self.rec,
            now,
        })
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        let tok = self.inner.transmit(now)?;
        Some(PcapTx {
            tok,
            rec: &mut self.rec,
            now,
        })
    }

    fn flush(&mut self, now: Instant) -> io::Result<()> {
        self.inner.flush(now)
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        // Do not hold buffered capture data across a sleep.
        let _ = self.rec.out.flush();
        self.inner.wait(timeout)
    }

    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        let _ = self.rec.out.flush();
        self.inner.prepare_wait(fds)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }

    fn kernel_drops(&self) -> u64 {
        self.inner.kernel_drops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::sim::{Sim, SimConfig};

    #[test]
    fn writes_header_and_records() {
        let sim = Sim::new(SimConfig {
            latency: Duration::ZERO,
            rate_bps: 0,
            ..Default::default()
        });
        let mut a = PcapWriter::new(sim.port(), Vec::new()).unwrap();
        let mut b = sim.port();
        let now = Instant::from_micros(1_500_000);
        a.transmit(now).unwrap().consume(|buf| {
            buf[..60].fill(0xAB);
            60
        });
        b.transmit(now).unwrap().consume(|buf| {
            buf[..64].fill(0xCD);
            64
        });
        a.receive(now).unwrap().consume(|f| assert_eq!(f.len(), 64));
        let out = a.finish().unwrap();
        assert_eq!(&out[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes(out[20..24].try_into().unwrap()), 1);
        assert_eq!(out.len(), 24 + 16 + 60 + 16 + 64);
        assert_eq!(u32::from_le_bytes(out[32..36].try_into().unwrap()), 60);
        assert_eq!(out[40], 0xAB);
        assert_eq!(out[24 + 16 + 60 + 16], 0xCD);
    }
}
