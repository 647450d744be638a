//! Who issued a request: the FUSE request names the calling thread; the
//! engine's issuer is its process (thread group), and a caller is critical
//! when the operator said so (by process, command name or cgroup) or when
//! it runs in the real-time I/O class (`ionice -c1`), so applications need
//! no new interface; or, with automatic identification, when it serves
//! clients and waits on fsyncs (`found_automatically`). Answers are kept for a second per thread, so a
//! request costs no `/proc` read in the common case.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long an answer about a thread is kept.
const KEEP: Duration = Duration::from_secs(1);
/// Threads remembered at most (the table is cleared when full).
const THREADS_MAX: usize = 4096;
/// `IOPRIO_CLASS_RT`, the class in the top bits of an I/O priority.
const IOPRIO_CLASS_RT: i32 = 1;
const IOPRIO_CLASS_SHIFT: i32 = 13;
const IOPRIO_WHO_PROCESS: i32 = 1;
/// Automatic identification: how recent a process's fsync must be.
const AUTO_FSYNC_WITHIN: Duration = Duration::from_secs(10);

/// A request's issuer, as the engine's admission reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The process (thread group id); 0: unknown (a kernel thread).
    pub issuer: u32,
    /// Critical by the operator's rules or the real-time I/O class (a
    /// critical hint by process is the engine's, `critical-issuer`).
    pub critical: bool,
}

/// The operator's rules for critical callers (besides the engine's hints).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CriticalRules {
    /// Command names (`/proc/PID/comm`); `*` at the end matches a prefix.
    pub commands: Vec<String>,
    /// cgroup paths (v2, `/proc/PID/cgroup`), each covering its subtree.
    pub cgroups: Vec<String>,
    /// The real-time I/O class makes a caller critical.
    pub realtime_io: bool,
    /// Automatic identification: a process that serves clients (a
    /// connected socket) and waited on an fsync of the mount lately.
    pub auto: bool,
}

impl CriticalRules {
    fn matches_command(&self, comm: &str) -> bool {
        self.commands.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => comm.starts_with(prefix),
            None => comm == p,
        })
    }

    fn matches_cgroup(&self, cgroup: &str) -> bool {
        self.cgroups.iter().any(|c| {
            let c = c.trim_end_matches('/');
            cgroup == c || cgroup.starts_with(&format!("{c}/")) || c.is_empty()
        })
    }
}

/// Callers by thread, with the rules that classify them.
#[derive(Default)]
pub struct Callers {
    rules: RwLock<CriticalRules>,
    known: Mutex<HashMap<u32, (Instant, Caller)>>,
    /// Processes' last fsync on the mount (automatic identification).
    fsyncs: Mutex<HashMap<u32, Instant>>,
    /// Processes automatic identification found critical (for its
    /// precision and recall against the operator's hints).
    found: Mutex<std::collections::BTreeSet<u32>>,
}

impl Callers {
    pub fn new(rules: CriticalRules) -> Callers {
        Callers {
            rules: RwLock::new(rules),
            ..Callers::default()
        }
    }

    /// New rules, in force for every request from now on.
    pub fn set_rules(&self, rules: CriticalRules) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = rules;
        self.known.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    pub fn rules(&self) -> CriticalRules {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The caller of a request from thread `tid` (0: the kernel's own).
    pub fn of(&self, tid: u32) -> Caller {
        if tid == 0 {
            return Caller::default();
        }
        let now = Instant::now();
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, caller)) = known.get(&tid) {
            if now.duration_since(*at) < KEEP {
                return *caller;
            }
        }
        drop(known);
        let caller = self.classify(tid);
        known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= THREADS_MAX {
            known.clear();
        }
        known.insert(tid, (now, caller));
        caller
    }

