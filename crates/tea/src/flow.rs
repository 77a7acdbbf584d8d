//! Flow control and failover (paper §5.3 and Figure 10), sans-IO: which server a read goes to,
//! how many reads each server has outstanding, and when a primary is taken as dead or
//! overloaded and when it is taken back. Time is an argument (`now`); the driver sends what
//! [`FlowControl::route`] and [`FlowControl::poll_probes`] name, and reports answers
//! ([`FlowControl::on_response`]) and the passing of time ([`FlowControl::poll_timeouts`]).
//!
//! # Rules
//! - A server has at most `max_outstanding` reads in flight (16 by default: the paper's NICs
//!   allowed 16 outstanding RDMA reads and broke their queue pair beyond).
//! - A read goes to the range's primary; if the primary is at its limit, or overloaded, or
//!   dead, it goes to the secondary; if that is not possible either, the read is not sent and
//!   the packet is dropped, counted by reason. (The paper's prototype dropped as soon as the
//!   primary was saturated; routing to the secondary is the improvement its §5.3 names.)
//! - A server is *dead* after `dead_after` reads in a row timed out (no answer within
//!   `timeout`). A dead server gets no reads; every `probe_interval` one probe read is sent to
//!   it, and the first answer to a probe (or to any read still counted outstanding) makes it
//!   *up* again: reads go back to it from then on.
//! - A server is *overloaded* when it has been saturated (at its limit) continuously for
//!   `overload_after`; saturation ends only when its outstanding count falls to half the limit
//!   (hysteresis). An overloaded primary's reads go to its secondary first (to itself only if
//!   the secondary is saturated) for `overload_hold`, then it is *up* again; if the load is
//!   still there it saturates and is overloaded again.
//!
//! With the defaults a dead primary is detected `timeout` (20 ms) after its last answered
//! read, and reads return to it within `probe_interval` (100 ms) of its recovery; both are
//! well inside the issue's one second.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::resolver::ServerId;

/// Limits and timers of [`FlowControl`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowParams {
    /// Reads in flight per server (16).
    pub max_outstanding: u32,
    /// A read not answered within this is lost (20 ms).
    pub timeout: Duration,
    /// Consecutive timeouts that make a server dead (3).
    pub dead_after: u32,
    /// Time between probes of a dead server (100 ms).
    pub probe_interval: Duration,
    /// Continuous saturation that makes a server overloaded (50 ms).
    pub overload_after: Duration,
    /// How long an overloaded server is avoided (500 ms).
    pub overload_hold: Duration,
}

impl Default for FlowParams {
    fn default() -> FlowParams {
        FlowParams {
            max_outstanding: 16,
            timeout: Duration::from_millis(20),
            dead_after: 3,
            probe_interval: Duration::from_millis(100),
            overload_after: Duration::from_millis(50),
            overload_hold: Duration::from_millis(500),
        }
    }
}

/// A server's state as the switch sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Answering; reads go to it.
    Up,
    /// Saturated for too long, since this time: its ranges' reads go to their secondaries.
    Overloaded(Instant),
    /// Not answering, since this time: no reads but probes.
    Dead(Instant),
}

/// Why a read was not sent (its packet dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DropReason {
    /// Primary and secondary both at their limit.
    #[error("primary and secondary both saturated")]
    BothSaturated,
    /// The primary at its limit (or overloaded and at its limit) and no live secondary.
    #[error("primary saturated, no live secondary")]
    SaturatedNoSecondary,
    /// Neither the primary nor the secondary is alive.
    #[error("no live server for the range")]
    NoLiveServer,
}

/// Where to send a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The server to send it to.
    pub server: ServerId,
    /// The request id to put on the wire; its answer goes to [`FlowControl::on_response`].
    pub token: u32,
    /// True if the read goes to the secondary.
    pub secondary: bool,
}

/// A read that got no answer in time: its packet is lost (the switch holds no copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// The read's request id.
    pub token: u32,
    /// The server it went to.
    pub server: ServerId,
    /// True for a probe (no packet behind it).
    pub probe: bool,
}

/// A probe read to send to a dead server (any small read of a region it holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The server.
    pub server: ServerId,
    /// The request id to put on the wire.
    pub token: u32,
}

