//! The memory server: registered regions answered over UDP by copying bytes, with no
//! network-function logic (the stand-in for an RDMA NIC serving one-sided reads).
//!
//! Each region is registered with its access key (its copy's, [`sb_tea::TeaTable::access_key`]),
//! as an RDMA memory region with its R_Key: a read or write that does not carry it is answered
//! [`Status::AccessDenied`] and counted ([`ServerCounters::denied`]), with nothing read or
//! written, so a host on the fabric without the keys can neither read nor write a table.
//!
//! [`MemoryServer`] is the sans-IO part: a map from region number to a registered region and
//! [`MemoryServer::handle`], which parses one datagram ([`sb_tea::wire`]'s read request) and
//! writes the response: the bytes asked for and the packet the request carried, or a status
//! saying the region is unknown or the bytes are outside it. A write request (the control
//! plane's update of one bucket) is stored in the order readers' checks rely on and
//! acknowledged. A datagram that is not a valid
//! request gets no answer, as a NIC drops it. [`spawn`] runs a server on a UDP socket in a
//! thread of its own; its [`ServerControl`] stops it, takes it down (it keeps receiving and
//! answers nothing: a dead NIC as the switch sees it) and slows it (a delay per read: a NIC
//! busy with other traffic, the paper's overload in Figure 10).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sb_tea::wire::{
    ack_write, key_matches, opcode, refuse_read, serve_read, serve_write, Opcode, ReadRequest,
    Status, WireError, WriteRequest,
};
use sb_tea::{Region, TeaTable};

/// Why a region cannot be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ServerError {
    /// The number is registered already.
    #[error("region {0} is registered already")]
    Duplicate(u32),
}

/// Why bytes are not a server image ([`MemoryServer::from_image`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The bytes do not start with [`IMAGE_MAGIC`] and [`IMAGE_VERSION`].
    #[error("not a TEA memory-server image (bad magic or version)")]
    Magic,
    /// The bytes end inside a header or a region.
    #[error("image truncated")]
    Truncated,
    /// A region's length is not a multiple of 8 bytes.
    #[error("region {0}'s length is not a multiple of 8")]
    Length(u32),
    /// Bytes after the last region.
    #[error("{0} bytes after the last region")]
    Trailing(usize),
    /// A region number appears twice.
    #[error("region {0} appears twice")]
    Duplicate(u32),
}

/// The first 8 bytes of a server image, then the version ([`IMAGE_VERSION`], u32 little
/// endian).
pub const IMAGE_MAGIC: &[u8; 8] = b"SBTEAIMG";
/// The server image's version (2: each region with its access key).
pub const IMAGE_VERSION: u32 = 2;

/// A registered region and the access key requests for it must carry.
#[derive(Debug, Clone)]
struct Registered {
    region: Arc<Region>,
    key: u64,
}

/// What one server answered, by outcome.
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// Reads answered with their bytes.
    pub reads: AtomicU64,
    /// Bytes of region copied into answers.
    pub bytes: AtomicU64,
    /// Reads and writes refused: unknown region, out of bounds, unaligned (answered with that
    /// status); those with a wrong access key are [`ServerCounters::denied`] instead.
    pub refused: AtomicU64,
    /// Reads and writes that did not carry the region's access key (answered
    /// [`Status::AccessDenied`]; nothing read or written).
    pub denied: AtomicU64,
    /// Writes done (each one bucket image from the switch's control plane), acknowledged.
    pub writes: AtomicU64,
    /// Datagrams that are not read requests (not answered).
    pub invalid: AtomicU64,
    /// Requests received while down (not answered).
    pub ignored: AtomicU64,
}

/// The regions one node registered, and the read handler.
#[derive(Debug, Default, Clone)]
pub struct MemoryServer {
    regions: HashMap<u32, Registered>,
}

impl MemoryServer {
    /// A server with no region.
    pub fn new() -> MemoryServer {
        MemoryServer::default()
    }

