//! The switch's UDP driver: one socket to the memory servers, the [`TeaSwitch`] core, and the
//! packets handed in by the caller (a trace, a test) and out through a callback.
//!
//! The socket blocks with a short timeout (1 ms), so a driver waiting for answers sleeps in the
//! kernel instead of spinning. [`UdpSwitch::inject`] gives the core one packet; a remote lookup
//! sends its read at once. [`UdpSwitch::pump`] waits for one datagram (at most the timeout),
//! hands it to the core, and runs the core's timers ([`TeaSwitch::poll`]) once a millisecond.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use sb_engine::App;
use sb_tea::{InsertError, Placed, ServerId, TeaTable};

use crate::switch::{Sink, SwitchDrop, TeaSwitch};

/// Packets leaving or dropped, as the driver's caller sees them.
pub trait Output {
    /// A translated packet left.
    fn emit(&mut self, frame: &[u8]);
    /// A packet was dropped.
    fn dropped(&mut self, why: SwitchDrop) {
        let _ = why;
    }
}

impl<F: FnMut(&[u8])> Output for F {
    fn emit(&mut self, frame: &[u8]) {
        self(frame)
    }
}

struct UdpSink<'a, O: Output> {
    socket: &'a UdpSocket,
    servers: &'a [SocketAddr],
    out: &'a mut O,
    send_errors: &'a mut u64,
}

impl<O: Output> Sink for UdpSink<'_, O> {
    fn send(&mut self, server: ServerId, datagram: &[u8]) {
        let Some(addr) = self.servers.get(server as usize) else {
            *self.send_errors += 1;
            return;
        };
        // A failed send is a read without answer: the core's timeout handles it.
        if self.socket.send_to(datagram, addr).is_err() {
            *self.send_errors += 1;
        }
    }

    fn emit(&mut self, frame: &[u8]) {
        self.out.emit(frame);
    }

    fn drop_packet(&mut self, why: SwitchDrop) {
        self.out.dropped(why);
    }
}

/// The switch on a UDP socket.
#[derive(Debug)]
pub struct UdpSwitch<A: App> {
    core: TeaSwitch<A>,
    socket: UdpSocket,
    servers: Vec<SocketAddr>,
    buf: Vec<u8>,
    last_poll: Instant,
    send_errors: u64,
}

impl<A: App> UdpSwitch<A> {
    /// The core on a socket bound to `bind`, server `i` at `servers[i]`.
    pub fn new(
        core: TeaSwitch<A>,
        bind: SocketAddr,
        servers: Vec<SocketAddr>,
    ) -> io::Result<UdpSwitch<A>> {
        let socket = UdpSocket::bind(bind)?;
        socket.set_read_timeout(Some(Duration::from_millis(1)))?;
        Ok(UdpSwitch {
            core,
            socket,
            servers,
            buf: vec![0u8; 65_536],
            last_poll: Instant::now(),
            send_errors: 0,
        })
    }

    /// The core.
    pub fn core(&self) -> &TeaSwitch<A> {
        &self.core
    }

    /// The core, mutable (the control plane's inserts, removes and control loop).
    pub fn core_mut(&mut self) -> &mut TeaSwitch<A> {
        &mut self.core
    }

    /// Sends that failed.
    pub fn send_errors(&self) -> u64 {
        self.send_errors
    }

    /// A packet from outside (the timers run too when a millisecond passed: a switch whose
    /// reads all fail still probes its dead servers).
    pub fn inject<O: Output>(&mut self, frame: &[u8], out: &mut O) {
        let now = Instant::now();
        let mut sink = UdpSink {
            socket: &self.socket,
            servers: &self.servers,
            out,
            send_errors: &mut self.send_errors,
        };
        self.core.on_packet(now, frame, &mut sink);
        if now.saturating_duration_since(self.last_poll) >= Duration::from_millis(1) {
            self.last_poll = now;
            self.core.poll(now, &mut sink);
            // Answers waiting (a probe's, while no lookup is in flight) are taken without
            // blocking.
            if self.socket.set_nonblocking(true).is_ok() {
                while let Ok((n, _)) = self.socket.recv_from(&mut self.buf) {
                    let mut sink = UdpSink {
                        socket: &self.socket,
                        servers: &self.servers,
                        out: &mut *sink.out,
                        send_errors: &mut *sink.send_errors,
                    };
                    self.core
                        .on_response(Instant::now(), &self.buf[..n], &mut sink);
                }
                let _ = self.socket.set_nonblocking(false);
            }
        }
    }

    /// Waits (at most 1 ms) for one datagram from the servers and handles it; runs the
    /// timers when a millisecond passed. Returns whether a datagram was handled.
    pub fn pump<O: Output>(&mut self, out: &mut O) -> bool {
        let got = match self.socket.recv_from(&mut self.buf) {
            Ok((n, _)) => Some(n),
            Err(_) => None,
        };
        let now = Instant::now();
        let mut sink = UdpSink {
            socket: &self.socket,
            servers: &self.servers,
            out,
            send_errors: &mut self.send_errors,
        };
        if let Some(n) = got {
            self.core.on_response(now, &self.buf[..n], &mut sink);
        }
        if now.saturating_duration_since(self.last_poll) >= Duration::from_millis(1) {
            self.last_poll = now;
            self.core.poll(now, &mut sink);
        }
        got.is_some()
    }

    /// [`TeaSwitch::update`] with this socket: the entry's bucket writes go out to the memory
    /// servers (the first at once, each next one when the last is acknowledged, through
    /// [`pump`](Self::pump)).
    pub fn update<O: Output>(
        &mut self,
        table: &mut TeaTable,
        key: &[u8],
        value: &[u8],
        out: &mut O,
    ) -> Result<Placed, InsertError> {
        let mut sink = UdpSink {
            socket: &self.socket,
            servers: &self.servers,
            out,
            send_errors: &mut self.send_errors,
        };
        self.core
            .update(Instant::now(), table, key, value, &mut sink)
    }

    /// [`TeaSwitch::remove_remote`] with this socket.
    pub fn remove_remote<O: Output>(
        &mut self,
        table: &mut TeaTable,
        key: &[u8],
        out: &mut O,
    ) -> Option<Vec<u8>> {
        let mut sink = UdpSink {
            socket: &self.socket,
            servers: &self.servers,
            out,
            send_errors: &mut self.send_errors,
        };
        self.core
            .remove_remote(Instant::now(), table, key, &mut sink)
    }

    /// [`TeaSwitch::resync`] with this socket.
    pub fn resync<O: Output>(&mut self, table: &TeaTable, out: &mut O) -> usize {
        let mut sink = UdpSink {
            socket: &self.socket,
            servers: &self.servers,
            out,
            send_errors: &mut self.send_errors,
        };
        self.core.resync(Instant::now(), table, &mut sink)
    }

    /// Pumps until every queued bucket write is acknowledged (or given up) or `limit` passed.
    pub fn drain_updates<O: Output>(&mut self, out: &mut O, limit: Duration) {
        let end = Instant::now() + limit;
        while self.core.updates_pending() > 0 && Instant::now() < end {
            self.pump(out);
        }
    }

    /// Pumps until no read is in flight or `limit` passed.
    pub fn drain<O: Output>(&mut self, out: &mut O, limit: Duration) {
        let end = Instant::now() + limit;
        while self.core.in_flight() > 0 && Instant::now() < end {
            self.pump(out);
        }
    }
}
