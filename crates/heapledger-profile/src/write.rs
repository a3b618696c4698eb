//! Writing a profile: JSON with MALT's key order, through a large buffer.
//!
//! Key order comes from the field order of the model's structs. Compact JSON
//! is the default (smaller, and several times faster to write and read than
//! MALT's indented output); [`Profile::write_pretty_to`] indents like MALT.
//!
//! The compact writer writes the top level, `stacks` and `leaks` itself and
//! every other part through serde: a large profile holds millions of stack
//! frames, and serde_json spends most of its time on them scanning each
//! address string for characters to escape, which a `0x` hex string never
//! has. The bytes are the same as serde's (a test compares them), for a
//! profile whose frames all have sites: a frame without one gets one as it
//! is written ([`Unnamed`]), since MALT's reader needs every frame there.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::error::ProfileError;
use crate::model::Profile;
use crate::stacks::{Leak, MinMaxSum, StackInfos, StackStat, Stacks};
use crate::Addr;

/// The frames of a profile's stacks that `sites.instr` does not name
/// (code in no binary: a JIT's without a perf map, a frame the unwinder
/// read from a damaged stack). MALT's reader looks every frame of the
/// stacks up in `sites.instr` without checking (`Extractor::
/// buildTranslation`) and crashed on a Node program's profile for one
/// missing: each gets an entry, named as every output names such a frame
/// (`0x7f… (??)`, [`Profile::frame_name`]).
pub(crate) struct Unnamed<'a> {
    known: &'a crate::sites::Sites,
    /// The last stack seen: stacks come in the order of their tree, and a
    /// stack's outer frames, shared with the one before, were looked up
    /// then.
    last: Vec<Addr>,
    missing: indexmap::IndexSet<Addr>,
}

impl<'a> Unnamed<'a> {
    fn new(known: &'a crate::sites::Sites) -> Unnamed<'a> {
        Unnamed {
            known,
            last: Vec::new(),
            missing: indexmap::IndexSet::new(),
        }
    }

    /// Notes the frames of `stack` (innermost first) that have no entry.
    fn see(&mut self, stack: &[Addr]) {
        let shared = crate::stacks::shared_outer_frames(stack, &self.last);
        for a in &stack[..stack.len() - shared] {
            if !self.known.instr.contains_key(a) {
                self.missing.insert(*a);
            }
        }
        self.last.clear();
        self.last.extend_from_slice(stack);
    }

    /// The sites with an entry for each frame seen without one; None
    /// where every frame has one.
    fn completed(&self, profile: &Profile) -> Option<crate::sites::Sites> {
        if self.missing.is_empty() {
            return None;
        }
        let mut sites = self.known.clone();
        for &a in &self.missing {
            let name = profile.frame_name(a).into_owned();
            let function = crate::strings::StringId(sites.strings.len() as u32);
            sites.strings.push(name);
            sites.instr.insert(
                a,
                crate::sites::InstrEntry {
                    file: crate::strings::StringId::UNKNOWN,
                    function,
                    line: None,
                    binary: crate::strings::StringId::UNKNOWN,
                },
            );
        }
        Some(sites)
    }
}

/// Large enough that a big profile is written in few system calls.
const BUFFER: usize = 1 << 20;

impl Profile {
    /// Writes compact JSON to `writer` (buffered here; pass it unbuffered).
    pub fn write_to(&self, writer: impl Write) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(BUFFER, writer);
        self.write_compact(&mut out)?;
        out.flush()
    }

    /// Writes compact JSON to `writer` as [`Profile::write_to`] does, its
    /// stacks from `each` (which calls its argument with each stack's
    /// frames and counters) instead of `stacks.stats`, each with the id
    /// of its place (`0x1`, `0x2`...), so that a profile read stack by
    /// stack is written without holding its stacks: the profile of 512 000
    /// stacks that a MALT file of 566 MB holds took 608 MB whole.
    pub fn write_streamed_to(
        &self,
        writer: impl Write,
        each: impl FnOnce(&mut dyn FnMut(&[Addr], &StackInfos) -> io::Result<()>) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(BUFFER, writer);
        self.write_parts(&mut out, |out: &mut BufWriter<_>, unnamed: &mut Unnamed| {
            out.write_all(b"{\"stats\":[")?;
            let (mut buf, mut text, mut i) = (Vec::with_capacity(4096), [0u8; 24], 0usize);
            each(&mut |stack, infos| {
                unnamed.see(stack);
                buf.clear();
                let id = Addr::native(i as u64 + 1).format_into(&mut text);
                stat_json(&mut buf, i, stack, id, infos)?;
                i += 1;
                out.write_all(&buf)
            })?;
            write!(out, "],\"count\":{}}}", self.stacks.count)
        })?;
        out.flush()
    }

