//! `export --format pprof`: the profile as a gzipped `profile.proto`
//! (github.com/google/pprof, proto/profile.proto), the heap profile that
//! `go tool pprof`, Pyroscope and Grafana read.
//!
//! Four values per sample, the sample types Go's heap profiles use:
//! `alloc_objects`/`alloc_space` (allocations and their bytes, over the
//! run) and `inuse_objects`/`inuse_space` (blocks alive at exit, and their
//! bytes), with `period_type` space/bytes and `period` the sampling rate
//! (1 where every allocation was recorded; `--sample-every`'s otherwise:
//! the counts are already scaled up). Each distinct address is a location
//! in the mapping (module) that holds it, with its function, file and line
//! and the functions inlined there as further lines (innermost first, as
//! the format wants); mappings carry their build ids, and say that their
//! functions, files, lines and inline frames are resolved, so that tools
//! take the names as they are.
//!
//! The messages are written with prost from their definitions below (five
//! small messages), not generated from the .proto: that would need
//! `protoc` at build time.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use heapledger_profile::Addr;
use prost::Message;

use crate::profiles::Opened;

/// foldhash, not SipHash: every frame of every stack is looked up (SipHash
/// was a fifth of the export of half a million stacks).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Clone, PartialEq, prost::Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
    #[prost(int64, repeated, tag = "13")]
    comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Mapping {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    memory_start: u64,
    #[prost(uint64, tag = "3")]
    memory_limit: u64,
    #[prost(uint64, tag = "4")]
    file_offset: u64,
    #[prost(int64, tag = "5")]
    filename: i64,
    #[prost(int64, tag = "6")]
    build_id: i64,
    #[prost(bool, tag = "7")]
    has_functions: bool,
    #[prost(bool, tag = "8")]
    has_filenames: bool,
    #[prost(bool, tag = "9")]
    has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    has_inline_frames: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    mapping_id: u64,
    #[prost(uint64, tag = "3")]
    address: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
    #[prost(int64, tag = "2")]
    line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
    #[prost(int64, tag = "4")]
    filename: i64,
}

