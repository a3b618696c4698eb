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
//! has. The bytes are the same as serde's (a test compares them).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::error::ProfileError;
use crate::model::Profile;
use crate::stacks::{Leak, Stacks};
use crate::Addr;

/// Large enough that a big profile is written in few system calls.
const BUFFER: usize = 1 << 20;

impl Profile {
    /// Writes compact JSON to `writer` (buffered here; pass it unbuffered).
    pub fn write_to(&self, writer: impl Write) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(BUFFER, writer);
        self.write_compact(&mut out)?;
        out.flush()
    }

    /// The compact JSON, as `serde_json::to_writer` would write it.
    fn write_compact(&self, out: &mut impl Write) -> io::Result<()> {
        fn part(out: &mut impl Write, key: &[u8], value: &impl Serialize) -> io::Result<()> {
            out.write_all(key)?;
            Ok(serde_json::to_writer(&mut *out, value)?)
        }
        part(out, b"{\"run\":", &self.run)?;
        part(out, b",\"config\":", &self.config)?;
        out.write_all(b",\"stacks\":")?;
        write_stacks(out, &self.stacks)?;
        part(out, b",\"sites\":", &self.sites)?;
        part(out, b",\"timeline\":", &self.timeline)?;
        part(out, b",\"scatter\":", &self.scatter)?;
        part(out, b",\"threads\":", &self.threads)?;
        part(out, b",\"memStats\":", &self.mem_stats)?;
        part(out, b",\"globals\":", &self.globals)?;
        out.write_all(b",\"leaks\":")?;
        write_leaks(out, &self.leaks)?;
        part(out, b",\"domains\":", &self.domains)?;
        if let Some(m) = &self.memtrail {
            part(out, b",\"memtrail\":", m)?;
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

/// `["0x1","0x2"]`: addresses are ASCII with nothing to escape.
fn write_addrs(out: &mut impl Write, addrs: &[Addr]) -> io::Result<()> {
    out.write_all(b"[")?;
    let mut buf = [0u8; 24];
    for (i, a) in addrs.iter().enumerate() {
        let text = a.format_bytes(&mut buf);
        let sep: &[u8] = if i == 0 { b"\"" } else { b",\"" };
        out.write_all(sep)?;
        out.write_all(text)?;
        out.write_all(b"\"")?;
    }
    out.write_all(b"]")
}

/// The start of the `i`th object of a list, whose first key is `stack`.
fn start_with_stack(out: &mut impl Write, i: usize, stack: &[Addr]) -> io::Result<()> {
    out.write_all(if i == 0 {
        b"{\"stack\":"
    } else {
        b",{\"stack\":"
    })?;
    write_addrs(out, stack)
}

/// `stacks`, field for field as `Stacks` and `StackStat` derive it.
fn write_stacks(out: &mut impl Write, stacks: &Stacks) -> io::Result<()> {
    out.write_all(b"{\"stats\":[")?;
    for (i, s) in stacks.stats.iter().enumerate() {
        start_with_stack(out, i, &s.stack)?;
        out.write_all(b",\"stackId\":")?;
        serde_json::to_writer(&mut *out, &s.stack_id)?;
        out.write_all(b",\"infos\":")?;
        serde_json::to_writer(&mut *out, &s.infos)?;
        out.write_all(b"}")?;
    }
    write!(out, "],\"count\":{}}}", stacks.count)
}

/// `leaks`, field for field as `Leak` derives it.
fn write_leaks(out: &mut impl Write, leaks: &[Leak]) -> io::Result<()> {
    out.write_all(b"[")?;
    for (i, l) in leaks.iter().enumerate() {
        start_with_stack(out, i, &l.stack)?;
        write!(out, ",\"count\":{},\"memory\":{}}}", l.count, l.memory)?;
    }
    out.write_all(b"]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{stack_mode, MemtrailExt, Run, StackInfos, StackStat};

    /// The hand-written parts write exactly what serde's derive writes.
    #[test]
    fn compact_writer_matches_serde() {
        let mut p = Profile::new(Run::new("memtrail-0.1.0", "a \"b\"", "./a\n"));
        for (i, frames) in [
            vec![],
            vec![Addr::native(0)],
            vec![
                Addr::native(0x7f00_1234),
                Addr::python(17),
                Addr::native(u64::MAX),
            ],
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
        for with_ext in [false, true] {
            if with_ext {
                p.memtrail = Some(MemtrailExt::new(stack_mode::DWARF, 64));
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