    /// Gives every frame of the stacks, threads and leaks an entry in
    /// `sites.instr`, as the writers do in what they write ([`Unnamed`]):
    /// what a profile reads back as once written.
    pub fn name_every_frame(&mut self) {
        let sites = {
            let mut u = Unnamed::new(&self.sites);
            for s in &self.stacks.stats {
                u.see(&s.stack);
            }
            for t in &self.threads {
                u.see(&t.stack_mem.stack);
            }
            for l in &self.leaks {
                u.see(&l.stack);
            }
            u.completed(self)
        };
        if let Some(sites) = sites {
            self.sites = sites;
        }
    }

    /// The compact JSON, as `serde_json::to_writer` would write it.
    fn write_compact<W: Write>(&self, out: &mut W) -> io::Result<()> {
        self.write_parts(out, |out: &mut W, unnamed: &mut Unnamed| {
            for s in &self.stacks.stats {
                unnamed.see(&s.stack);
            }
            write_stacks(out, &self.stacks)
        })
    }

    /// The compact JSON, its `stacks` written by `stacks`, which shows
    /// [`Unnamed`] each stack's frames.
    fn write_parts<W: Write>(
        &self,
        out: &mut W,
        stacks: impl FnOnce(&mut W, &mut Unnamed) -> io::Result<()>,
    ) -> io::Result<()> {
        fn part(out: &mut impl Write, key: &[u8], value: &impl Serialize) -> io::Result<()> {
            out.write_all(key)?;
            Ok(serde_json::to_writer(&mut *out, value)?)
        }
        part(out, b"{\"run\":", &self.run)?;
        part(out, b",\"config\":", &self.config)?;
        out.write_all(b",\"stacks\":")?;
        let mut unnamed = Unnamed::new(&self.sites);
        stacks(out, &mut unnamed)?;
        for t in &self.threads {
            unnamed.see(&t.stack_mem.stack);
        }
        for l in &self.leaks {
            unnamed.see(&l.stack);
        }
        match unnamed.completed(self) {
            Some(sites) => part(out, b",\"sites\":", &sites)?,
            None => part(out, b",\"sites\":", &self.sites)?,
        }
        part(out, b",\"timeline\":", &self.timeline)?;
        part(out, b",\"scatter\":", &self.scatter)?;
        part(out, b",\"threads\":", &self.threads)?;
        part(out, b",\"memStats\":", &self.mem_stats)?;
        part(out, b",\"globals\":", &self.globals)?;
        out.write_all(b",\"leaks\":")?;
        write_leaks(out, &self.leaks)?;
        part(out, b",\"domains\":", &self.domains)?;
        if let Some(m) = &self.heapledger {
            part(out, b",\"heapledger\":", m)?;
        }
        out.write_all(b"}")
    }

    /// Writes JSON indented by one space per level, as MALT does.
    pub fn write_pretty_to(&self, writer: impl Write) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(BUFFER, writer);
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
        self.serialize(&mut serializer)?;
        out.flush()
    }

    /// Writes compact JSON to `path`, through a temporary file renamed at the
    /// end, so that a recorder killed while writing never leaves a
    /// half-written profile under the final name.
    pub fn write_to_path(&self, path: impl AsRef<Path>) -> Result<(), ProfileError> {
        let path = path.as_ref();
        let err = |source| ProfileError::Write {
            path: path.to_owned(),
            source,
        };
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = Path::new(&tmp_name);
        let result = File::create(tmp)
            .and_then(|file| self.write_to(file))
            .and_then(|()| std::fs::rename(tmp, path));
        if let Err(source) = result {
            let _ = std::fs::remove_file(tmp);
            return Err(err(source));
        }
        Ok(())
    }
}

/// `["0x1","0x2"]` into `buf`: addresses are ASCII with nothing to escape.
fn addrs_json(buf: &mut Vec<u8>, addrs: &[Addr]) {
    buf.push(b'[');
    let mut text = [0u8; 24];
    for (i, a) in addrs.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.push(b'"');
        buf.extend_from_slice(a.format_bytes(&mut text));
        buf.push(b'"');
    }
    buf.push(b']');
}

