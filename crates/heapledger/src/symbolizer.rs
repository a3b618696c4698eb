//! Symbolization off the critical path of `heapledger run`.
//!
//! Reading a binary's debug information (decompressing its sections, parsing
//! its line tables) is most of the cost of turning a dump into a profile, and
//! for a large library it is paid even when a handful of its addresses are
//! looked up: about 60 ms for Python's libpython. heapledger waits for the
//! program anyway, so a thread does that work while the program runs. It
//! looks at the program's executable mappings in `/proc/PID/maps` every few
//! milliseconds (then less and less often) and symbolizes the addresses of
//! the stacks the recorder published since its last look (`crate::live`),
//! which parses what those lookups need and nothing more. Where the stacks
//! cannot be read, it parses each new binary ahead instead ("warming": a few
//! lookups spread over its code), which is wasted work where they can: the
//! Python workload under `--sample-every` ran 12% over the plain program
//! with warming beside the live lookups and 2% without. When the program has ended, the same thread
//! decodes and converts the dumps with that symbolizer (blazesym's cannot
//! move between threads), which by then has most addresses done: after an
//! exact Python run of 16 000 stacks, the lookup left after exit went from
//! about 60 ms to 7. It also takes ahead the memory that decoding and
//! converting will need (`crate::prefault`), which is why the decoding
//! happens on this thread too.

use crate::convert::{self, ProcessEnd};
use crate::live::LiveStacks;
use crate::prefault::Prefault;
use heapledger_profile::Profile;
use heapledger_symbols::MappedModule;
use heapledger_symbols::Symbols;
use heapledger_wire::Dump;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::time::Duration;

/// How often the program's mappings are looked at while it runs: soon after
/// it starts (the loader maps its libraries within milliseconds), then less
/// and less often (reading the maps of a process with thousands of mappings
/// costs milliseconds, and takes its mapping lock).
const POLL_FIRST: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(640);

/// Offsets looked up in each binary while warming: enough to parse the
/// sections and indexes a later lookup needs, spread over its code.
const WARM_LOOKUPS: u64 = 16;

/// Processes to convert, each with how it ended.
type Job = Vec<(Work, ProcessEnd)>;

/// A process to convert: its dump, or its raw data, decoded when its turn
/// comes.
pub(crate) enum Work {
    Ready(Box<Dump>),
    Later(crate::dumps::Pending),
}

/// A process's profile, with its executable's name and its pid.
pub(crate) struct Made {
    pub profile: Profile,
    pub exe: String,
    pub pid: u32,
}

/// Work for the symbolizing thread, once the program has ended.
type Task = Box<dyn FnOnce(&Symbols) + Send>;

pub struct Converter {
    tasks: Sender<Task>,
}

