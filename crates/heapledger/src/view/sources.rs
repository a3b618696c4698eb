//! The sources page's data: the files the profile's stacks name, with
//! what was allocated under each; and one file's text with, beside each
//! line, the allocations, bytes, bytes at the peak and bytes alive at
//! exit of the stacks that pass through it (each stack counted once per
//! line), and of those that allocate right there (the allocation site).
//! Only a file the profile names is read, and only a regular file of at
//! most `MAX_SOURCE` bytes.

use crate::profiles::Opened;
use anyhow::{anyhow, bail, Result};
use heapledger_analysis::summary::allocation_site;
use heapledger_profile::{Addr, StackInfos, UNKNOWN};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The largest source file shown.
const MAX_SOURCE: u64 = 4 << 20;

#[derive(Default, Clone, Copy)]
struct Sums {
    allocs: u64,
    bytes: u64,
    peak: u64,
    alive: u64,
}

impl Sums {
    fn add(&mut self, i: &StackInfos) {
        self.allocs += i.alloc.count;
        self.bytes = self.bytes.saturating_add(i.alloc.sum);
        self.peak = self.peak.saturating_add(i.global_peak.max(0) as u64);
        self.alive = self.alive.saturating_add(i.alive_req.max(0) as u64);
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!([self.allocs, self.bytes, self.peak, self.alive])
    }
}

/// A file's number in [`each_stack_lines`]: `names[id]` is its name;
/// 0 is [`UNKNOWN`].
type FileId = u32;

/// Each stack's frames as (file, line), resolved once per address, each
/// file named by its number among the names given with it (those seen so
/// far): a profile of 400 000 stacks 46 deep has 18 M frames and about 200
/// files, and a name copied and hashed per frame took most of the sources
/// page's time.
fn each_stack_lines(
    o: &Opened,
    mut f: impl FnMut(&[Addr], &[(FileId, Option<u32>)], &[String], &StackInfos),
) -> Result<()> {
    let p = &o.profile;
    let mut names: Vec<String> = vec![UNKNOWN.to_owned()];
    let mut ids: HashMap<String, FileId> = HashMap::from([(UNKNOWN.to_owned(), 0)]);
    let mut known: HashMap<Addr, (FileId, Option<u32>), foldhash::fast::RandomState> =
        HashMap::default();
    let mut lines = Vec::new();
    o.each_stack(|stack, infos| {
        if infos.alloc.count == 0 {
            return;
        }
        lines.clear();
        for &a in stack {
            let at = *known.entry(a).or_insert_with(|| match p.resolve_addr(a) {
                Some(s) => {
                    let id = *ids.entry(s.file.to_owned()).or_insert_with(|| {
                        names.push(s.file.to_owned());
                        (names.len() - 1) as FileId
                    });
                    (id, s.line)
                }
                None => (0, None),
            });
            lines.push(at);
        }
        f(stack, &lines, &names, infos);
    })
}

/// The files named by the profile's stacks, heaviest first: per file, the
/// sums of the stacks that pass through it.
pub fn files(o: &Opened) -> Result<serde_json::Value> {
    // Per file: its sums (None while no stack passed through it), and the
    // last stack that added to them.
    let mut by_file: Vec<(Option<Sums>, u64)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut stack = 0u64;
    each_stack_lines(o, |_, lines, all, infos| {
        stack += 1;
        if by_file.len() < all.len() {
            by_file.resize(all.len(), (None, 0));
            names.extend_from_slice(&all[names.len()..]);
        }
        for &(file, _) in lines {
            let (sums, last) = &mut by_file[file as usize];
            if file != 0 && *last != stack {
                *last = stack;
                sums.get_or_insert_with(Sums::default).add(infos);
            }
        }
    })?;
    let mut rows: Vec<(String, Sums)> = names
        .into_iter()
        .zip(by_file)
        .filter_map(|(name, (sums, _))| Some((name, sums?)))
        .collect();
    rows.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
    Ok(serde_json::json!(rows
        .iter()
        .map(|(file, s)| serde_json::json!({
            "file": file,
            "sums": s.json(),
            "readable": std::fs::metadata(file).is_ok_and(|m| m.is_file()),
        }))
        .collect::<Vec<_>>()))
}