/// The start of the `i`th object of a list, whose first key is `stack`,
/// into `buf`.
fn start_with_stack(buf: &mut Vec<u8>, i: usize, stack: &[Addr]) {
    buf.extend_from_slice(if i == 0 {
        b"{\"stack\":"
    } else {
        b",{\"stack\":"
    });
    addrs_json(buf, stack);
}

/// A JSON string into `buf`: as is where it needs no escapes (stack ids
/// are hex numbers), else through serde.
fn str_json(buf: &mut Vec<u8>, s: &str) -> io::Result<()> {
    if s.bytes().all(|b| b.is_ascii_alphanumeric()) {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
        Ok(())
    } else {
        Ok(serde_json::to_writer(&mut *buf, s)?)
    }
}

/// `"key":value` for the fixed keys of `StackInfos`: serde escapes every
/// key of every stack (31 of them), the largest part of writing a big
/// profile after the addresses.
struct Fields<'a> {
    buf: &'a mut Vec<u8>,
    num: itoa::Buffer,
}

impl Fields<'_> {
    fn int(&mut self, key: &[u8], v: impl itoa::Integer) {
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(self.num.format(v).as_bytes());
    }

    fn mms(&mut self, key: &[u8], m: &MinMaxSum) {
        self.buf.extend_from_slice(key);
        self.int(b"{\"count\":", m.count);
        self.int(b",\"min\":", m.min);
        self.int(b",\"max\":", m.max);
        self.int(b",\"sum\":", m.sum);
        self.buf.push(b'}');
    }
}

/// `StackInfos` as its derive writes it, into `buf`.
fn infos_json(buf: &mut Vec<u8>, i: &StackInfos) {
    let mut f = Fields {
        buf,
        num: itoa::Buffer::new(),
    };
    f.int(b"{\"countZeros\":", i.count_zeros);
    f.int(b",\"maxAliveReq\":", i.max_alive_req);
    f.int(b",\"aliveReq\":", i.alive_req);
    f.mms(b",\"alloc\":", &i.alloc);
    f.mms(b",\"free\":", &i.free);
    f.mms(b",\"mmap\":", &i.mmap);
    f.mms(b",\"munmap\":", &i.munmap);
    f.mms(b",\"lifetime\":", &i.lifetime);
    f.int(b",\"globalPeak\":", i.global_peak);
    f.int(b",\"reallocCount\":", i.realloc_count);
    f.int(b",\"reallocSumDelta\":", i.realloc_sum_delta);
    if i.temporary != 0 {
        f.int(b",\"temporary\":", i.temporary);
    }
    f.buf.push(b'}');
}

/// The `i`th element of `stats` into `buf`.
fn stack_json(buf: &mut Vec<u8>, i: usize, s: &StackStat) -> io::Result<()> {
    stat_json(buf, i, &s.stack, &s.stack_id, &s.infos)
}

/// The `i`th element of `stats`, given by its fields, into `buf`.
fn stat_json(
    buf: &mut Vec<u8>,
    i: usize,
    stack: &[Addr],
    stack_id: &str,
    infos: &StackInfos,
) -> io::Result<()> {
    start_with_stack(buf, i, stack);
    buf.extend_from_slice(b",\"stackId\":");
    str_json(buf, stack_id)?;
    buf.extend_from_slice(b",\"infos\":");
    infos_json(buf, infos);
    buf.push(b'}');
    Ok(())
}

/// Frames from which a second thread writes the last part of `stats` into
/// memory while this one writes the first part out: a profile's frames are
/// most of its text (Python's 1.3 M took 37 ms of the 43 its 28 MB took;
/// 24 ms in all with the second thread).
const SPLIT_FRAMES: usize = 200_000;
/// The share of the frames the second thread takes, in percent: less than
/// half, as its buffer is fresh memory, whose pages it takes on the way.
const SPLIT_SHARE: usize = 45;

