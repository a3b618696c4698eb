//! `heapledger leaks`: the blocks still allocated at exit, in SoHook's
//! leak report layout (seed 002): the totals of allocations, frees and
//! current leaks, then each leak with its pointer, size, library and
//! symbolized backtrace; grouped by stack, or one entry per block
//! (`--each`). Suppressions in LeakSanitizer's format (`leak:PATTERN`
//! lines) take leaks out; the C/C++ runtime's own blocks are taken out by
//! a built-in list (`--print-suppressions` shows it).

use crate::profiles::Opened;
use anyhow::{bail, Context, Result};
use heapledger_analysis::summary::{allocation_site, site_of};
use heapledger_profile::{runtime, Addr, Leak, LeakBlock, Profile};
use std::fmt::Write as _;
use std::path::Path;

/// What the report shows.
pub struct LeakOptions {
    /// One entry per block instead of one per stack.
    pub each: bool,
    /// Frames shown per backtrace (0: all).
    pub frames: usize,
    /// Entries shown (0: all).
    pub top: usize,
    /// Keep the C/C++ runtime's own blocks.
    pub no_builtin: bool,
}

/// A LeakSanitizer suppression: `leak:PATTERN`, where the pattern is
/// found in a frame's function, source file or module name (`*` matches
/// anything, `^` anchors it at the start, `$` at the end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suppression {
    pub pattern: String,
    /// Where it came from, for the report (`FILE:LINE`).
    pub origin: String,
}

/// Reads LeakSanitizer suppression files: `leak:PATTERN` lines, `#`
/// comments and blank lines; anything else is refused in one line naming
/// it.
pub fn read_suppressions(files: &[impl AsRef<Path>]) -> Result<Vec<Suppression>> {
    let mut out = Vec::new();
    for file in files {
        let file = file.as_ref();
        let text = crate::profiles::read_small_text(file, 1 << 20)
            .with_context(|| format!("suppressions `{}`", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("{}:{}", file.display(), n + 1);
            match line.split_once(':') {
                Some(("leak", pattern)) if !pattern.trim().is_empty() => out.push(Suppression {
                    pattern: pattern.trim().to_owned(),
                    origin: at,
                }),
                _ => bail!(
                    "{at}: `{}` is not a `leak:PATTERN` suppression",
                    line.chars().take(60).collect::<String>()
                ),
            }
        }
    }
    Ok(out)
}

/// LeakSanitizer's template match: the pattern's pieces between `*`s
/// found in order in `text`; `^` at its start anchors the first piece at
/// the start of `text`, `$` at its end the last piece at its end.
pub fn pattern_matches(pattern: &str, text: &str) -> bool {
    if text.is_empty() {
        return false;
    }
    let (anchored_start, p) = match pattern.strip_prefix('^') {
        Some(p) => (true, p),
        None => (false, pattern),
    };
    let (anchored_end, p) = match p.strip_suffix('$') {
        Some(p) => (true, p),
        None => (false, p),
    };
    let pieces: Vec<&str> = p.split('*').collect();
    let mut rest = text;
    for (i, piece) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        if piece.is_empty() {
            continue;
        }
        let found = if last && anchored_end {
            // The last piece: at the end (and after what came before).
            rest.ends_with(piece).then(|| rest.len() - piece.len())
        } else {
            rest.find(piece)
        };
        let Some(at) = found else { return false };
        if i == 0 && anchored_start && at != 0 {
            return false;
        }
        rest = &rest[at + piece.len()..];
    }
    // (With `$`, the last piece was found at the end, or was empty: `*$`.)
    true
}

/// The suppression that takes out a stack, if any: checked against each
/// frame's function (and the functions inlined there), source file and
/// module.
fn suppressed_by<'a>(
    p: &Profile,
    stack: &[Addr],
    sups: &'a [Suppression],
) -> Option<&'a Suppression> {
    if sups.is_empty() {
        return None;
    }
    for &addr in stack {
        let site = p.resolve_addr(addr);
        let mut texts: Vec<String> = vec![p.frame_name(addr).into_owned()];
        if let Some(s) = site {
            texts.push(s.file.to_owned());
            texts.push(s.binary.to_owned());
            texts.extend(p.inline_chain(addr).iter().map(|f| f.function.to_owned()));
        }
        texts.push(p.module_name(addr, site).to_owned());
        for sup in sups {
            if texts.iter().any(|t| pattern_matches(&sup.pattern, t)) {
                return Some(sup);
            }
        }
    }
    None
}

