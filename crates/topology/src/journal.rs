//! The journal: an append-only text file in the state directory recording every object `up`
//! creates, written (and synced) *before* the object is created, so `down` can remove exactly what
//! exists even after `up` died halfway.
//!
//! One entry per line:
//!
//! ```text
//! dir-created /var/lib/scalebricks/sb the state directory was made by us
//! netns sb-node0                      about to create this namespace (it did not exist before)
//! netns-failed sb-node0               creating it failed: not ours, leave it
//! pid 12345 987654 forward-node0      a process we started: pid, start time (clock ticks), label
//! file cluster.json                   a file we wrote in the state directory
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::TopoError;

/// File name of the journal inside the state directory.
pub const JOURNAL_FILE: &str = "journal";

/// One journal entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The state directory did not exist and was created by `up`.
    DirCreated(PathBuf),
    /// A namespace `up` is creating (absent before).
    Netns(String),
    /// Creating that namespace failed; it is not ours.
    NetnsFailed(String),
    /// A process `up` started.
    Pid {
        /// Process id.
        pid: i32,
        /// Its start time in clock ticks since boot (field 22 of `/proc/PID/stat`), so a reused
        /// pid is never signalled.
        start: u64,
        /// What it is, for messages.
        label: String,
    },
    /// A file written in the state directory (relative name).
    File(String),
}

impl Entry {
    fn to_line(&self) -> String {
        match self {
            Entry::DirCreated(p) => format!("dir-created {}", p.display()),
            Entry::Netns(n) => format!("netns {n}"),
            Entry::NetnsFailed(n) => format!("netns-failed {n}"),
            Entry::Pid { pid, start, label } => format!("pid {pid} {start} {label}"),
            Entry::File(f) => format!("file {f}"),
        }
    }

    /// Parses one line; `None` for a line that is not a complete entry (a torn last write).
    pub fn parse(line: &str) -> Option<Entry> {
        let (kind, rest) = line.split_once(' ')?;
        let rest = rest.trim_end();
        if rest.is_empty() {
            return None;
        }
        match kind {
            "dir-created" => Some(Entry::DirCreated(PathBuf::from(rest))),
            "netns" => Some(Entry::Netns(rest.to_string())),
            "netns-failed" => Some(Entry::NetnsFailed(rest.to_string())),
            "file" => Some(Entry::File(rest.to_string())),
            "pid" => {
                let mut it = rest.splitn(3, ' ');
                let pid = it.next()?.parse().ok()?;
                let start = it.next()?.parse().ok()?;
                let label = it.next().unwrap_or("").to_string();
                Some(Entry::Pid { pid, start, label })
            }
            _ => None,
        }
    }
}

/// An open journal being appended to.
pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    /// Creates the journal in `dir`; fails if one already exists (the cluster is up).
    pub fn create(dir: &Path) -> Result<Journal, TopoError> {
        let path = dir.join(JOURNAL_FILE);
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    TopoError::AlreadyUp(dir.to_path_buf())
                } else {
                    TopoError::io(&path, e)
                }
            })?;
        Ok(Journal { file, path })
    }

    /// Opens the journal of a cluster that is up, to record more entries (a restarted node).
    pub fn open(dir: &Path) -> Result<Journal, TopoError> {
        let path = dir.join(JOURNAL_FILE);
        let file = OpenOptions::new().append(true).open(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                TopoError::NotUp(dir.to_path_buf())
            } else {
                TopoError::io(&path, e)
            }
        })?;
        Ok(Journal { file, path })
    }

    /// Appends one entry and syncs it to disk before returning.
    pub fn record(&mut self, e: &Entry) -> Result<(), TopoError> {
        let mut line = e.to_line();
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(|err| TopoError::io(&self.path, err))
    }
}

/// Reads every complete entry of the journal in `dir`, in order.
pub fn read(dir: &Path) -> Result<Vec<Entry>, TopoError> {
    let path = dir.join(JOURNAL_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            TopoError::NotUp(dir.to_path_buf())
        } else {
            TopoError::io(&path, e)
        }
    })?;
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(Entry::parse)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_lines() {
        let d = tempfile::tempdir().unwrap();
        let mut j = Journal::create(d.path()).unwrap();
        let entries = vec![
            Entry::DirCreated("/run/x y".into()),
            Entry::Netns("p-node0".into()),
            Entry::NetnsFailed("p-node1".into()),
            Entry::Pid {
                pid: 42,
                start: 7,
                label: "forward node0".into(),
            },
            Entry::File("cluster.json".into()),
        ];
        for e in &entries {
            j.record(e).unwrap();
        }
        assert!(matches!(
            Journal::create(d.path()),
            Err(TopoError::AlreadyUp(_))
        ));
        // A torn last line is ignored.
        std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join(JOURNAL_FILE))
            .unwrap()
            .write_all(b"pid 12")
            .unwrap();
        assert_eq!(read(d.path()).unwrap(), entries);
    }

    #[test]
    fn missing_journal_is_not_up() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(read(d.path()), Err(TopoError::NotUp(_))));
    }
}