impl Converter {
    /// Starts warming up on the binaries that process `pid` maps.
    pub fn start(pid: u32) -> Converter {
        let (tasks, rx) = channel::<Task>();
        // Not joined: when the converter is dropped, the thread frees the
        // parsed debug information (tens of milliseconds for a large
        // library), or is stopped by heapledger's exit.
        std::thread::spawn(move || {
            let symbols = Symbols::new();
            let mut warmed = HashSet::new();
            let mut globals_read = HashSet::new();
            let mut live = Live {
                // HEAPLEDGER_LIVE=0: do not read the program (what a machine
                // that forbids it gets), for testing that path.
                failed: std::env::var_os("HEAPLEDGER_LIVE").is_some_and(|v| v == "0"),
                ..Live::default()
            };
            let mut prefault = Prefault::default();
            let mut poll = POLL_FIRST;
            // While the program runs: look at it every `poll`.
            let first = loop {
                match rx.recv_timeout(poll) {
                    Ok(task) => break task,
                    Err(RecvTimeoutError::Timeout) => {
                        if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
                            live.symbolize_new(&symbols, pid, &maps);
                            // Reading the stacks parses what their lookups
                            // need; where it cannot be done, each binary is
                            // parsed ahead instead.
                            if !live.available() {
                                warm(&symbols, &maps, &mut warmed);
                            }
                            read_globals(&maps, &mut globals_read);
                            if let Some((stacks, frames)) = live.read_so_far() {
                                prefault.ensure(Prefault::estimate(stacks, frames));
                            }
                        }
                        // The processes it started: their binaries parsed
                        // and their variables read now, not after the run
                        // (a build's compilers load libraries of 100 000
                        // symbols, each parsed once for all of them).
                        for child in descendants(pid) {
                            if let Ok(maps) = std::fs::read_to_string(format!("/proc/{child}/maps"))
                            {
                                warm(&symbols, &maps, &mut warmed);
                                read_globals(&maps, &mut globals_read);
                            }
                        }
                        poll = (poll * 2).min(POLL_MAX);
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            };
            // Then what `call` hands over, until the converter is dropped.
            first(&symbols);
            while let Ok(task) = rx.recv() {
                task(&symbols);
            }
        });
        Converter { tasks }
    }

    /// Runs `f` on the symbolizing thread (whose malloc arena holds the
    /// memory taken ahead); its result comes with [`Reply::wait`].
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Symbols) -> R + Send + 'static,
    ) -> Reply<R> {
        let (tx, rx) = channel();
        let task: Task = Box::new(move |s| {
            let _ = tx.send(f(s));
        });
        // A thread that is gone drops the task, and `wait` says so.
        let _ = self.tasks.send(task);
        Reply(rx)
    }

    /// Converts the processes, in order, into profiles (`compact`: their
    /// stacks left compact, `Profile::compact`, for the profile store),
    /// each sent on `out` as soon as it is made (None for one whose raw
    /// data could not be read, said on stderr), its dump decoded just
    /// before and freed just after: the caller writes one while the next is
    /// made, and a build's hundreds of processes are held one at a time
    /// (all their dumps and profiles at once were 0.7 MB a process on a
    /// build of 59 files). Stops early where the receiver is gone (a write
    /// failed).
    pub(crate) fn convert_each(
        &self,
        job: Job,
        compact: bool,
        out: SyncSender<Option<Made>>,
    ) -> Reply<()> {
        self.call(move |symbols| {
            // The variables of the decoded processes' binaries are read on
            // a thread of their own while the stacks are symbolized (the
            // others' were read while they ran).
            let mut paths: Vec<String> = job
                .iter()
                .filter_map(|(w, _)| match w {
                    Work::Ready(d) => Some(&**d),
                    Work::Later(_) => None,
                })
                .flat_map(convert::global_paths)
                .map(str::to_owned)
                .collect();
            paths.sort_unstable();
            paths.dedup();
            std::thread::scope(|scope| {
                scope.spawn(move || {
                    for path in &paths {
                        convert::globals_of(path);
                    }
                });
                for (w, end) in job {
                    let d = match w {
                        Work::Ready(d) => Some(*d),
                        Work::Later(p) => match p.load() {
                            Ok(l) => l.dump,
                            Err(e) => {
                                say!("heapledger: skipping {}: {e}", p.path().display());
                                None
                            }
                        },
                    };
                    let made = d.map(|mut d| {
                        let profile = match compact {
                            true => convert::to_compact_profile(&mut d, &end, symbols),
                            false => convert::to_profile(&mut d, &end, symbols),
                        };
                        Made {
                            profile,
                            exe: crate::dumps::exe_name(&d),
                            pid: d.pid,
                        }
                    });
                    if out.send(made).is_err() {
                        break;
                    }
                }
            })
        })
    }

    /// Drops `t` on the symbolizing thread, off the caller's path: freeing a
    /// large dump takes a few milliseconds (and heapledger's exit may come
    /// first, which frees it all at once).
    pub fn drop_there<T: Send + 'static>(&self, t: T) {
        let _ = self.tasks.send(Box::new(move |_| drop(t)));
    }
}

/// What a task of the symbolizing thread returns, once it has run.
pub struct Reply<R>(Receiver<R>);

impl<R> Reply<R> {
    pub fn wait(self) -> anyhow::Result<R> {
        self.0
            .recv()
            .map_err(|_| anyhow::anyhow!("internal error: the symbolizing thread failed"))
    }
}

/// Symbolizing the program's stacks while it runs (see `crate::live`).
#[derive(Default)]
struct Live {
    reader: Option<LiveStacks>,
    /// Reading failed: not tried again.
    failed: bool,
    /// The registry symbol's address in the recorder's file, once looked up.
    symbol: Option<Option<u64>>,
    /// Build ids of the binaries seen, by path.
    build_ids: HashMap<String, Option<Vec<u8>>>,
}

impl Live {
    /// Stacks and frames read from the program so far, if it can be read.
    fn read_so_far(&self) -> Option<(u64, u64)> {
        self.reader.as_ref().map(LiveStacks::read_so_far)
    }

    /// Whether the program's stacks can be read while it runs (not known to
    /// be impossible: the recorder may not be relocated yet).
    fn available(&self) -> bool {
        !self.failed && self.symbol != Some(None)
    }