    /// Threads seen within `within` whose caller is critical by the rules
    /// or by `is_critical_issuer` (the engine's hints and inheritance).
    pub fn critical_threads(
        &self,
        within: Duration,
        is_critical_issuer: impl Fn(u32) -> bool,
    ) -> Vec<u32> {
        let known: Vec<(u32, Instant, Caller)> = self
            .known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(tid, (at, caller))| (*tid, *at, *caller))
            .collect();
        known
            .into_iter()
            .filter(|(_, at, c)| {
                at.elapsed() < within
                    && c.issuer != 0
                    && (c.critical || is_critical_issuer(c.issuer))
            })
            .map(|(tid, _, _)| tid)
            .collect()
    }

    fn classify(&self, tid: u32) -> Caller {
        let issuer = thread_group(tid).unwrap_or(tid);
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        let critical = (rules.realtime_io && io_class(tid) == Some(IOPRIO_CLASS_RT))
            || (!rules.commands.is_empty()
                && command(issuer).is_some_and(|c| rules.matches_command(&c)))
            || (!rules.cgroups.is_empty()
                && cgroup(issuer).is_some_and(|c| rules.matches_cgroup(&c)))
            || (rules.auto && self.found_automatically(issuer));
        Caller { issuer, critical }
    }

    /// `issuer` waited on an fsync of the mount (automatic identification).
    pub fn note_fsync(&self, issuer: u32) {
        if issuer == 0 {
            return;
        }
        let mut fsyncs = self.fsyncs.lock().unwrap_or_else(|e| e.into_inner());
        if fsyncs.len() >= THREADS_MAX {
            fsyncs.clear();
        }
        fsyncs.insert(issuer, Instant::now());
    }

    /// Automatic identification (the paper's future work, `docs/mount.md`):
    /// `issuer` waited on an fsync of the mount within `AUTO_FSYNC_WITHIN`
    /// and serves clients (holds a connected stream socket), so its fsyncs
    /// are likely followed by a reply a client waits for.
    fn found_automatically(&self, issuer: u32) -> bool {
        let recent = self
            .fsyncs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&issuer)
            .is_some_and(|at| at.elapsed() < AUTO_FSYNC_WITHIN);
        let found = recent && serves_clients(issuer);
        if found {
            self.found
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(issuer);
        }
        found
    }

    /// The processes automatic identification found critical so far.
    pub fn found(&self) -> Vec<u32> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found.iter().copied().collect()
    }
}

/// The control socket's `critical-caller` for a mount: `by` is `pid` (the
/// engine's hint for that process: it must exist), `command`, `cgroup`
/// (it must exist under /sys/fs/cgroup) or `realtime-io`; answers the rules
/// in force.
pub fn critical_callers_hook(
    callers: std::sync::Arc<Callers>,
    operator: wcache_io::ops::Operator,
) -> wcache_io::ops::CriticalCallersHook {
    Box::new(move |by, value, critical| {
        let mut rules = callers.rules();
        let edit = |list: &mut Vec<String>| {
            list.retain(|v| v != value);
            if critical {
                list.push(value.to_string());
            }
        };
        match by {
            "pid" => {
                let pid: u32 = value
                    .parse()
                    .map_err(|_| format!("pid {value:?}: not a process number"))?;
                let process = thread_group(pid).ok_or(format!("no process {pid}"))?;
                operator
                    .set_critical_issuer(process, critical)
                    .map_err(|e| e.to_string())?;
            }
            "command" if value.is_empty() => return Err("an empty command name".into()),
            "command" => edit(&mut rules.commands),
            "cgroup" => {
                let path = value.trim_start_matches('/');
                if critical && !Path::new("/sys/fs/cgroup").join(path).is_dir() {
                    return Err(format!("no cgroup {value} (under /sys/fs/cgroup)"));
                }
                edit(&mut rules.cgroups)
            }
            "realtime-io" => rules.realtime_io = critical,
            "auto" => rules.auto = critical,
            other => {
                return Err(format!(
                    "unknown key {other:?}; valid: pid, command, cgroup, realtime-io, auto"
                ))
            }
        }
        callers.set_rules(rules.clone());
        Ok(serde_json::json!({
            "commands": rules.commands,
            "cgroups": rules.cgroups,
            "realtime_io": rules.realtime_io,
            "auto": rules.auto,
            "found_automatically": callers.found(),
        }))
    })
}

