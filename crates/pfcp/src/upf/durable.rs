//! The endpoint's state as records to keep durable, and its restore after a restart.
//!
//! With [`Upf::track_state`] on, every change of a session (established, modified, deleted,
//! released with its peer) and of an association (set up, updated, released; also those
//! replicated from another endpoint: this endpoint needs them after its restart too) is
//! recorded; [`Upf::take_state_changes`] hands them out as `(key, record)` pairs, `None` for a
//! record to remove. Whoever keeps them (the cluster's node: its range's state records) gives
//! them back to [`Upf::restore_state`] of the endpoint's next incarnation.
//!
//! Keys: a session's UP SEID; an association's key has its allocator byte (bits 48 to 55, the
//! endpoint's allocator id in a SEID, never 0) 0 and its top bit set, the rest a 48-bit hash
//! of the peer's Node ID ([`association_key`]; two Node IDs of one hash would share a record:
//! one chance in 2^48 per pair).
//!
//! Records (version byte 1 first):
//! - session: 1, kind 1, the placement (node u16 little-endian, `ran` IPv4), the packed
//!   session's length u32 and the packed session (`Session::pack`: the CP's Node ID and
//!   F-SEID, the rules);
//! - association: 1, kind 2, Node ID (type u8: 0 IPv4, 1 IPv6, 2 FQDN with length u8; then
//!   its bytes), the peer's address (4 or 16 bytes after a length u8), its Recovery Time
//!   Stamp u32, whether we heartbeat it u8 and then to which address (length u8, address, port
//!   u16), whether its heartbeats showed a restart u8.
//!
//! What a restore gives back: every session with its SEID, rules, placement, UE addresses and
//! TEIDs (reserved again: never given to another session), CP-function paths and usage state
//! (measurement starts afresh: counts since the last report before the restart are lost;
//! thresholds, quotas and timers are armed again from the rules); every association, our
//! heartbeats to the peers we heartbeat starting again. New sessions keep the SEIDs' prefix of
//! the restored ones (their incarnation: an endpoint whose sessions were never lost keeps its
//! first incarnation's prefix), so old and new share one slab; a SEID given to an
//! establishment whose record was not durable when the endpoint stopped may be given again,
//! which is safe: its response, sent only once the record is durable, never left. The free
//! slots' generations are not kept: the restored slab starts its free and new slots at a
//! generation of the current incarnation's (`incarnation << 8 | 1`), so a SEID of a session
//! deleted before the restart names a new one after it only where its slot was reused 256
//! times or the incarnation (8 bits) wrapped; new TEIDs come from the current incarnation's
//! counter (`incarnation << 16`), the restored ones reserved. A restored SEID's slot is
//! below [`Config::max_sessions`] (or 2^20): a damaged key makes no huge slab.
//!
//! [`Upf::drop_state`] forgets sessions and associations (another endpoint took their
//! records back): no change to the cluster, no record.

use super::association::Heartbeats;
use super::session::{placement_head, placement_of_head};
use super::*;
use std::net::Ipv6Addr;

/// Why records do not restore.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// A record does not parse (or is of another version).
    #[error("record {key:#x}: {why}")]
    Bad {
        /// Its key.
        key: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// The endpoint holds sessions already.
    #[error("the endpoint holds sessions already")]
    NotEmpty,
    /// Two sessions claim one SEID slot, or a UE address or TEID.
    #[error("session {0:#x} collides with another")]
    Collision(u64),
    /// Sessions of another allocator, or of several incarnations.
    #[error("session {0:#x} is not of this endpoint's SEIDs")]
    Foreign(u64),
}

const VERSION: u8 = 1;
const KIND_SESSION: u8 = 1;
const KIND_ASSOCIATION: u8 = 2;
/// A restored SEID's slot is below [`Config::max_sessions`] or this, whichever is more (a
/// slab never holds more slots than sessions at once; the margin for a capacity lowered
/// between two incarnations).
const MIN_SLOTS: usize = 1 << 20;

/// The key of `node`'s association record (see the module docs).
pub fn association_key(node: &NodeId) -> u64 {
    // FNV-1a over the record's Node ID bytes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node_id_bytes(node) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    1 << 63 | (h & ((1 << 48) - 1))
}

