//! The operator API of a ScaleBricks node: a gRPC service (`scalebricks.v1.Operator`, in
//! `proto/scalebricks/v1/operator.proto`, compiled at build time by protox and tonic's prost
//! generator: no system `protoc`) and its client.
//!
//! - [`serve`] runs the service on a listener until a flag is set, on the caller's thread (a
//!   tokio runtime of one thread), over a [`Backend`]: the node's tables and state, read without
//!   locks the data plane holds.
//! - Every call needs the metadata `authorization: Bearer <token>`; a missing or different
//!   token is refused with `UNAUTHENTICATED` before the backend is asked anything (the token
//!   is compared in constant time). Malformed requests get `INVALID_ARGUMENT`; the API reads
//!   and never changes anything.
//! - Any node answers a `Lookup` of a UE address: the GPT names the handling node, and when
//!   that is another node the request is passed to it (once: `forwarded`). A TEID lives in the
//!   uplink table of the node that handles its tunnel: a node that does not hold it asks the
//!   others. `ClusterStatus` asks every other node for its own status (1 s each, in parallel);
//!   a node that does not answer is listed `up: false` with the error.
//! - [`connect`] gives a client that sends the token with every call.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use sb_api::pb;
//! let mut client = sb_api::connect("10.3.0.1:50051".parse()?, "the-token").await?;
//! let reply = client
//!     .lookup(pb::LookupRequest {
//!         key: Some(pb::lookup_request::Key::UeAddress(vec![100, 64, 0, 1])),
//!         forwarded: false,
//!     })
//!     .await?
//!     .into_inner();
//! println!("handled by node {}: {:?}", reply.handling_node, reply.tunnel);
//! # Ok(()) }
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// The generated messages, client and server of `scalebricks.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("scalebricks.v1");
}

/// The TCP port of the API on every node's control address.
pub const PORT: u16 = 50051;
/// The most entries one `ListSessions` page holds.
pub const MAX_PAGE: u32 = 10_000;
/// Entries per page when the request says 0.
pub const DEFAULT_PAGE: u32 = 100;
/// How long a node waits for another node's answer (a forwarded lookup, a status).
pub const PEER_TIMEOUT: Duration = Duration::from_secs(1);

/// Where a listing continues: a bucket of the FIB and the entries of it already listed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The bucket.
    pub bucket: u64,
    /// Entries of that bucket already listed.
    pub skip: u32,
}

impl Cursor {
    /// The page token of this cursor.
    pub fn token(&self) -> String {
        format!("{}.{}", self.bucket, self.skip)
    }

    /// The cursor of a page token ("" is the start).
    pub fn parse(token: &str) -> Result<Cursor, Status> {
        if token.is_empty() {
            return Ok(Cursor::default());
        }
        let bad = || Status::invalid_argument(format!("page_token {token:?} is not one we gave"));
        let (b, s) = token.split_once('.').ok_or_else(bad)?;
        Ok(Cursor {
            bucket: b.parse().map_err(|_| bad())?,
            skip: s.parse().map_err(|_| bad())?,
        })
    }
}

/// A page of the node's FIB slice.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// The entries.
    pub sessions: Vec<pb::Tunnel>,
    /// Where the next page starts (None: this was the last).
    pub next: Option<Cursor>,
    /// Entries in the slice now.
    pub total: u64,
}

/// What a node gives the service: cheap reads of its tables and state (called on the
/// service's thread; none may block for long).
pub trait Backend: Send + Sync + 'static {
    /// The node's index.
    fn node(&self) -> u32;
    /// The node's counters (see [`pb::StatsReply`]).
    fn stats(&self) -> pb::StatsReply;
    /// The node the GPT names for `ue`; None when the node has no GPT (yet).
    fn handling_node(&self, ue: IpAddr) -> Option<u32>;
    /// The tunnel of `ue` in this node's FIB.
    fn tunnel_of_ue(&self, ue: IpAddr) -> Option<pb::Tunnel>;
    /// The tunnel whose uplink TEID is `teid`, in this node's uplink table.
    fn tunnel_of_teid(&self, teid: u32) -> Option<pb::Tunnel>;
    /// Up to `n` entries of the FIB slice from `from` on.
    fn sessions(&self, from: Cursor, n: usize) -> Page;
    /// This node's control-plane status.
    fn status(&self) -> pb::NodeStatus;
}

/// The service's settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The token every call must carry.
    pub token: String,
    /// Every node's API address by index (this node's included).
    pub peers: Vec<SocketAddr>,
}

/// Why a client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The token cannot be sent as metadata.
    #[error("the token is not printable ASCII")]
    Token,
    /// No connection.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// Where to.
        addr: SocketAddr,
        /// Why not.
        #[source]
        source: tonic::transport::Error,
    },
}