/// The string table: index 0 is "".
#[derive(Default)]
struct Strings {
    list: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.id("");
        s
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as i64;
        self.list.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// Builds the pprof profile of `o`, but for its samples, which go to
/// `emit` as they are made (a profile's samples are most of its size:
/// compileall's half million, 46 locations each, took 300 MB as messages).
fn build(o: &Opened, emit: &mut dyn FnMut(&Sample) -> std::io::Result<()>) -> Result<Profile> {
    let p = &o.profile;
    let mut strings = Strings::new();
    let sample_type = [
        "alloc_objects",
        "alloc_space",
        "inuse_objects",
        "inuse_space",
    ]
    .iter()
    .zip(["count", "bytes", "count", "bytes"])
    .map(|(t, u)| ValueType {
        r#type: strings.id(t),
        unit: strings.id(u),
    })
    .collect();

    // Mappings: the modules' executable spans, by start.
    let mut modules: Vec<&heapledger_profile::ModuleInfo> = p
        .heapledger
        .as_ref()
        .map(|e| e.modules.iter().collect())
        .unwrap_or_default();
    modules.sort_by_key(|m| m.lower.value());
    let mapping: Vec<Mapping> = modules
        .iter()
        .enumerate()
        .map(|(i, m)| Mapping {
            id: i as u64 + 1,
            memory_start: m.lower.value(),
            memory_limit: m.upper.value(),
            file_offset: m.file_offset.value(),
            filename: strings.id(&m.path),
            build_id: m.build_id.as_deref().map_or(0, |b| strings.id(b)),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        })
        .collect();
    let mapping_of = |a: u64| -> u64 {
        let i = modules.partition_point(|m| m.lower.value() <= a);
        match i.checked_sub(1) {
            Some(j) if a < modules[j].upper.value() => j as u64 + 1,
            _ => 0,
        }
    };

    let mut functions: Vec<Function> = Vec::new();
    let mut function_ids: HashMap<(i64, i64), u64> = HashMap::default();
    // A JIT's function (a perf map's name: Python's `<module>`, V8's
    // `<anonymous>`) has a system name of its own, `NAME [jit]`: pprof
    // demangles a function whose name is its system name, and takes one
    // with `<...>` for C++ and strips its "template parameters", so that
    // `<module>` showed as `<unknown>`.
    let mut function_id = |strings: &mut Strings, name: &str, file: &str, jit: bool| -> u64 {
        let key = (strings.id(name), strings.id(file));
        let system_name = match jit {
            true => strings.id(&format!(
                "{name} {}",
                heapledger_symbols::perfmap::JIT_BINARY
            )),
            false => key.0,
        };
        *function_ids.entry(key).or_insert_with(|| {
            functions.push(Function {
                id: functions.len() as u64 + 1,
                name: key.0,
                system_name,
                filename: key.1,
            });
            functions.len() as u64
        })
    };
    let mut locations: Vec<Location> = Vec::new();
    let mut location_ids: HashMap<Addr, u64> = HashMap::default();
    let mut location_id = |strings: &mut Strings, a: Addr| -> u64 {
        if let Some(&id) = location_ids.get(&a) {
            return id;
        }
        let mut line = Vec::new();
        let site = p.resolve_addr(a);
        let name = p.frame_name(a).into_owned();
        let file = site.map_or("", |s| s.file);
        let file = if file == heapledger_profile::UNKNOWN {
            ""
        } else {
            file
        };
        let jit = site.is_some_and(|s| s.binary == heapledger_symbols::perfmap::JIT_BINARY);
        line.push(Line {
            function_id: function_id(strings, &name, file, jit),
            line: site.and_then(|s| s.line).unwrap_or(0) as i64,
        });
        for f in p.inline_chain(a) {
            let file = if f.file == heapledger_profile::UNKNOWN {
                ""
            } else {
                f.file
            };
            line.push(Line {
                function_id: function_id(strings, f.function, file, jit),
                line: f.line.unwrap_or(0) as i64,
            });
        }
        let id = locations.len() as u64 + 1;
        locations.push(Location {
            id,
            mapping_id: mapping_of(a.value()),
            address: a.value(),
            line,
        });
        location_ids.insert(a, id);
        id
    };

    // In use at exit: the leaks, by stack.
    let mut inuse: HashMap<&[Addr], (u64, u64)> = HashMap::default();
    for l in &p.leaks {
        let e = inuse.entry(&l.stack[..]).or_default();
        e.0 += l.count;
        e.1 += l.memory;
    }
    let mut sample = Sample::default();
    let mut failed = None;
    o.each_stack(|stack, infos| {
        let (n, bytes) = match inuse.is_empty() {
            true => (0, 0),
            false => inuse.get(stack).copied().unwrap_or((0, 0)),
        };
        if failed.is_some() || (infos.alloc.count == 0 && n == 0) {
            return;
        }
        sample.location_id.clear();
        sample
            .location_id
            .extend(stack.iter().map(|&a| location_id(&mut strings, a)));
        sample.value.clear();
        sample.value.extend([
            infos.alloc.count as i64,
            infos.alloc.sum as i64,
            n as i64,
            bytes as i64,
        ]);
        if let Err(e) = emit(&sample) {
            failed = Some(e);
        }
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    let ext = p.heapledger.as_ref();
    let tps = p.globals.ticks_per_second.max(1) as u128;
    let comment = vec![strings.id(&format!(
        "heapledger {}: {}",
        env!("CARGO_PKG_VERSION"),
        p.run.command
    ))];
    let default_sample_type = strings.id("alloc_space");
    let period_type = Some(ValueType {
        r#type: strings.id("space"),
        unit: strings.id("bytes"),
    });
    Ok(Profile {
        sample_type,
        sample: Vec::new(),
        mapping,
        location: locations,
        function: functions,
        string_table: strings.list,
        time_nanos: 0,
        duration_nanos: (p.run.runtime as u128 * 1_000_000_000 / tps).min(i64::MAX as u128) as i64,
        period_type,
        period: ext.and_then(|e| e.sample_every).unwrap_or(1) as i64,
        comment,
        default_sample_type,
    })
}

/// Writes the pprof profile of `o` to `out` (gzipped), whole or not at all.
/// The samples are written as they are read, each as a `sample` field of
/// the profile message, then the rest of the message: protobuf reads a
/// message's fields in any order, and a repeated field's entries wherever
/// they are.
pub fn write(o: &Opened, out: &Path) -> Result<()> {
    crate::output::write_whole(out, |f| {
        let mut gz = flate2::write::GzEncoder::new(
            std::io::BufWriter::new(f),
            flate2::Compression::default(),
        );
        // The samples go to the compressor 64 KiB at a time: one call a
        // sample (about 50 bytes) cost about as much again as compressing.
        let mut buf = Vec::with_capacity(1 << 16);
        let rest = build(o, &mut |sample| {
            prost::encoding::message::encode(2, sample, &mut buf);
            if buf.len() >= 1 << 16 {
                gz.write_all(&buf)?;
                buf.clear();
            }
            Ok(())
        })?;
        gz.write_all(&buf)?;
        gz.write_all(&rest.encode_to_vec())?;
        gz.finish()?.flush()?;
        Ok(())
    })
}