/// Whether `key` is an association's (not a SEID).
pub fn is_association_key(key: u64) -> bool {
    (key >> 48) & 0xff == 0
}

fn node_id_bytes(node: &NodeId) -> Vec<u8> {
    match node {
        NodeId::Ipv4(a) => [&[0u8][..], &a.octets()].concat(),
        NodeId::Ipv6(a) => [&[1u8][..], &a.octets()].concat(),
        NodeId::Fqdn(n) => {
            let b = n.as_bytes();
            let len = b.len().min(255);
            [&[2u8, len as u8][..], &b[..len]].concat()
        }
    }
}

fn put_ip(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(a) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(16);
            out.extend_from_slice(&a.octets());
        }
    }
}

/// A cursor over a record's bytes.
struct Rd<'a>(&'a [u8]);

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn ip(&mut self) -> Option<IpAddr> {
        match self.u8()? {
            4 => Some(IpAddr::V4(Ipv4Addr::from(
                <[u8; 4]>::try_from(self.take(4)?).ok()?,
            ))),
            16 => Some(IpAddr::V6(Ipv6Addr::from(
                <[u8; 16]>::try_from(self.take(16)?).ok()?,
            ))),
            _ => None,
        }
    }
    fn node_id(&mut self) -> Option<NodeId> {
        match self.u8()? {
            0 => Some(NodeId::Ipv4(Ipv4Addr::from(
                <[u8; 4]>::try_from(self.take(4)?).ok()?,
            ))),
            1 => Some(NodeId::Ipv6(Ipv6Addr::from(
                <[u8; 16]>::try_from(self.take(16)?).ok()?,
            ))),
            2 => {
                let n = self.u8()? as usize;
                let b = self.take(n)?;
                let s = std::str::from_utf8(b).ok()?;
                s.is_ascii().then(|| NodeId::Fqdn(s.to_string()))
            }
            _ => None,
        }
    }
}

/// What a state record holds.
enum Record {
    Session {
        placement: Placement,
        packed: Vec<u8>,
    },
    Association {
        node: NodeId,
        association: Association,
    },
}

impl<S: Sessions> Upf<S> {
    /// Turns the recording of state changes on or off (off by default: nothing is recorded).
    pub fn track_state(&mut self, on: bool) {
        self.track = on;
        if !on {
            self.changed_sessions.clear();
        }
        // The associations as they are now are the ones a taker already has (restored) or
        // gets with the first changes.
        self.saved_associations = if on {
            self.associations
                .iter()
                .map(|(n, a)| (association_key(n), association_record(n, a)))
                .collect()
        } else {
            HashMap::default()
        };
    }

    /// Records that session `seid` changed (kept, replaced or removed).
    pub(super) fn session_changed(&mut self, seid: u64) {
        if self.track {
            self.changed_sessions.push(seid);
        }
    }

    /// The state changes since the last call (see the module docs): each key's record as it
    /// is now, `None` for one removed; sessions in the order they changed, then associations.
    pub fn take_state_changes(&mut self) -> Vec<(u64, Option<Vec<u8>>)> {
        if !self.track {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut seen = HashSet::default();
        for seid in std::mem::take(&mut self.changed_sessions) {
            if seen.insert(seid) {
                out.push((seid, self.session_record(seid)));
            }
        }
        // The associations: few; their records compared with those handed out before.
        let mut now: HashMap<u64, Vec<u8>> = HashMap::default();
        for (n, a) in &self.associations {
            now.insert(association_key(n), association_record(n, a));
        }
        let mut keys: Vec<u64> = now
            .keys()
            .chain(self.saved_associations.keys())
            .copied()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            let (new, old) = (now.get(&k), self.saved_associations.get(&k));
            if new != old {
                out.push((k, new.cloned()));
            }
        }
        self.saved_associations = now;
        out
    }

    /// Session `seid`'s record, if it is kept.
    pub fn session_record(&self, seid: u64) -> Option<Vec<u8>> {
        let kept = self.sessions.get(seid)?;
        let (placement, packed) = Stored { kept }.packed(&self.shapes);
        let mut r = Vec::with_capacity(8 + packed.len());
        r.extend_from_slice(&[VERSION, KIND_SESSION]);
        r.extend_from_slice(&placement_head(placement));
        r.extend_from_slice(&(packed.len() as u32).to_le_bytes());
        r.extend_from_slice(&packed);
        Some(r)
    }