/// Adds the token to every call of a client.
#[derive(Clone)]
pub struct Auth(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

/// A client of one node's API.
pub type Client = pb::operator_client::OperatorClient<InterceptedService<Channel, Auth>>;

/// A client of the API at `addr` that sends `token` with every call (connecting within 2 s;
/// each call times out after 10 s).
pub async fn connect(addr: SocketAddr, token: &str) -> Result<Client, ApiError> {
    connect_with(addr, token, Duration::from_secs(2), Duration::from_secs(10)).await
}

async fn connect_with(
    addr: SocketAddr,
    token: &str,
    connect_timeout: Duration,
    timeout: Duration,
) -> Result<Client, ApiError> {
    let value: MetadataValue<_> = format!("Bearer {token}")
        .parse()
        .map_err(|_| ApiError::Token)?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("an address makes a URI")
        .connect_timeout(connect_timeout)
        .timeout(timeout)
        .connect()
        .await
        .map_err(|source| ApiError::Connect { addr, source })?;
    Ok(pb::operator_client::OperatorClient::with_interceptor(
        channel,
        Auth(value),
    ))
}

/// Equal in constant time (for equal lengths; the length is not secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The interceptor that refuses calls without the token.
fn check_token(token: &str) -> impl Fn(Request<()>) -> Result<Request<()>, Status> + Clone {
    let want = format!("Bearer {token}").into_bytes();
    move |req: Request<()>| {
        let got = req
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if same(got, &want) {
            Ok(req)
        } else {
            Err(Status::unauthenticated(
                "missing or wrong API token (metadata `authorization: Bearer <token>`)",
            ))
        }
    }
}

/// The IP address of 4 or 16 bytes.
pub fn ip_of(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(bytes);
            Some(IpAddr::V6(Ipv6Addr::from(a)))
        }
        _ => None,
    }
}

/// The bytes of an IP address (4 or 16).
pub fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

struct Service<B> {
    backend: Arc<B>,
    cfg: Arc<ServerConfig>,
}

impl<B: Backend> Service<B> {
    async fn peer(&self, node: u32) -> Result<Client, Status> {
        let addr = *self
            .cfg
            .peers
            .get(node as usize)
            .ok_or_else(|| Status::internal(format!("no API address for node {node}")))?;
        connect_with(addr, &self.cfg.token, PEER_TIMEOUT, PEER_TIMEOUT)
            .await
            .map_err(|e| Status::unavailable(format!("node {node}: {e}")))
    }

    fn others(&self) -> impl Iterator<Item = u32> + '_ {
        let me = self.backend.node();
        (0..self.cfg.peers.len() as u32).filter(move |&n| n != me)
    }
}

