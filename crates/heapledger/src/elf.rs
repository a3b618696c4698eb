//! What `run` asks of the executable it starts, read from its ELF headers
//! by hand, a few hundred bytes at a time (never the whole file: large
//! binaries are hundreds of MB): whether it is statically linked, which
//! libraries it names, which sections it has. The symbolizer's parsers
//! (blazesym, gimli) read whole sections for other ends; these are three
//! fields and two tables. 64-bit little-endian ELF only (x86-64, the
//! recorder's one target); anything else answers as "nothing known".

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// An ELF file open for reading parts of.
struct Elf {
    file: File,
    header: Vec<u8>,
}

/// The little-endian number of `n` bytes at `at` in `b`.
fn num(b: &[u8], at: usize, n: usize) -> Option<u64> {
    let b = b.get(at..at.checked_add(n)?)?;
    Some(b.iter().rev().fold(0u64, |v, &x| (v << 8) | x as u64))
}

/// Most bytes read of one table (program or section headers, the dynamic
/// section, a string table): far more than any real binary's.
const MAX_TABLE: u64 = 1 << 20;

impl Elf {
    fn open(path: &Path) -> Option<Elf> {
        let mut e = Elf {
            file: File::open(path).ok()?,
            header: Vec::new(),
        };
        e.header = e.read_at(0, 64)?;
        (e.header.get(..6) == Some(&[0x7f, b'E', b'L', b'F', 2, 1][..])).then_some(e)
    }

    /// `n` bytes at offset `at` (capped at `MAX_TABLE`), all or None.
    fn read_at(&mut self, at: u64, n: u64) -> Option<Vec<u8>> {
        let n = n.min(MAX_TABLE);
        let mut b = Vec::new();
        self.file.seek(SeekFrom::Start(at)).ok()?;
        (&mut self.file).take(n).read_to_end(&mut b).ok()?;
        (b.len() as u64 == n).then_some(b)
    }

    /// The program headers: (type, offset, vaddr, filesz) each.
    fn segments(&mut self) -> Option<Vec<(u64, u64, u64, u64)>> {
        let h = &self.header;
        let (off, size, n) = (num(h, 32, 8)?, num(h, 54, 2)?, num(h, 56, 2)?);
        let t = self.read_at(off, size.checked_mul(n)?)?;
        (0..n as usize)
            .map(|i| {
                let at = i * size as usize;
                Some((
                    num(&t, at, 4)?,
                    num(&t, at + 8, 8)?,
                    num(&t, at + 16, 8)?,
                    num(&t, at + 32, 8)?,
                ))
            })
            .collect()
    }