    /// Restores the records (any order) into this endpoint, which must hold no session yet:
    /// the number restored. Nothing is restored when a record is refused (validated first).
    pub fn restore_state<B: AsRef<[u8]>>(
        &mut self,
        records: impl IntoIterator<Item = (u64, B)>,
    ) -> Result<usize, RestoreError> {
        if self.sessions.len() > 0 || self.establishing > 0 {
            return Err(RestoreError::NotEmpty);
        }
        let mut sessions = Vec::new();
        let mut associations = Vec::new();
        for (key, bytes) in records {
            let bad = |why| RestoreError::Bad { key, why };
            match decode(bytes.as_ref()).map_err(bad)? {
                Record::Session { placement, packed } => {
                    if is_association_key(key) {
                        return Err(bad("a session under an association's key"));
                    }
                    let session = Stored::try_session(placement, &packed, &[]).map_err(bad)?;
                    sessions.push((key, session));
                }
                Record::Association { node, association } => {
                    if association_key(&node) != key {
                        return Err(bad("an association under another key"));
                    }
                    associations.push((node, association));
                }
            }
        }
        // One prefix (incarnation and allocator) for every session: the slab's.
        sessions.sort_by_key(|(seid, _)| Slab::slot_of(*seid));
        let prefix = match sessions.first() {
            Some((seid, _)) => (seid >> 48) as u16,
            None => self.sessions.prefix(),
        };
        let mut ues = HashSet::default();
        let mut teids = HashSet::default();
        let mut slots = HashSet::default();
        // A slot beyond what the endpoint could have given (a damaged key) would make the
        // slab's array that long.
        let room = self.config.max_sessions.max(MIN_SLOTS);
        for (seid, s) in &sessions {
            if Slab::slot_of(*seid) as usize >= room {
                return Err(RestoreError::Bad {
                    key: *seid,
                    why: "a SEID's slot beyond the endpoint's capacity",
                });
            }
            if (seid >> 48) as u16 != prefix
                || (seid >> 48) as u8 != self.config.allocator_id
                || !Slab::well_formed(*seid)
            {
                return Err(RestoreError::Foreign(*seid));
            }
            let fresh = slots.insert(Slab::slot_of(*seid))
                && ue_slots(&s.rules).iter().all(|u| ues.insert(*u))
                && teids_of(&s.rules).iter().all(|t| teids.insert(*t));
            if !fresh {
                return Err(RestoreError::Collision(*seid));
            }
        }
        // Validated: restore.
        let n = sessions.len() + associations.len();
        if !sessions.is_empty() {
            self.sessions = Slab::new(prefix, self.config.expected_sessions);
            self.sessions.start_generations(self.config.incarnation);
        }
        for (node, a) in associations {
            self.install_association(node, a);
        }
        for (seid, session) in sessions {
            let packed = session.pack().map_err(|_| RestoreError::Bad {
                key: seid,
                why: "a session too long to keep",
            })?;
            let kept = Stored::encode(&mut self.shapes, &session, &packed).to_vec();
            self.sessions.restore(seid, &kept);
            self.reserve(&session, seid);
            let smf = report_addr(&session.cp_f_seid);
            let cp_seid = session.cp_f_seid.seid;
            let (m, _) = metering(
                &session.rules,
                smf,
                cp_seid,
                None,
                &MeterEdit::default(),
                self.now,
            );
            self.set_metering(seid, m);
            let cp = cp::cp_paths(&session.rules, &session.fwd, session.placement);
            self.set_cp_paths(seid, Some(cp));
        }
        if self.track {
            // What was restored is what the taker has.
            self.changed_sessions.clear();
            self.track_state(true);
        }
        Ok(n)
    }
}