/// Counters, by event and drop reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounters {
    /// Reads sent to the range's primary.
    pub to_primary: u64,
    /// Reads sent to the range's secondary.
    pub to_secondary: u64,
    /// Drops: both saturated.
    pub drop_both_saturated: u64,
    /// Drops: primary saturated, no live secondary.
    pub drop_saturated_no_secondary: u64,
    /// Drops: no live server.
    pub drop_no_live_server: u64,
    /// Answers to outstanding reads (probes included).
    pub responses: u64,
    /// Answers to reads already timed out or unknown.
    pub late_responses: u64,
    /// Reads (probes included) that timed out.
    pub timeouts: u64,
    /// Probes sent.
    pub probes: u64,
    /// Times a server was taken as dead.
    pub marked_dead: u64,
    /// Times a server was taken as overloaded.
    pub marked_overloaded: u64,
    /// Times a dead or overloaded server was taken back.
    pub recovered: u64,
}

#[derive(Debug, Clone)]
struct Server {
    outstanding: u32,
    timeouts_in_row: u32,
    /// The deadline of the latest-sent read this server answered: a read sent before it that
    /// times out is lost, but no sign that the server is dead now (it answered since).
    answered: Option<Instant>,
    health: Health,
    saturated_since: Option<Instant>,
    last_probe: Option<Instant>,
    probe_in_flight: bool,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    server: ServerId,
    deadline: Instant,
    probe: bool,
}

/// The switch's per-server read accounting and failover state.
#[derive(Debug, Clone)]
pub struct FlowControl {
    p: FlowParams,
    servers: Vec<Server>,
    in_flight: HashMap<u32, InFlight>,
    deadlines: VecDeque<(Instant, u32)>,
    next_token: u32,
    counters: FlowCounters,
}

impl FlowControl {
    /// State for servers `0..servers`, all up.
    pub fn new(servers: usize, p: FlowParams) -> FlowControl {
        let s = Server {
            outstanding: 0,
            timeouts_in_row: 0,
            answered: None,
            health: Health::Up,
            saturated_since: None,
            last_probe: None,
            probe_in_flight: false,
        };
        FlowControl {
            p: FlowParams {
                max_outstanding: p.max_outstanding.max(1),
                dead_after: p.dead_after.max(1),
                ..p
            },
            servers: vec![s; servers],
            in_flight: HashMap::new(),
            deadlines: VecDeque::new(),
            next_token: 0,
            counters: FlowCounters::default(),
        }
    }

    /// The counters.
    pub fn counters(&self) -> &FlowCounters {
        &self.counters
    }

    /// A server's health (`Up` for a server this state does not know).
    pub fn health(&self, s: ServerId) -> Health {
        self.servers
            .get(s as usize)
            .map_or(Health::Up, |x| x.health)
    }

    /// A server's reads in flight.
    pub fn outstanding(&self, s: ServerId) -> u32 {
        self.servers.get(s as usize).map_or(0, |x| x.outstanding)
    }