/// The library that asked for a leak's blocks: that of its innermost
/// frame outside the C/C++ runtime's libraries (a `strdup` called by the
/// program is the program's), else that of its allocation site.
fn library_of(p: &Profile, stack: &[Addr]) -> String {
    for &addr in stack {
        let site = p.resolve_addr(addr);
        let module = p.module_name(addr, site);
        let path = site.map_or(module, |s| s.binary);
        if module != heapledger_profile::UNKNOWN && !runtime::is_runtime_library(path) {
            return module.to_owned();
        }
    }
    allocation_site(p, stack).map_or_else(|| "??".to_owned(), |s| s.library)
}

/// `--print-suppressions`: the built-in list, in LeakSanitizer's format.
pub fn builtin_suppressions() -> String {
    let mut out = String::from(
        "# heapledger's built-in suppressions: blocks the C/C++ runtime allocates for\n\
         # itself and keeps for the life of the process (`--no-builtin-suppressions`\n\
         # shows them). A stack is the runtime's when one of its frames is one of:\n",
    );
    for f in runtime::runtime_functions() {
        let _ = writeln!(out, "leak:{f}");
    }
    let _ = writeln!(
        out,
        "# or when every frame whose module is known lies in the runtime's libraries\n\
         # (names starting with {}).",
        runtime::runtime_libraries().join(", ")
    );
    out
}

/// One entry of the report: a leak (a stack) or one of its blocks.
struct Entry<'a> {
    leak: &'a Leak,
    blocks: u64,
    bytes: u64,
    /// The block's pointer (`--each`), or the leak's lowest.
    ptr: Option<u64>,
    /// How many blocks the recorder wrote for the leak (the pointer is
    /// the lowest of those).
    known: u64,
}