    /// Registers `region` as number `number` (the TEA table's range index: the same number
    /// on the range's primary and secondary), served to requests carrying `key` (its copy's
    /// access key). The region stays shared: the control side keeps writing it while the
    /// server reads it.
    pub fn register(
        &mut self,
        number: u32,
        region: Arc<Region>,
        key: u64,
    ) -> Result<(), ServerError> {
        if self.regions.contains_key(&number) {
            return Err(ServerError::Duplicate(number));
        }
        self.regions.insert(number, Registered { region, key });
        Ok(())
    }

    /// The numbers registered, sorted.
    pub fn region_numbers(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.regions.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The server's regions as one file's bytes, to load in another process (a memory
    /// server in a node's namespace, `scalebricks tea-server`): [`IMAGE_MAGIC`],
    /// [`IMAGE_VERSION`] and the region count (u32 LE each), then per region (sorted by number)
    /// its number (u32 LE), its access key (u64 LE), its length (u64 LE, a multiple of 8) and
    /// its bytes. The file holds the keys: keep it where only the server and the switch read
    /// it (`scalebricks cluster up` writes it mode 0600).
    pub fn image(&self) -> Vec<u8> {
        let numbers = self.region_numbers();
        let mut out = Vec::new();
        out.extend_from_slice(IMAGE_MAGIC);
        out.extend_from_slice(&IMAGE_VERSION.to_le_bytes());
        out.extend_from_slice(&(numbers.len() as u32).to_le_bytes());
        for n in numbers {
            let r = &self.regions[&n];
            let bytes = r.region.snapshot();
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&r.key.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// A server holding the regions of an [`image`](MemoryServer::image) (fresh copies: no
    /// writer shares them). Checks every length; never panics.
    pub fn from_image(bytes: &[u8]) -> Result<MemoryServer, ImageError> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], ImageError> {
            if b.len() < n {
                return Err(ImageError::Truncated);
            }
            let (head, rest) = b.split_at(n);
            *b = rest;
            Ok(head)
        }
        let mut b = bytes;
        if b.len() < 16 || &b[..8] != IMAGE_MAGIC || b[8..12] != IMAGE_VERSION.to_le_bytes() {
            return Err(ImageError::Magic);
        }
        b = &b[12..];
        let count = u32::from_le_bytes(take(&mut b, 4)?.try_into().expect("4 bytes"));
        let mut server = MemoryServer::new();
        for _ in 0..count {
            let number = u32::from_le_bytes(take(&mut b, 4)?.try_into().expect("4 bytes"));
            let key = u64::from_le_bytes(take(&mut b, 8)?.try_into().expect("8 bytes"));
            let len = u64::from_le_bytes(take(&mut b, 8)?.try_into().expect("8 bytes"));
            let len = usize::try_from(len).map_err(|_| ImageError::Truncated)?;
            if len % 8 != 0 {
                return Err(ImageError::Length(number));
            }
            let data = take(&mut b, len)?;
            server
                .register(number, Arc::new(Region::from_image(data)), key)
                .map_err(|_| ImageError::Duplicate(number))?;
        }
        if !b.is_empty() {
            return Err(ImageError::Trailing(b.len()));
        }
        Ok(server)
    }

    /// Answers one datagram, a read request (the bytes and the packet come back) or a write
    /// request (the bytes are stored, [`sb_tea::Region::write_words`], and acknowledged):
    /// appends the response to `out` and returns its status, or returns
    /// why the datagram is not a request (then nothing is appended and nothing must be
    /// sent). A request without the region's access key is answered
    /// [`Status::AccessDenied`]. Never panics.
    pub fn handle(&self, datagram: &[u8], out: &mut Vec<u8>) -> Result<Status, WireError> {
        if opcode(datagram) == Some(Opcode::WriteRequest) {
            let req = WriteRequest::parse(datagram)?;
            return Ok(match self.regions.get(&req.region) {
                Some(r) if !key_matches(req.key, r.key) => {
                    ack_write(&req, Status::AccessDenied, out)
                }
                r => serve_write(r.map(|r| &*r.region), &req, out),
            });
        }
        let req = ReadRequest::parse(datagram)?;
        Ok(match self.regions.get(&req.region) {
            Some(r) if !key_matches(req.key, r.key) => refuse_read(&req, Status::AccessDenied, out),
            r => serve_read(r.map(|r| &*r.region), &req, out),
        })
    }
}

/// The memory servers `0..servers` of `table`: server `s` registers region `r`'s first copy
/// when it is range `r`'s primary, and its second copy when it is the range's secondary, each
/// with its copy's access key.
/// Ranges naming a server `>= servers` are left out.
pub fn servers_of(table: &TeaTable, servers: usize) -> Vec<MemoryServer> {
    let mut out = vec![MemoryServer::new(); servers];
    for (r, e) in table.resolver().ranges().entries().iter().enumerate() {
        let copies = table.region(r as u32);
        let r = r as u32;
        if let Some(s) = out.get_mut(e.primary as usize) {
            s.register(r, Arc::clone(&copies[0]), table.access_key(r, 0))
                .expect("one range per region number");
        }
        if let (Some(sec), Some(copy)) = (e.secondary, copies.get(1)) {
            if let Some(s) = out.get_mut(sec as usize) {
                s.register(r, Arc::clone(copy), table.access_key(r, 1))
                    .expect("one range per region number");
            }
        }
    }
    out
}

/// The switches of a running server (shared with its thread).
#[derive(Debug, Default)]
pub struct ServerControl {
    stop: AtomicBool,
    down: AtomicBool,
    delay_ns: AtomicU64,
    /// What it answered.
    pub counters: ServerCounters,
}

impl ServerControl {
    /// Asks the thread to end (it does within its receive timeout, 20 ms).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Down: requests are received and not answered (a dead server, as the switch sees it).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    /// Whether it is down.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// Waits `delay` before each answer (zero: none), as a NIC busy with other traffic.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ns.store(
            delay.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }
}

/// A server running on its own thread.
#[derive(Debug)]
pub struct ServerHandle {
    /// Its UDP address.
    pub addr: SocketAddr,
    /// Its switches and counters.
    pub control: Arc<ServerControl>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// Stops the thread and waits for it.
    pub fn join(mut self) {
        self.control.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.control.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `server` on a UDP socket bound to `bind` (port 0: any free port) in a new thread.
pub fn spawn(server: MemoryServer, bind: SocketAddr) -> io::Result<ServerHandle> {
    let socket = UdpSocket::bind(bind)?;
    socket.set_read_timeout(Some(Duration::from_millis(20)))?;
    let addr = socket.local_addr()?;
    let control = Arc::new(ServerControl::default());
    let c = Arc::clone(&control);
    let thread = std::thread::Builder::new()
        .name(format!("tea-mem-{}", addr.port()))
        .spawn(move || serve_loop(&server, &socket, &c))?;
    Ok(ServerHandle {
        addr,
        control,
        thread: Some(thread),
    })
}

fn serve_loop(server: &MemoryServer, socket: &UdpSocket, c: &ServerControl) {
    let mut buf = vec![0u8; 65_536];
    let mut out = Vec::with_capacity(16_384);
    while !c.stop.load(Ordering::Relaxed) {
        let (n, peer) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => continue,
        };
        if c.down.load(Ordering::Relaxed) {
            c.counters.ignored.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let delay = c.delay_ns.load(Ordering::Relaxed);
        if delay > 0 {
            std::thread::sleep(Duration::from_nanos(delay));
        }
        out.clear();
        let write = opcode(&buf[..n]) == Some(Opcode::WriteRequest);
        match server.handle(&buf[..n], &mut out) {
            Ok(Status::Ok) if write => {
                c.counters.writes.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Status::Ok) => {
                c.counters.reads.fetch_add(1, Ordering::Relaxed);
                let data = out.len().saturating_sub(
                    sb_tea::wire::RESPONSE_HEADER + (n - sb_tea::wire::REQUEST_HEADER),
                );
                c.counters.bytes.fetch_add(data as u64, Ordering::Relaxed);
            }
            Ok(Status::AccessDenied) => {
                c.counters.denied.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                c.counters.refused.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                c.counters.invalid.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        // A send that fails (the switch's socket gone) is a lost answer: the switch's timeout
        // handles it.
        let _ = socket.send_to(&out, peer);
    }
}