/// `stacks`, field for field as `Stacks` and `StackStat` derive it.
fn write_stacks(out: &mut impl Write, stacks: &Stacks) -> io::Result<()> {
    out.write_all(b"{\"stats\":[")?;
    let stats = &stacks.stats[..];
    let frames: usize = stats.iter().map(|s| s.stack.len()).sum();
    let mut split = stats.len();
    if frames >= SPLIT_FRAMES {
        let mut first = 0;
        split = stats
            .iter()
            .position(|s| {
                first += s.stack.len();
                first > frames * (100 - SPLIT_SHARE) / 100
            })
            .map_or(stats.len(), |i| i + 1);
    }
    let (head, tail) = stats.split_at(split);
    // Each stack of the first part is put together in `buf`, then written
    // at once.
    let write_head = |out: &mut dyn Write| -> io::Result<()> {
        let mut buf = Vec::with_capacity(4096);
        for (i, s) in head.iter().enumerate() {
            buf.clear();
            stack_json(&mut buf, i, s)?;
            out.write_all(&buf)?;
        }
        Ok(())
    };
    let render_tail = || -> io::Result<Vec<u8>> {
        let tail_frames: usize = tail.iter().map(|s| s.stack.len()).sum();
        let mut buf = Vec::with_capacity(tail_frames * 18 + tail.len() * 512);
        for (i, s) in tail.iter().enumerate() {
            stack_json(&mut buf, split + i, s)?;
        }
        Ok(buf)
    };
    if tail.is_empty() {
        write_head(out)?;
    } else {
        std::thread::scope(|scope| -> io::Result<()> {
            let helper = std::thread::Builder::new().spawn_scoped(scope, render_tail);
            write_head(out)?;
            let rest = match helper {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("writing the stacks failed")))?,
                // No thread to be had: this one does it.
                Err(_) => render_tail()?,
            };
            out.write_all(&rest)
        })?;
    }
    write!(out, "],\"count\":{}}}", stacks.count)
}