    /// The NUL-terminated string at `at` in `table`.
    fn string(table: &[u8], at: u64) -> Option<String> {
        let rest = table.get(usize::try_from(at).ok()?..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    }
}

const PT_LOAD: u64 = 1;
const PT_DYNAMIC: u64 = 2;
const PT_INTERP: u64 = 3;

/// Whether `path` is an ELF executable with no program interpreter
/// (`PT_INTERP`), i.e. statically linked.
pub fn without_interpreter(path: &Path) -> bool {
    let segments = Elf::open(path).and_then(|mut e| e.segments());
    segments.is_some_and(|s| !s.is_empty() && s.iter().all(|&(t, ..)| t != PT_INTERP))
}

/// The shared libraries `path` names itself (`DT_NEEDED`), in order; empty
/// where it names none or is no ELF file.
pub fn needed(path: &Path) -> Vec<String> {
    let found = (|| {
        let mut e = Elf::open(path)?;
        let segments = e.segments()?;
        let &(_, offset, _, size) = segments.iter().find(|s| s.0 == PT_DYNAMIC)?;
        let d = e.read_at(offset, size)?;
        const DT_NEEDED: u64 = 1;
        const DT_STRTAB: u64 = 5;
        const DT_STRSZ: u64 = 10;
        let (mut names, mut strtab, mut strsz) = (Vec::new(), None, None);
        for entry in d.chunks_exact(16) {
            match (num(entry, 0, 8)?, num(entry, 8, 8)?) {
                (0, _) => break,
                (DT_NEEDED, v) => names.push(v),
                (DT_STRTAB, v) => strtab = Some(v),
                (DT_STRSZ, v) => strsz = Some(v),
                _ => {}
            }
        }
        // The string table's address, in the file.
        let strtab = strtab?;
        let at = segments
            .iter()
            .find(|&&(t, _, vaddr, size)| t == PT_LOAD && strtab >= vaddr && strtab - vaddr < size)
            .map(|&(_, offset, vaddr, _)| strtab - vaddr + offset)?;
        let strings = e.read_at(at, strsz?)?;
        Some(
            names
                .into_iter()
                .filter_map(|n| Elf::string(&strings, n))
                .collect(),
        )
    })();
    found.unwrap_or_default()
}

/// A section: its name, type, offset in the file and size.
struct Section {
    name: String,
    kind: u64,
    offset: u64,
    size: u64,
}

impl Elf {
    /// The section headers, named from the section names' table.
    fn sections(&mut self) -> Option<Vec<Section>> {
        let h = &self.header;
        let (off, size, n, names_at) = (
            num(h, 40, 8)?,
            num(h, 58, 2)?,
            num(h, 60, 2)?,
            num(h, 62, 2)?,
        );
        let t = self.read_at(off, size.checked_mul(n)?)?;
        let header = |i: u64| -> Option<(u64, u64, u64, u64)> {
            let at = usize::try_from(i.checked_mul(size)?).ok()?;
            Some((
                num(&t, at, 4)?,
                num(&t, at + 4, 4)?,
                num(&t, at + 24, 8)?,
                num(&t, at + 32, 8)?,
            ))
        };
        let (_, _, names_off, names_size) = header(names_at)?;
        let names = self.read_at(names_off, names_size)?;
        Some(
            (0..n)
                .filter_map(|i| {
                    let (name, kind, offset, size) = header(i)?;
                    Some(Section {
                        name: Elf::string(&names, name)?,
                        kind,
                        offset,
                        size,
                    })
                })
                .collect(),
        )
    }
}

/// The names of `path`'s sections; empty where it has no section headers
/// or is no ELF file.
pub fn sections(path: &Path) -> Vec<String> {
    let found = Elf::open(path).and_then(|mut e| e.sections());
    found
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.name)
        .collect()
}

/// The first of `names` that `path`'s symbol names hold (its `.dynstr` or
/// `.strtab`: a function it defines or calls), read a MiB at a time.
pub fn names_any<'a>(path: &Path, names: &[&'a str]) -> Option<&'a str> {
    let mut e = Elf::open(path)?;
    let sections = e.sections()?;
    // Each name as it stands in a string table: between two NULs.
    let needles: Vec<Vec<u8>> = names
        .iter()
        .map(|n| [&[0u8][..], n.as_bytes(), &[0]].concat())
        .collect();
    let finders: Vec<memchr::memmem::Finder> =
        needles.iter().map(memchr::memmem::Finder::new).collect();
    let longest = needles.iter().map(Vec::len).max().unwrap_or(0) as u64;
    const SHT_STRTAB: u64 = 3;
    for sec in &sections {
        let (offset, len) = (sec.offset, sec.size);
        if sec.kind != SHT_STRTAB || (sec.name != ".dynstr" && sec.name != ".strtab") {
            continue;
        }
        // A window a MiB long, each overlapping the last by a name.
        let step = (1 << 20) - longest;
        let mut at = 0;
        while at < len {
            let chunk = e.read_at(offset + at, (len - at).min(1 << 20))?;
            for (finder, name) in finders.iter().zip(names) {
                if finder.find(&chunk).is_some() {
                    return Some(name);
                }
            }
            at += step;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_test_binary_is_read() {
        let me = std::env::current_exe().unwrap();
        assert!(!without_interpreter(&me));
        assert!(
            needed(&me).iter().any(|n| n.starts_with("libc.so")),
            "{:?}",
            needed(&me)
        );
        let s = sections(&me);
        assert!(s.iter().any(|n| n == ".text"), "{s:?}");
        assert!(s.iter().any(|n| n == ".dynamic"), "{s:?}");
        assert_eq!(
            names_any(&me, &["no_such_name_x", "malloc"]),
            Some("malloc")
        );
        assert_eq!(names_any(&me, &["no_such_name_x"]), None);
    }

    #[test]
    fn anything_else_is_nothing_known() {
        for p in ["/etc/passwd", "/nonexistent", "/dev/null", "/"] {
            let p = Path::new(p);
            assert!(!without_interpreter(p));
            assert!(needed(p).is_empty());
            assert!(sections(p).is_empty());
            assert_eq!(names_any(p, &["malloc"]), None);
        }
    }
}
