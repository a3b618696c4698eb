//! Questions asked of a whole profile: symbols of addresses, stacks as
//! resolved frames, totals that MALT spreads over threads.

use std::borrow::Cow;

use crate::addr::Addr;
use crate::model::Profile;
use crate::runtime;
use crate::sites::{basename, SiteRef};
use crate::stacks::StackStat;
use crate::strings::UNKNOWN;
use crate::threads::AllocFuncStats;

/// A stack frame: its address and, when the file has it, its symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The frame's address.
    pub addr: Addr,
    /// Its symbol, if `sites.instr` has one.
    pub site: Option<SiteRef<'a>>,
}

impl Profile {
    /// The symbol of `addr` written as in the file (`"0x401136"`); `None` if
    /// the text is no address or the file has no symbol for it.
    pub fn resolve(&self, addr: &str) -> Option<SiteRef<'_>> {
        self.sites.resolve(addr.parse().ok()?)
    }

    /// The symbol of `addr`, if the file has one.
    pub fn resolve_addr(&self, addr: Addr) -> Option<SiteRef<'_>> {
        self.sites.resolve(addr)
    }

    /// The name a frame is shown by: its function, or, when the file has no
    /// function name for it, its address and module
    /// (`0x65072c (python3.11)`), never a bare `??`, so that unresolved
    /// frames stay apart from one another in every output.
    pub fn frame_name(&self, addr: Addr) -> Cow<'_, str> {
        match self.sites.resolve(addr) {
            Some(site) if site.function != UNKNOWN => Cow::Borrowed(site.function),
            site => Cow::Owned(format!("{addr} ({})", self.module_name(addr, site))),
        }
    }

    /// The base name of the binary holding `addr` (whose symbol is `site`):
    /// from its symbol, else from the mappings, else `??`.
    pub fn module_name<'a>(&'a self, addr: Addr, site: Option<SiteRef<'a>>) -> &'a str {
        let known = |name: &&str| !name.is_empty() && *name != UNKNOWN;
        site.map(|s| s.binary_name())
            .filter(known)
            .or_else(|| {
                self.sites
                    .mapping_of(addr)
                    .map(|m| basename(&m.file))
                    .filter(known)
            })
            .unwrap_or(UNKNOWN)
    }

    /// The stacks, in file order.
    pub fn stacks(&self) -> std::slice::Iter<'_, StackStat> {
        self.stacks.stats.iter()
    }

    /// The frames of `stack`, innermost first, with their symbols.
    pub fn frames<'a>(&'a self, stack: &'a [Addr]) -> impl Iterator<Item = Frame<'a>> + 'a {
        stack.iter().map(move |&addr| Frame {
            addr,
            site: self.sites.resolve(addr),
        })
    }

    /// The functions that `addr`'s innermost function was inlined into,
    /// innermost first (empty without heapledger data or inlining).
    pub fn inline_chain(&self, addr: Addr) -> Vec<SiteRef<'_>> {
        let Some(chain) = self.heapledger.as_ref().and_then(|m| m.inlined.get(&addr)) else {
            return Vec::new();
        };
        let binary = self
            .sites
            .resolve(addr)
            .map_or(crate::strings::UNKNOWN, |s| s.binary);
        chain
            .iter()
            .map(|f| SiteRef {
                addr,
                function: self.sites.string(f.function),
                file: self.sites.string(f.file),
                line: f.line,
                binary,
            })
            .collect()
    }

    /// Calls per allocation function, summed over all threads.
    pub fn call_totals(&self) -> AllocFuncStats {
        let mut total = AllocFuncStats::default();
        for thread in &self.threads {
            total.merge(&thread.stats);
        }
        total
    }

    /// The peak of live requested bytes: heapledger's exact figure when the file
    /// has it, else the timeline's (MALT), else `None`.
    pub fn peak_requested(&self) -> Option<u64> {
        match &self.heapledger {
            Some(ext) => Some(ext.peak_requested),
            None => self.timeline.peak_requested(),
        }
    }

    /// The run time in seconds, if the clock rate is known.
    pub fn runtime_seconds(&self) -> Option<f64> {
        ticks_to_seconds(self.run.runtime, self.globals.ticks_per_second)
    }

    /// Indexes into `leaks` of the leaks that belong to the C/C++ runtime:
    /// heapledger's record when the file has one, else recognised from the
    /// stacks by [`runtime::classify_leaks`].
    pub fn runtime_leaks(&self) -> Vec<usize> {
        match &self.heapledger {
            Some(ext) => ext.runtime_leaks.clone(),
            None => runtime::classify_leaks(self),
        }
    }
}

/// `ticks / ticks_per_second`, or `None` when the rate is 0.
pub fn ticks_to_seconds(ticks: u64, ticks_per_second: u64) -> Option<f64> {
    (ticks_per_second > 0).then(|| ticks as f64 / ticks_per_second as f64)
}