    /// Looks up the addresses of the stacks the recorder published since the
    /// last call, so that building the profile finds them done.
    fn symbolize_new(&mut self, symbols: &Symbols, pid: u32, maps: &str) {
        let name = crate::preload::PRELOAD_NAME;
        if self.failed {
            return;
        }
        // A new image (the program exec'd) has a new table.
        if !self
            .reader
            .as_ref()
            .is_some_and(|r| r.same_image(maps, name))
        {
            let Some(path) = crate::maps::parse(maps).find(|m| m.path.ends_with(name)) else {
                self.reader = None;
                return;
            };
            let symbol = *self.symbol.get_or_insert_with(|| {
                Symbols::symbol_address(Path::new(path.path), heapledger_wire::REGISTRY_SYMBOL)
            });
            self.reader = symbol.and_then(|s| LiveStacks::locate(pid, maps, name, s));
        }
        let Some(reader) = &mut self.reader else {
            return;
        };
        let Some(addrs) = reader.new_addresses() else {
            self.reader = None;
            self.failed = true;
            return;
        };
        if addrs.is_empty() {
            return;
        }
        // The program's executable mappings, with their build ids as the
        // recorder reads them, so that the results are found again under the
        // dump's modules.
        let modules: Vec<MappedModule> = crate::maps::parse(maps)
            .filter(|m| m.executable() && m.path.starts_with('/') && !m.path.ends_with(name))
            .map(|m| {
                let path = m.path;
                let build_id = self
                    .build_ids
                    .entry(path.to_owned())
                    .or_insert_with(|| Symbols::build_id(path.as_ref()))
                    .clone();
                MappedModule {
                    path: path.into(),
                    start: m.start,
                    end: m.end,
                    file_offset: m.offset,
                    build_id,
                }
            })
            .collect();
        symbols.symbolize(&modules, &addrs);
    }
}

/// The executable mappings in `maps` of binaries not in `seen`, which
/// takes them. heapledger's own recorder is left out: it never shows in a
/// stack, and its debug information is the largest of a small program's.
fn new_binaries<'a>(
    maps: &'a str,
    seen: &'a mut HashSet<PathBuf>,
) -> impl Iterator<Item = crate::maps::MapsLine<'a>> + 'a {
    crate::maps::parse(maps).filter(move |m| {
        m.executable()
            && m.path.starts_with('/')
            && !m.path.ends_with(crate::preload::PRELOAD_NAME)
            && seen.insert(PathBuf::from(m.path))
    })
}

/// Reads the global variables of each binary the program maps (MALT's
/// `globals`), once each, into the cache the conversion takes them from
/// (`globals_of`): walking a large library's DWARF for them is tens of
/// milliseconds (libpython's: 60), which after the program's end was most
/// of a short Python run's conversion.
fn read_globals(maps: &str, read: &mut HashSet<PathBuf>) {
    for m in new_binaries(maps, read) {
        convert::globals_of(m.path);
    }
}

/// Processes looked at below the program's, at most.
const MAX_DESCENDANTS: usize = 256;

/// The processes below `pid`: its children, theirs, and so on (at most
/// `MAX_DESCENDANTS`), as `/proc` lists them now.
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in text.split_ascii_whitespace().filter_map(|c| c.parse().ok()) {
                if out.len() == MAX_DESCENDANTS {
                    return out;
                }
                out.push(child);
                todo.push(child);
            }
        }
    }
    out
}

/// Parses the binaries of the executable mappings in `maps` not seen before.
fn warm(symbols: &Symbols, maps: &str, warmed: &mut HashSet<PathBuf>) {
    for m in new_binaries(maps, warmed) {
        let len = m.end.saturating_sub(m.start);
        let offsets: Vec<u64> = (0..WARM_LOOKUPS)
            .map(|i| m.offset + len * i / WARM_LOOKUPS)
            .collect();
        symbols.warm(m.path.as_ref(), &offsets);
    }
}

#[cfg(test)]
mod tests {
    use super::descendants;
    use std::process::{Command, Stdio};

    /// A child, and the child it starts, are both found below this process.
    #[test]
    fn descendants_are_children_and_theirs() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        let found = descendants(std::process::id());
        let _ = Command::new("kill").arg(grandchild.to_string()).status();
        let _ = child.wait();
        assert!(found.contains(&child.id()), "{found:?}");
        assert!(found.contains(&grandchild), "{found:?}");
    }
}