/// `leaks`, field for field as `Leak` derives it.
fn write_leaks(out: &mut impl Write, leaks: &[Leak]) -> io::Result<()> {
    out.write_all(b"[")?;
    let mut buf = Vec::with_capacity(4096);
    for (i, l) in leaks.iter().enumerate() {
        buf.clear();
        start_with_stack(&mut buf, i, &l.stack);
        let mut f = Fields {
            buf: &mut buf,
            num: itoa::Buffer::new(),
        };
        f.int(b",\"count\":", l.count);
        f.int(b",\"memory\":", l.memory);
        buf.push(b'}');
        out.write_all(&buf)?;
    }
    out.write_all(b"]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{stack_mode, HeapledgerExt, Run, StackInfos, StackStat};

    /// A frame that no entry of `sites.instr` names gets one, named by its
    /// address, which reads back as the same name; MALT's reader looks
    /// every frame up there.
    #[test]
    fn a_frame_without_a_site_gets_one() {
        let mut p = Profile::new(Run::new("heapledger-0.1.0", "a", "./a"));
        let (named, unnamed) = (Addr::native(0x401000), Addr::native(0x7f00_1234));
        let main = p.sites.strings.len();
        p.sites.strings.push("main".into());
        p.sites.instr.insert(
            named,
            crate::sites::InstrEntry {
                file: crate::strings::StringId::UNKNOWN,
                function: crate::strings::StringId(main as u32),
                line: None,
                binary: crate::strings::StringId::UNKNOWN,
            },
        );
        p.stacks.push(StackStat::new(
            "0x1",
            vec![unnamed, named],
            StackInfos::default(),
        ));
        p.leaks.push(Leak {
            stack: vec![Addr::native(0x7f00_5678)],
            count: 1,
            memory: 8,
        });
        let mut json = Vec::new();
        p.write_to(&mut json).unwrap();
        let back = Profile::from_reader(&json[..]).unwrap();
        for a in [unnamed, Addr::native(0x7f00_5678)] {
            assert!(back.sites.instr.contains_key(&a), "{a}");
            assert_eq!(back.frame_name(a), p.frame_name(a));
            assert_eq!(back.frame_name(a), format!("{a} (??)"));
        }
        assert_eq!(back.frame_name(named), "main");
    }

    /// A profile large enough that a second thread writes the last stacks
    /// is written as serde writes it too.
    #[test]
    fn the_split_writer_matches_serde() {
        let mut p = Profile::new(Run::new("heapledger-0.1.0", "big", "./big"));
        for i in 0..700u64 {
            let frames = (0..(i % 7) * 100)
                .map(|f| Addr::native(0x7f00_0000 + f * 3 + i))
                .collect();
            let mut infos = StackInfos::default();
            infos.alloc.add(i);
            p.stacks
                .push(StackStat::new(format!("0x{i:x}"), frames, infos));
        }
        let frames: usize = p.stacks.stats.iter().map(|s| s.stack.len()).sum();
        assert!(frames >= SPLIT_FRAMES, "{frames}");
        p.name_every_frame();
        let mut ours = Vec::new();
        p.write_to(&mut ours).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(&p).unwrap()
        );
    }

    /// The hand-written parts write exactly what serde's derive writes.
    /// Stacks written as they come (`write_streamed_to`) give the file
    /// the whole profile gives, their ids those of their places; an error
    /// of the writer or the reader stops it.
    #[test]
    fn a_streamed_writer_matches_the_whole_one() {
        let mut p = Profile::new(Run::new("heapledger-0.1.0", "a", "./a"));
        let mut text = [0u8; 24];
        for i in 0..5u64 {
            let mut infos = StackInfos::default();
            infos.alloc.add(i * 10 + 1);
            let frames = (0..i).map(|k| Addr::native(0x1000 + k)).collect();
            let id = Addr::native(i + 1).format_into(&mut text).to_owned();
            p.stacks.push(StackStat::new(id, frames, infos));
        }
        let mut whole = Vec::new();
        p.write_to(&mut whole).unwrap();
        let mut head = p.clone();
        let stats = std::mem::take(&mut head.stacks.stats);
        let mut streamed = Vec::new();
        head.write_streamed_to(&mut streamed, |write| {
            for s in &stats {
                write(&s.stack, &s.infos)?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(
            String::from_utf8(streamed).unwrap(),
            String::from_utf8(whole).unwrap()
        );
        let failed = head.write_streamed_to(Vec::new(), |_| Err(io::Error::other("cut")));
        assert_eq!(failed.unwrap_err().to_string(), "cut");
    }

    #[test]
    fn compact_writer_matches_serde() {
        let mut p = Profile::new(Run::new("heapledger-0.1.0", "a \"b\"", "./a\n"));
        for (i, frames) in [
            vec![],
            vec![Addr::native(0)],
            vec![
                Addr::native(0x7f00_1234),
                Addr::python(17),
                Addr::native(u64::MAX),
            ],
            // The longest text an address has, and the shortest of each kind.
            ["PYPTR-0xffffffffffffffff", "PYPTR-0x0", "PY-0x0", "0x1"]
                .iter()
                .map(|t| t.parse().unwrap())
                .collect(),
        ]
        .into_iter()
        .enumerate()
        {
            let mut infos = StackInfos::default();
            infos.alloc.add(i as u64 * 10);
            infos.alive_req = -(i as i64);
            p.stacks
                .push(StackStat::new(format!("0x{i}\"\\"), frames, infos));
        }
        // Every field of the hand-written infos, at its extremes.
        let mms = |k: u64| MinMaxSum {
            count: k,
            min: k + 1,
            max: u64::MAX - k,
            sum: u64::MAX,
        };
        let extreme = StackInfos {
            count_zeros: i64::MIN,
            max_alive_req: i64::MAX,
            alive_req: -1,
            alloc: mms(1),
            free: mms(2),
            mmap: mms(3),
            munmap: mms(4),
            lifetime: mms(5),
            global_peak: -42,
            realloc_count: u64::MAX,
            realloc_sum_delta: i64::MIN + 1,
            temporary: u64::MAX - 7,
        };
        for id in ["0x7f1a2b3c", "", "a b", "é"] {
            p.stacks
                .push(StackStat::new(id, vec![Addr::native(1)], extreme.clone()));
        }
        p.leaks.push(Leak {
            stack: vec![Addr::native(0x401000)],
            count: 3,
            memory: 96,
        });
        p.leaks.push(Leak {
            stack: vec![],
            count: 0,
            memory: 0,
        });
        p.name_every_frame();
        for with_ext in [false, true] {
            if with_ext {
                p.heapledger = Some(HeapledgerExt::new(stack_mode::DWARF, 64));
            }
            let mut ours = Vec::new();
            p.write_to(&mut ours).unwrap();
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(&p).unwrap()
            );
        }
        // And with no stacks or leaks at all.
        let empty = Profile::new(Run::new("t", "e", "c"));
        let mut ours = Vec::new();
        empty.write_to(&mut ours).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(&empty).unwrap()
        );
    }
}