    /// The earliest deadline of a read in flight: when to call
    /// [`poll_timeouts`](Self::poll_timeouts) next.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines
            .iter()
            .find(|(_, t)| self.in_flight.contains_key(t))
            .map(|&(d, _)| d)
    }

    fn issue(&mut self, now: Instant, server: ServerId, probe: bool) -> u32 {
        let mut token = self.next_token;
        while self.in_flight.contains_key(&token) {
            token = token.wrapping_add(1);
        }
        self.next_token = token.wrapping_add(1);
        let deadline = now + self.p.timeout;
        self.in_flight.insert(
            token,
            InFlight {
                server,
                deadline,
                probe,
            },
        );
        self.deadlines.push_back((deadline, token));
        let s = &mut self.servers[server as usize];
        s.outstanding += 1;
        if s.outstanding >= self.p.max_outstanding && s.saturated_since.is_none() {
            s.saturated_since = Some(now);
        }
        token
    }

    /// Refreshes timed states (overload begins and ends) at `now`.
    fn refresh(&mut self, now: Instant, i: usize) {
        let p = self.p;
        let s = &mut self.servers[i];
        match s.health {
            Health::Up => {
                if let Some(t) = s.saturated_since {
                    if now.saturating_duration_since(t) >= p.overload_after {
                        s.health = Health::Overloaded(now);
                        s.saturated_since = None;
                        self.counters.marked_overloaded += 1;
                    }
                }
            }
            Health::Overloaded(t) if now.saturating_duration_since(t) >= p.overload_hold => {
                s.health = Health::Up;
                s.saturated_since = None;
                self.counters.recovered += 1;
            }
            _ => {}
        }
    }

    /// Chooses the server for a read of a range with this primary and secondary, and counts it
    /// outstanding there; or says why the packet must be dropped.
    pub fn route(
        &mut self,
        now: Instant,
        primary: ServerId,
        secondary: Option<ServerId>,
    ) -> Result<Route, DropReason> {
        let known = |s: ServerId| (s as usize) < self.servers.len();
        let secondary = secondary.filter(|&s| known(s) && s != primary);
        let mut order: [Option<(ServerId, bool)>; 2] = [
            known(primary).then_some((primary, false)),
            secondary.map(|s| (s, true)),
        ];
        for (s, _) in order.iter().flatten() {
            self.refresh(now, *s as usize);
        }
        if matches!(self.health(primary), Health::Overloaded(_)) {
            order.swap(0, 1);
        }
        let (mut live, mut saturated) = (0, 0);
        for (s, is_secondary) in order.into_iter().flatten() {
            let st = &self.servers[s as usize];
            if matches!(st.health, Health::Dead(_)) {
                continue;
            }
            live += 1;
            if st.outstanding >= self.p.max_outstanding {
                saturated += 1;
                continue;
            }
            let token = self.issue(now, s, false);
            if is_secondary {
                self.counters.to_secondary += 1;
            } else {
                self.counters.to_primary += 1;
            }
            return Ok(Route {
                server: s,
                token,
                secondary: is_secondary,
            });
        }
        let reason = match (live, saturated) {
            (0, _) => DropReason::NoLiveServer,
            (2, 2) => DropReason::BothSaturated,
            _ => DropReason::SaturatedNoSecondary,
        };
        match reason {
            DropReason::NoLiveServer => self.counters.drop_no_live_server += 1,
            DropReason::BothSaturated => self.counters.drop_both_saturated += 1,
            DropReason::SaturatedNoSecondary => self.counters.drop_saturated_no_secondary += 1,
        }
        Err(reason)
    }

    fn settle(&mut self, i: usize) {
        let half = self.p.max_outstanding / 2;
        let s = &mut self.servers[i];
        s.outstanding -= 1;
        if s.outstanding <= half {
            s.saturated_since = None;
        }
    }

    /// An answer with request id `token` arrived: the server it went to, or `None` for a late
    /// or unknown answer (its read was already counted lost; drop it).
    pub fn on_response(&mut self, now: Instant, token: u32) -> Option<ServerId> {
        let Some(f) = self.in_flight.remove(&token) else {
            self.counters.late_responses += 1;
            return None;
        };
        self.counters.responses += 1;
        let i = f.server as usize;
        self.settle(i);
        let s = &mut self.servers[i];
        s.timeouts_in_row = 0;
        s.answered = s.answered.max(Some(f.deadline));
        if f.probe {
            s.probe_in_flight = false;
        }
        if let Health::Dead(_) = s.health {
            s.health = Health::Up;
            self.counters.recovered += 1;
        }
        self.refresh(now, i);
        Some(f.server)
    }

    /// Expires reads whose deadline passed at `now`, appending them to `out`; marks servers
    /// dead after `dead_after` in a row.
    pub fn poll_timeouts(&mut self, now: Instant, out: &mut Vec<Expired>) {
        while let Some(&(deadline, token)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            let Some(f) = self
                .in_flight
                .get(&token)
                .copied()
                .filter(|f| f.deadline == deadline)
            else {
                continue;
            };
            self.in_flight.remove(&token);
            self.counters.timeouts += 1;
            let i = f.server as usize;
            self.settle(i);
            let dead_after = self.p.dead_after;
            let s = &mut self.servers[i];
            if f.probe {
                s.probe_in_flight = false;
            }
            // Only reads sent after the last one answered count: those sent before it (to a
            // server that was down then, and has answered since) say nothing of now.
            if s.answered.is_none_or(|a| f.deadline > a) {
                s.timeouts_in_row += 1;
            }
            if s.timeouts_in_row >= dead_after && !matches!(s.health, Health::Dead(_)) {
                s.health = Health::Dead(now);
                s.saturated_since = None;
                s.last_probe = Some(now);
                self.counters.marked_dead += 1;
            }
            out.push(Expired {
                token,
                server: f.server,
                probe: f.probe,
            });
        }
        for i in 0..self.servers.len() {
            self.refresh(now, i);
        }
    }

    /// Probes due at `now` (one per dead server every `probe_interval`), appended to `out`.
    pub fn poll_probes(&mut self, now: Instant, out: &mut Vec<Probe>) {
        for i in 0..self.servers.len() {
            let s = &self.servers[i];
            let due = s
                .last_probe
                .is_none_or(|t| now.saturating_duration_since(t) >= self.p.probe_interval);
            if matches!(s.health, Health::Dead(_)) && !s.probe_in_flight && due {
                let token = self.issue(now, i as ServerId, true);
                let s = &mut self.servers[i];
                s.probe_in_flight = true;
                s.last_probe = Some(now);
                self.counters.probes += 1;
                out.push(Probe {
                    server: i as ServerId,
                    token,
                });
            }
        }
    }
}