impl<S: Sessions> Upf<S> {
    /// Forgets the sessions and associations whose keys are in `keys` (keys of neither: no
    /// matter), as if they had never been here: no change to the cluster (their FIB entries
    /// and TEIDs' forwarding stay, for whoever holds them now), no state change recorded
    /// (their records stay as they are), no message. For records another endpoint takes
    /// back (its node returned). A session's SEID, UE addresses and TEIDs become free here.
    /// The keys not forgotten, because a change of theirs is in flight (a modification, a
    /// deletion, an association's release): call again once it completed.
    pub fn drop_state(&mut self, keys: &[u64]) -> Vec<u64> {
        let mut left = Vec::new();
        let mut dropped: HashSet<u64> = HashSet::default();
        for &key in keys {
            if is_association_key(key) {
                let Some(node) = (self.associations.keys())
                    .find(|n| association_key(n) == key)
                    .cloned()
                else {
                    continue;
                };
                if self.busy_nodes.contains(&node) {
                    left.push(key);
                    continue;
                }
                if let Some(a) = self.associations.remove(&node) {
                    if self.by_addr.get(&a.addr) == Some(&node) {
                        self.by_addr.remove(&a.addr);
                    }
                }
                self.saved_associations.remove(&key);
            } else if self.busy.contains(&key) {
                left.push(key);
            } else if let Some(kept) = self.sessions.get(key) {
                let session = Stored { kept }.unpack(&self.shapes, &[]);
                self.forget(&session, key);
                self.sessions.remove(key);
                self.set_metering(key, None);
                self.set_cp_paths(key, None);
                dropped.insert(key);
            }
        }
        if !dropped.is_empty() {
            self.changed_sessions.retain(|s| !dropped.contains(s));
        }
        left
    }
}

/// The record of `node`'s association `a`.
fn association_record(node: &NodeId, a: &Association) -> Vec<u8> {
    let mut r = vec![VERSION, KIND_ASSOCIATION];
    r.extend_from_slice(&node_id_bytes(node));
    put_ip(&mut r, a.addr);
    r.extend_from_slice(&a.recovery_time_stamp.0.to_le_bytes());
    match &a.heartbeat {
        Some(h) => {
            r.push(1);
            put_ip(&mut r, h.to.ip());
            r.extend_from_slice(&h.to.port().to_le_bytes());
        }
        None => r.push(0),
    }
    r.push(u8::from(a.restarted));
    r
}

fn decode(bytes: &[u8]) -> Result<Record, &'static str> {
    let mut r = Rd(bytes);
    if r.u8() != Some(VERSION) {
        return Err("unknown record version");
    }
    match r.u8() {
        Some(KIND_SESSION) => {
            let head: [u8; crate::shapes::HEAD] = r
                .take(crate::shapes::HEAD)
                .and_then(|h| h.try_into().ok())
                .ok_or("truncated")?;
            let len = r.u32().ok_or("truncated")? as usize;
            if len == 0 || r.0.len() != len {
                return Err("a session's length differs from its bytes'");
            }
            let packed = r.0.to_vec();
            Ok(Record::Session {
                placement: placement_of_head(head),
                packed,
            })
        }
        Some(KIND_ASSOCIATION) => {
            let node = r.node_id().ok_or("bad node id")?;
            let addr = r.ip().ok_or("bad address")?;
            let rts = RecoveryTimeStamp(r.u32().ok_or("truncated")?);
            let heartbeat = match r.u8() {
                Some(0) => None,
                Some(1) => {
                    let ip = r.ip().ok_or("bad heartbeat address")?;
                    let port = r.u16().ok_or("truncated")?;
                    Some(Heartbeats {
                        to: SocketAddr::new(ip, port),
                        next: Duration::ZERO,
                        waiting: None,
                        misses: 0,
                        dead: false,
                        dead_since: Duration::ZERO,
                    })
                }
                _ => return Err("bad heartbeat flag"),
            };
            let restarted = match r.u8() {
                Some(0) => false,
                Some(1) => true,
                _ => return Err("bad restart flag"),
            };
            if !r.0.is_empty() {
                return Err("trailing bytes");
            }
            Ok(Record::Association {
                node,
                association: Association {
                    addr,
                    recovery_time_stamp: rts,
                    heartbeat,
                    restarted,
                },
            })
        }
        _ => Err("unknown record kind"),
    }
}