/// One file's lines and, per line, the sums of the stacks through it and
/// of those allocating on it: `{"file", "lines": [...], "through": {line:
/// sums}, "here": {line: sums}}`, sums as [allocations, bytes, bytes at
/// peak, bytes alive at exit].
pub fn source(o: &Opened, file: &str) -> Result<serde_json::Value> {
    let named = o
        .profile
        .sites
        .instr
        .values()
        .any(|e| o.profile.sites.string(e.file) == file);
    if !named || file == UNKNOWN {
        bail!("the profile names no file `{file}`");
    }
    let p = &o.profile;
    let mut through: BTreeMap<u32, Sums> = BTreeMap::new();
    let mut here: BTreeMap<u32, Sums> = BTreeMap::new();
    let mut seen = HashSet::new();
    // The file's number, once a stack names it; the names looked at so far.
    let (mut id, mut looked) = (None, 0);
    each_stack_lines(o, |stack, lines, names, infos| {
        if id.is_none() && looked < names.len() {
            id = names[looked..]
                .iter()
                .position(|n| n == file)
                .map(|i| (looked + i) as FileId);
            looked = names.len();
        }
        seen.clear();
        for &(f, line) in lines {
            if let (true, Some(l)) = (Some(f) == id, line) {
                if seen.insert(l) {
                    through.entry(l).or_default().add(infos);
                }
            }
        }
        if let Some(site) = allocation_site(p, stack) {
            if let Some((f, l)) = site.location.rsplit_once(':') {
                if f == file {
                    if let Ok(l) = l.parse::<u32>() {
                        here.entry(l).or_default().add(infos);
                    }
                }
            }
        }
    })?;
    let text = match std::fs::metadata(file) {
        Ok(m) if m.is_file() && m.len() <= MAX_SOURCE => std::fs::read(file)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| anyhow!("cannot read `{file}`: {e}"))?,
        Ok(m) if m.is_file() => bail!("`{file}` is larger than {MAX_SOURCE} bytes"),
        _ => String::new(),
    };
    let sums = |m: &BTreeMap<u32, Sums>| -> serde_json::Map<String, serde_json::Value> {
        m.iter().map(|(l, s)| (l.to_string(), s.json())).collect()
    };
    Ok(serde_json::json!({
        "file": file,
        "found": !text.is_empty(),
        "lines": text.lines().collect::<Vec<_>>(),
        "through": sums(&through),
        "here": sums(&here),
    }))
}

/// `where`: the source of routine `function` as the flame graph and the
/// call tree name it: the file most of its addresses (inlined or not)
/// lie in, and the first line of it they name; `{"file": null}` where
/// none has a file.
pub fn where_is(o: &Opened, function: &str) -> serde_json::Value {
    let p = &o.profile;
    let direct = p.sites.instr.values().map(|e| (e.function, e.file, e.line));
    let inlined = p
        .heapledger
        .iter()
        .flat_map(|x| x.inlined.values())
        .flatten()
        .map(|f| (f.function, f.file, f.line));
    // Per file: its lowest line, and how many addresses name it.
    let mut files: HashMap<&str, (u32, usize)> = HashMap::new();
    for (f, file, line) in direct.chain(inlined) {
        let file = p.sites.string(file);
        if p.sites.string(f) != function || file == UNKNOWN || file.is_empty() {
            continue;
        }
        let e = files.entry(file).or_insert((u32::MAX, 0));
        e.0 = e.0.min(line.unwrap_or(u32::MAX));
        e.1 += 1;
    }
    let best = files
        .into_iter()
        .max_by_key(|(f, (_, n))| (*n, std::cmp::Reverse(*f)));
    match best {
        Some((file, (line, _))) => serde_json::json!({
            "file": file,
            "line": (line != u32::MAX).then_some(line),
        }),
        None => serde_json::json!({ "file": null }),
    }
}