/// The report, in SoHook's layout.
pub fn report(
    o: &Opened,
    sups: &[Suppression],
    opts: &LeakOptions,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let p = &o.profile;
    let (mut allocs, mut alloc_bytes, mut frees, mut free_bytes) = (0u64, 0u64, 0u64, 0u64);
    o.each_stack(|_, i| {
        allocs += i.alloc.count;
        alloc_bytes = alloc_bytes.saturating_add(i.alloc.sum);
        frees += i.free.count;
        free_bytes = free_bytes.saturating_add(i.free.sum);
    })?;
    let blocks = o.leak_blocks()?.unwrap_or_default();
    let runtime_leaks = if opts.no_builtin {
        Vec::new()
    } else {
        let mut r = p.runtime_leaks();
        r.sort_unstable();
        r
    };

    let mut builtin = (0u64, 0u64);
    let mut sup_hits: Vec<(&Suppression, u64, u64)> = Vec::new();
    let mut kept: Vec<usize> = Vec::new();
    for (i, l) in p.leaks.iter().enumerate() {
        if runtime_leaks.binary_search(&i).is_ok() {
            builtin.0 += l.count;
            builtin.1 += l.memory;
        } else if let Some(s) = suppressed_by(p, &l.stack, sups) {
            match sup_hits.iter_mut().find(|h| std::ptr::eq(h.0, s)) {
                Some(h) => {
                    h.1 += l.count;
                    h.2 += l.memory;
                }
                None => sup_hits.push((s, l.count, l.memory)),
            }
        } else {
            kept.push(i);
        }
    }
    let leaked = kept.iter().fold((0u64, 0u64), |(c, b), &i| {
        (c + p.leaks[i].count, b + p.leaks[i].memory)
    });

    writeln!(out, "=== Memory Leak Report ===")?;
    writeln!(out, "Total Allocations: {allocs} ({alloc_bytes} bytes)")?;
    writeln!(out, "Total Frees: {frees} ({free_bytes} bytes)")?;
    writeln!(out, "Current Leaks: {} ({} bytes)", leaked.0, leaked.1)?;
    if builtin.0 > 0 {
        writeln!(
            out,
            "Suppressed: {} ({} bytes) the C/C++ runtime keeps for the life of the process (--print-suppressions)",
            builtin.0, builtin.1
        )?;
    }
    for (s, c, b) in &sup_hits {
        writeln!(
            out,
            "Suppressed: {c} ({b} bytes) by leak:{} ({})",
            s.pattern, s.origin
        )?;
    }

    // The blocks of each leak, where the store has them.
    let mut of_leak: Vec<&[LeakBlock]> = vec![&[]; p.leaks.len()];
    let mut at = 0;
    while at < blocks.blocks.len() {
        let leak = blocks.blocks[at].leak as usize;
        let end = at + blocks.blocks[at..].partition_point(|b| b.leak as usize == leak);
        if let Some(slot) = of_leak.get_mut(leak) {
            *slot = &blocks.blocks[at..end];
        }
        at = end;
    }
    // Stacks that read alike (the same functions and lines: a call the
    // compiler copied, at two addresses) are one leak, as in the summary.
    let mut by_sites = heapledger_analysis::summary::StackGroups::new();
    let mut groups: Vec<(Vec<usize>, u64)> = Vec::new();
    for &i in &kept {
        let g = by_sites.group_of(p, &p.leaks[i].stack);
        if g == groups.len() {
            groups.push((Vec::new(), 0));
        }
        groups[g].0.push(i);
        groups[g].1 += p.leaks[i].memory;
    }
    // Largest first; equal ones in the profile's order.
    groups.sort_by_key(|g| std::cmp::Reverse(g.1));
    let mut entries: Vec<Entry> = Vec::new();
    for (members, _) in &groups {
        let l = &p.leaks[members[0]];
        let count: u64 = members.iter().map(|&i| p.leaks[i].count).sum();
        let memory: u64 = members.iter().map(|&i| p.leaks[i].memory).sum();
        let mut bs: Vec<LeakBlock> = members
            .iter()
            .flat_map(|&i| of_leak[i].iter().copied())
            .collect();
        bs.sort_unstable_by_key(|b| b.ptr);
        if opts.each && !bs.is_empty() {
            entries.extend(bs.iter().map(|b| Entry {
                leak: l,
                blocks: 1,
                bytes: b.size,
                ptr: Some(b.ptr),
                known: 1,
            }));
            // Blocks the recorder did not write one by one (past its limit).
            let (c, m) = bs.iter().fold((0, 0), |(c, m), b| (c + 1, m + b.size));
            if count > c {
                entries.push(Entry {
                    leak: l,
                    blocks: count - c,
                    bytes: memory.saturating_sub(m),
                    ptr: None,
                    known: 0,
                });
            }
        } else {
            entries.push(Entry {
                leak: l,
                blocks: count,
                bytes: memory,
                ptr: bs.iter().map(|b| b.ptr).min(),
                known: bs.len() as u64,
            });
        }
    }
    let shown = if opts.top == 0 {
        entries.len()
    } else {
        opts.top.min(entries.len())
    };
    for (n, e) in entries.iter().take(shown).enumerate() {
        let so = library_of(p, &e.leak.stack);
        writeln!(out)?;
        let ptr = match (e.ptr, e.known) {
            (Some(ptr), 1) if e.blocks == 1 => format!("ptr={ptr:#x}"),
            (Some(ptr), k) => format!("ptr={ptr:#x} (the lowest of {k})"),
            (None, _) if blocks.blocks.is_empty() => "ptr=? (not recorded)".to_owned(),
            (None, _) => "ptr=? (past the recorder's 2^20 blocks)".to_owned(),
        };
        if e.blocks == 1 {
            writeln!(out, "Leak #{}: {ptr}, size={}, so={so}", n + 1, e.bytes)?;
        } else {
            writeln!(
                out,
                "Leak #{}: {} blocks, {} bytes, {ptr}, so={so}",
                n + 1,
                e.blocks,
                e.bytes
            )?;
        }
        let stack = &e.leak.stack;
        if stack.is_empty() {
            writeln!(out, "  (no backtrace: recorded without stacks)")?;
            continue;
        }
        let limit = if opts.frames == 0 {
            stack.len()
        } else {
            opts.frames.min(stack.len())
        };
        writeln!(out, "  Backtrace ({} frames):", stack.len())?;
        for (k, &addr) in stack.iter().take(limit).enumerate() {
            let s = site_of(p, addr);
            writeln!(out, "    #{k}: {addr}  {s}")?;
        }
        if limit < stack.len() {
            writeln!(out, "    ... {} more", stack.len() - limit)?;
        }
    }
    if shown < entries.len() {
        writeln!(
            out,
            "\n... {} more entries (--top 0 shows all)",
            entries.len() - shown
        )?;
    }
    if blocks.omitted > 0 {
        writeln!(
            out,
            "\n({} blocks alive past the recorder's first 2^20 have no pointer here.)",
            blocks.omitted
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_as_leak_sanitizers_do() {
        assert!(pattern_matches("make_cache", "make_cache_entry"));
        assert!(pattern_matches("cache", "make_cache_entry"));
        assert!(!pattern_matches("^cache", "make_cache_entry"));
        assert!(pattern_matches("^make", "make_cache_entry"));
        assert!(pattern_matches("entry$", "make_cache_entry"));
        assert!(!pattern_matches("make$", "make_cache_entry"));
        assert!(pattern_matches("make*entry", "make_cache_entry"));
        assert!(!pattern_matches("entry*make", "make_cache_entry"));
        assert!(pattern_matches("^make*entry$", "make_cache_entry"));
        assert!(pattern_matches("libfoo.so", "/usr/lib/libfoo.so.1"));
        assert!(pattern_matches("*", "x"));
        assert!(!pattern_matches("x", ""));
    }
}