#[tonic::async_trait]
impl<B: Backend> pb::operator_server::Operator for Service<B> {
    async fn stats(
        &self,
        _req: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsReply>, Status> {
        Ok(Response::new(self.backend.stats()))
    }

    async fn lookup(
        &self,
        req: Request<pb::LookupRequest>,
    ) -> Result<Response<pb::LookupReply>, Status> {
        let req = req.into_inner();
        let me = self.backend.node();
        match req.key {
            None => Err(Status::invalid_argument(
                "a lookup needs ue_address or teid",
            )),
            Some(pb::lookup_request::Key::UeAddress(bytes)) => {
                let ue = ip_of(&bytes).ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "ue_address has {} bytes: 4 (IPv4) or 16 (IPv6)",
                        bytes.len()
                    ))
                })?;
                let handler = self
                    .backend
                    .handling_node(ue)
                    .ok_or_else(|| Status::unavailable("this node has no GPT yet"))?;
                if handler as usize >= self.cfg.peers.len() {
                    // The GPT answers something for every key; for a key it does not hold that
                    // may be a value no node has.
                    return Err(Status::not_found(format!(
                        "{ue}: not a flow of this cluster (the GPT names node {handler}, which does not exist)"
                    )));
                }
                if handler != me && !req.forwarded {
                    let mut c = self.peer(handler).await?;
                    let r = c
                        .lookup(pb::LookupRequest {
                            key: Some(pb::lookup_request::Key::UeAddress(bytes)),
                            forwarded: true,
                        })
                        .await?;
                    return Ok(r);
                }
                match self.backend.tunnel_of_ue(ue) {
                    Some(t) => Ok(Response::new(pb::LookupReply {
                        handling_node: handler,
                        answered_by: me,
                        tunnel: Some(t),
                    })),
                    None => Err(Status::not_found(format!(
                        "{ue}: the GPT names node {handler}, whose FIB has no entry for it (not a flow of this cluster)"
                    ))),
                }
            }
            Some(pb::lookup_request::Key::Teid(teid)) => {
                if let Some(t) = self.backend.tunnel_of_teid(teid) {
                    return Ok(Response::new(pb::LookupReply {
                        handling_node: me,
                        answered_by: me,
                        tunnel: Some(t),
                    }));
                }
                if !req.forwarded {
                    let asks = self.others().map(|n| async move {
                        let mut c = self.peer(n).await?;
                        c.lookup(pb::LookupRequest {
                            key: Some(pb::lookup_request::Key::Teid(teid)),
                            forwarded: true,
                        })
                        .await
                    });
                    let mut unreachable = Vec::new();
                    for (n, r) in self.others().zip(join_all(asks).await) {
                        match r {
                            Ok(r) => return Ok(r),
                            Err(s) if s.code() == tonic::Code::NotFound => {}
                            Err(s) => unreachable.push(format!("node {n}: {}", s.message())),
                        }
                    }
                    if !unreachable.is_empty() {
                        return Err(Status::unavailable(format!(
                            "TEID {teid:#x} not found on the nodes that answered; not asked: {}",
                            unreachable.join("; ")
                        )));
                    }
                }
                Err(Status::not_found(format!(
                    "TEID {teid:#x} is in no node's uplink table"
                )))
            }
        }
    }

    async fn list_sessions(
        &self,
        req: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsReply>, Status> {
        let req = req.into_inner();
        let n = match req.page_size {
            0 => DEFAULT_PAGE,
            n if n <= MAX_PAGE => n,
            n => {
                return Err(Status::invalid_argument(format!(
                    "page_size {n} is over {MAX_PAGE}"
                )))
            }
        };
        let from = Cursor::parse(&req.page_token)?;
        let page = self.backend.sessions(from, n as usize);
        Ok(Response::new(pb::ListSessionsReply {
            sessions: page.sessions,
            next_page_token: page.next.map(|c| c.token()).unwrap_or_default(),
            total: page.total,
        }))
    }

    async fn cluster_status(
        &self,
        req: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusReply>, Status> {
        let local_only = req.into_inner().local_only;
        let mut nodes = vec![self.backend.status()];
        if !local_only {
            let asks = self.others().map(|n| async move {
                let mut c = self.peer(n).await?;
                c.cluster_status(pb::ClusterStatusRequest { local_only: true })
                    .await
            });
            for (n, r) in self.others().zip(join_all(asks).await) {
                nodes.push(match r.map(|r| r.into_inner().nodes.into_iter().next()) {
                    Ok(Some(s)) => s,
                    Ok(None) => down(n, "answered without a status".into()),
                    Err(s) => down(n, s.message().to_string()),
                });
            }
            nodes.sort_by_key(|s| s.node);
        }
        let converged = nodes.iter().all(|s| {
            s.up && s.ready
                && !s.gpt_digest.is_empty()
                && s.gpt_digest == nodes[0].gpt_digest
                && s.owners.iter().all(|o| o.lag == 0)
        });
        Ok(Response::new(pb::ClusterStatusReply { nodes, converged }))
    }
}

fn down(node: u32, error: String) -> pb::NodeStatus {
    pb::NodeStatus {
        node,
        up: false,
        error,
        ..Default::default()
    }
}

/// Awaits every future, concurrently (on the one-thread runtime), in order.
async fn join_all<F: std::future::Future>(fs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = fs.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..handles.len()).map(|_| None).collect();
    let mut handles: Vec<Option<_>> = handles.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (h, o) in handles.iter_mut().zip(out.iter_mut()) {
            if let Some(f) = h {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *o = Some(v);
                        *h = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

/// Serves the API on `listener` (bound by the caller, e.g. inside the node's namespace) over
/// `backend` until `stop` is set (checked every 100 ms), on the calling thread.
pub fn serve<B: Backend>(
    listener: std::net::TcpListener,
    cfg: ServerConfig,
    backend: Arc<B>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let auth = check_token(&cfg.token);
        let svc = pb::operator_server::OperatorServer::with_interceptor(
            Service {
                backend,
                cfg: Arc::new(cfg),
            },
            auth,
        );
        let shutdown = async {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
            .map_err(std::io::Error::other)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_bad_tokens_are_refused() {
        let c = Cursor {
            bucket: 77,
            skip: 3,
        };
        assert_eq!(Cursor::parse(&c.token()).unwrap(), c);
        assert_eq!(Cursor::parse("").unwrap(), Cursor::default());
        for bad in ["x", "1", "1.", ".1", "1.2.3", "-1.0", "1.99999999999"] {
            let e = Cursor::parse(bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn tokens_compare_exactly() {
        assert!(same(b"Bearer abc", b"Bearer abc"));
        assert!(!same(b"Bearer abd", b"Bearer abc"));
        assert!(!same(b"Bearer ab", b"Bearer abc"));
        assert!(!same(b"", b"Bearer abc"));
    }

    #[test]
    fn addresses_of_4_or_16_bytes() {
        let v4 = IpAddr::V4(Ipv4Addr::new(100, 64, 0, 1));
        let v6: IpAddr = "fd00::7".parse().unwrap();
        assert_eq!(ip_of(&ip_bytes(v4)), Some(v4));
        assert_eq!(ip_of(&ip_bytes(v6)), Some(v6));
        assert_eq!(ip_of(&[1, 2, 3]), None);
    }
}