/// The socket inodes process `pid` holds open.
fn socket_inodes(pid: u32) -> std::collections::HashSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Default::default();
    };
    fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_str()?;
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Whether process `pid` serves clients: one of its sockets is a
/// connected Unix stream socket, or an established TCP connection (in the
/// tables of its network namespace, `/proc/PID/net`).
pub fn serves_clients(pid: u32) -> bool {
    let mine = socket_inodes(pid);
    if mine.is_empty() {
        return false;
    }
    let table =
        |name: &str| std::fs::read_to_string(format!("/proc/{pid}/net/{name}")).unwrap_or_default();
    let held = |field: &str| field.parse().is_ok_and(|i: u64| mine.contains(&i));
    // Num RefCount Protocol Flags Type St Inode [Path]: stream (0001), connected (03).
    let unix = table("unix").lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 7 && f[4] == "0001" && f[5] == "03" && held(f[6])
    });
    // sl local remote st ... inode (the tenth field): established (01).
    let tcp = ["tcp", "tcp6"].iter().any(|name| {
        table(name).lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 10 && f[3] == "01" && held(f[9])
        })
    });
    unix || tcp
}

/// The thread group (process) of thread `tid`.
pub fn thread_group(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A process's command name.
pub fn command(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

/// A process's cgroup (v2: the `0::` line).
pub fn cgroup(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// The I/O scheduling class of thread `tid` (`ioprio_get(2)`).
pub fn io_class(tid: u32) -> Option<i32> {
    // SAFETY: ioprio_get takes two integers and returns one.
    let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, tid as i32) };
    (prio >= 0).then_some((prio as i32) >> IOPRIO_CLASS_SHIFT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_thread_is_its_process_and_not_critical_by_default() {
        let pid = std::process::id();
        // SAFETY: gettid has no arguments.
        let tid = unsafe { libc::gettid() } as u32;
        let callers = Callers::new(CriticalRules::default());
        let c = callers.of(tid);
        assert_eq!(c.issuer, pid);
        assert!(!c.critical);
        assert_eq!(callers.of(0), Caller::default());
    }

    #[test]
    fn a_command_pattern_and_a_cgroup_make_a_caller_critical() {
        let pid = std::process::id();
        let comm = command(pid).unwrap();
        let prefix = format!("{}*", &comm[..comm.len().min(3)]);
        let callers = Callers::new(CriticalRules {
            commands: vec![prefix],
            ..CriticalRules::default()
        });
        assert!(callers.of(pid).critical);
        callers.set_rules(CriticalRules {
            commands: vec!["no-such-command".into()],
            ..CriticalRules::default()
        });
        assert!(!callers.of(pid).critical);
        let own = cgroup(pid).unwrap();
        callers.set_rules(CriticalRules {
            cgroups: vec![own.clone()],
            ..CriticalRules::default()
        });
        assert!(callers.of(pid).critical, "cgroup {own}");
        callers.set_rules(CriticalRules {
            cgroups: vec!["/no/such/cgroup".into()],
            ..CriticalRules::default()
        });
        assert!(!callers.of(pid).critical);
    }

    #[test]
    fn the_real_time_io_class_makes_a_caller_critical() {
        // SAFETY: gettid has no arguments.
        let tid = unsafe { libc::gettid() };
        let rt = (IOPRIO_CLASS_RT << IOPRIO_CLASS_SHIFT) | 4;
        // SAFETY: ioprio_set on this thread; needs CAP_SYS_ADMIN (root).
        let set = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, rt) };
        assert_eq!(
            set,
            0,
            "ioprio_set (the tests run as root): {}",
            std::io::Error::last_os_error()
        );
        let callers = Callers::new(CriticalRules {
            realtime_io: true,
            ..CriticalRules::default()
        });
        assert!(callers.of(tid as u32).critical);
        let be = (2 << IOPRIO_CLASS_SHIFT) | 4;
        // SAFETY: as above.
        unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, be) };
        callers.set_rules(callers.rules());
        assert!(!callers.of(tid as u32).critical);
    }

    #[test]
    fn automatic_identification_wants_a_served_client_and_a_recent_fsync() {
        let pid = std::process::id();
        let sleeper = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(!serves_clients(sleeper.id()), "sleep holds no socket");
        let (_a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(serves_clients(pid), "a connected Unix stream socket");
        let callers = Callers::new(CriticalRules {
            auto: true,
            ..CriticalRules::default()
        });
        assert!(!callers.of(pid).critical, "no fsync yet");
        callers.note_fsync(pid);
        callers.set_rules(callers.rules());
        assert!(callers.of(pid).critical);
        assert_eq!(callers.found(), vec![pid]);
        let mut sleeper = sleeper;
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }
}
