//! Copies of the node's forwarding tables kept in step with them: the XDP fast path's maps
//! (module `fastpath`, feature `fastpath`), or a test's recorder.
//!
//! The control thread changes the tables (FIB, uplink table, live GPT) one event at a time
//! ([`crate::control::DataPlane`]); with a mirror in the [`MirrorSlot`], every change is also
//! written to the mirror, synchronously, in the same order and while the slot's lock is held
//! for the whole event (the table's write and the mirror's). So:
//!
//! - the mirror never lags the tables by more than the event in progress, and an
//!   acknowledgment the control thread sends after an event (an install is acknowledged once
//!   applied) covers the mirror too. Make-before-break carries over unchanged: the control
//!   protocol has a handling node install (and acknowledge) a FIB entry before any owner sends
//!   a GPT delta pointing at it, and removes it only after every GPT points elsewhere (plus
//!   [`crate::control::REMOVAL_GRACE`]); the mirror's FIB gets the entry inside the install
//!   and loses it inside the removal, so no mirror GPT points at a node whose mirror FIB lacks
//!   the entry any longer than the Rust tables would;
//! - a mirror put into the slot while holding its lock, filled from the tables at that moment,
//!   misses no change: the control thread waits on the lock meanwhile.

use std::sync::{Arc, Mutex, MutexGuard};

/// What receives the node's table changes. Infallible: a mirror that cannot follow a change
/// stops answering from its copy (the XDP fast path then passes every packet to the engine).
pub trait TableMirror: Send {
    /// `key`'s FIB entry is now `value` (inserted or replaced).
    fn fib_insert(&mut self, key: &[u8], value: &[u8]);
    /// `key` has no FIB entry any more.
    fn fib_remove(&mut self, key: &[u8]);
    /// The uplink entry of TEID `teid` (big endian) is now `value`.
    fn uplink_insert(&mut self, teid: &[u8], value: &[u8]);
    /// TEID `teid` has no uplink entry any more.
    fn uplink_remove(&mut self, teid: &[u8]);
    /// The live GPT accepted delta `d`.
    fn gpt_delta(&mut self, d: &sb_setsep::Delta);
    /// The GPT is now `t` (installed whole, or blocks of it replaced by pieces).
    fn gpt_replace(&mut self, t: &sb_setsep::SetSep);
    /// The stand-ins are now `by` (`sb_control::Event::StandIns`: the GPT's answers naming
    /// node `n` go to `by[n]`).
    fn stand_ins(&mut self, by: &[Option<u16>]);
    /// The fast path's state for the counters file and the metrics.
    fn report(&self) -> XdpReport;
    /// Makes the AF_XDP socket `fd`, bound to queue 0 of the node's port `port` (0 `inet`,
    /// 1 `ran`, 2 `fabric`), the slow path of the frames that port's program does not finish.
    /// A mirror without programs has none: `Err`.
    fn slow_path_socket(&mut self, port: usize, fd: std::os::fd::RawFd) -> Result<(), String> {
        let _ = (port, fd);
        Err("no XDP programs".into())
    }
}

/// The slot the control thread writes through (empty: no mirror).
pub type MirrorSlot = Arc<Mutex<Option<Box<dyn TableMirror>>>>;

/// A new empty slot.
pub fn empty_slot() -> MirrorSlot {
    Arc::new(Mutex::new(None))
}

/// The slot's lock (a poisoned lock is taken over: the mirror's state is its own).
pub fn lock(slot: &MirrorSlot) -> MutexGuard<'_, Option<Box<dyn TableMirror>>> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// The XDP fast path's state: where its programs are attached, whether it answers, and its
/// per-CPU counters summed over the CPUs (`sb_xdp::Counter` labels, in its order).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XdpReport {
    /// `(port, mode)`: `native` or `generic` per port a program is attached to.
    pub attached: Vec<(String, String)>,
    /// Ports attached in generic mode because native attachment failed.
    pub generic_fallbacks: u64,
    /// Whether the programs answer from their maps (off after a failed table write: every
    /// frame then goes to the engine).
    pub enabled: bool,
    /// Table writes the maps refused (each turns the fast path off).
    pub write_errors: u64,
    /// The programs' counters: `(label, count)`.
    pub counters: Vec<(String, u64)>,
    /// The ports whose slow path is an AF_XDP socket (the others' goes up the kernel's path
    /// to the node's AF_PACKET socket).
    pub slow_path_af_xdp: Vec<String>,
}

impl XdpReport {
    /// The counter labelled `label` (0 if absent).
    pub fn counter(&self, label: &str) -> u64 {
        self.counters
            .iter()
            .find(|(l, _)| l == label)
            .map_or(0, |c| c.1)
    }

    /// As JSON for the counters file: `attached` as an object port -> mode, `counters` as an
    /// object label -> count.
    pub fn to_json(&self) -> serde_json::Value {
        let attached: serde_json::Map<String, serde_json::Value> = self
            .attached
            .iter()
            .map(|(p, m)| (p.clone(), m.clone().into()))
            .collect();
        let counters: serde_json::Map<String, serde_json::Value> = self
            .counters
            .iter()
            .map(|(l, c)| (l.clone(), (*c).into()))
            .collect();
        serde_json::json!({
            "attached": attached,
            "generic_fallbacks": self.generic_fallbacks,
            "enabled": self.enabled,
            "write_errors": self.write_errors,
            "counters": counters,
            "slow_path_af_xdp": self.slow_path_af_xdp,
        })
    }
}
