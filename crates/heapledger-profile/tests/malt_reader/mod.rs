//! What MALT 1.6.2's own reader requires of a profile, to hold our files to it
//! in CI, where MALT cannot be built (it is in no registry).
//!
//! The list was read from MALT's source at tag v1.6.2 (read, not copied):
//!
//! - `src/reader/libreader/json/Parser.cpp`: the parser knows objects,
//!   arrays, strings, numbers and `true`/`false`, and nothing else: a `null`
//!   anywhere in the file, even under a key it never reads, stops it
//!   (`Unexpected character !`);
//! - `src/reader/libreader/json/Json.cpp`: `get_to` of an integer type
//!   wants a number without `.` or `e` (a float is another node type), of a
//!   `bool` a `true`/`false`, of a string a string, and a missing key reads
//!   as a null node that every `get_to` rejects;
//! - `src/reader/libreader/format/*.cpp`, each `from_json`: the keys read
//!   unconditionally (below, plain) or only when present (`?key`), and the
//!   C++ type each goes into: `MaltProfile.cpp` (top level), `Run.cpp`,
//!   `Config.cpp`, `Stacks.cpp`, `Sites.cpp`, `Timeline.cpp`, `Scatter.cpp`,
//!   `Threads.cpp`, `MemStats.cpp`, `Globals.cpp`, `Leaks.cpp`,
//!   `Domains.cpp`; addresses and stack ids go through `sscanf("%p")` or
//!   `"PY-%p"` (`Types.cpp`), map offsets through `"0x%zx"`;
//! - `src/reader/libreader/extractors/Extractor.cpp` (`getSummary`,
//!   `getSummaryV2`): `timeline.memoryTimeline.peak[0..5]` (requested,
//!   physical, virtual, internal memory, segments) and
//!   `memoryBandwidth.values[i][1]` and `[3]`.
//!
//! Each test that includes this module uses part of it.

#![allow(dead_code)]

use serde_json::Value;

/// The type a key is read into.
#[derive(Debug, Clone)]
pub enum T {
    /// `std::string`.
    Str,
    /// `size_t`, `unsigned long long` (MALT's ticks): a non-negative integer.
    U,
    /// `ssize_t`: an integer.
    I,
    /// `bool`.
    Bool,
    /// `void *` or `LangAddress`: a string `sscanf("%p")` reads (`0x...`),
    /// or `PY-0x...`.
    Addr,
    /// `sites.map[].offset`: a string `sscanf("0x%zx")` reads.
    Hex,
    /// `std::vector<T>`.
    Arr(Box<T>),
    /// A struct: its keys; `?key` is read only when present.
    Obj(Vec<(&'static str, T)>),
    /// `std::map<std::string, T>` and friends: any keys.
    Map(Box<T>),
    /// `sites.instr`: keys are addresses, values `T`.
    AddrMap(Box<T>),
}

use T::*;

fn arr(t: T) -> T {
    Arr(Box::new(t))
}

fn obj(keys: &[(&'static str, T)]) -> T {
    Obj(keys.to_vec())
}

/// `CountMinMaxSum` (Stacks.cpp).
fn count_min_max_sum() -> T {
    obj(&[("count", U), ("min", U), ("max", U), ("sum", U)])
}

/// `TimelineInfos` (Timeline.cpp).
fn timeline_infos() -> T {
    obj(&[
        ("start", U),
        ("fields", arr(Str)),
        ("perPoints", U),
        ("peak", arr(U)),
        ("values", arr(arr(U))),
        ("callsite", arr(Addr)),
    ])
}

/// `ScatterChart` (Scatter.cpp).
fn scatter_chart() -> T {
    let axis = || obj(&[("max", U), ("size", U), ("log", Bool)]);
    obj(&[
        ("infos", obj(&[("xAxis", axis()), ("yAxis", axis())])),
        ("points", arr(obj(&[("x", U), ("y", U), ("v", U)]))),
    ])
}

/// `ThreadsFuncStats` (Threads.cpp).
fn func_stats() -> T {
    obj(&[("count", U), ("sum", U), ("time", U)])
}

/// `DomainCounters` (Domains.cpp).
fn domain_counters() -> T {
    obj(&[
        ("c", U),
        ("pyObj", U),
        ("pyMem", U),
        ("pyRaw", U),
        ("mmap", U),
    ])
}

/// The whole file as MALT 1.6.2's reader reads it.
pub fn profile() -> T {
    obj(&[
        // Run.cpp
        (
            "run",
            obj(&[
                ("formatVersion", Str),
                ("tool", Str),
                ("runtime", U),
                ("allocator", Str),
                ("exe", Str),
                ("command", Str),
                ("hostname", Str),
                ("date", Str),
                ("?allocatorWrappers", arr(Str)),
            ]),
        ),
        // Config.cpp
        (
            "config",
            obj(&[
                (
                    "time",
                    obj(&[("enabled", Bool), ("points", U), ("linear", Bool)]),
                ),
                (
                    "stack",
                    obj(&[
                        ("enabled", Bool),
                        ("mode", Str),
                        ("resolve", Bool),
                        ("libunwind", Bool),
                        ("skip", U),
                    ]),
                ),
                (
                    "addr2line",
                    obj(&[("bucket", U), ("threads", U), ("huge", U)]),
                ),
                (
                    "sampling",
                    obj(&[("enabled", Bool), ("volume", U), ("count", U)]),
                ),
                (
                    "python",
                    obj(&[
                        ("instru", Bool),
                        ("mix", Bool),
                        ("stack", Str),
                        ("obj", Bool),
                        ("mem", Bool),
                        ("raw", Bool),
                        ("hide-imports", Bool),
                        ("mode", Str),
                    ]),
                ),
                ("c", obj(&[("malloc", Bool), ("mmap", Bool)])),
                (
                    "output",
                    obj(&[
                        ("callgrind", Bool),
                        ("config", Bool),
                        ("json", Bool),
                        ("lua", Bool),
                        ("name", Str),
                        ("verbosity", Str),
                        ("stack-tree", Bool),
                        ("loop-suppress", Bool),
                        ("indent", Bool),
                    ]),
                ),
                ("max-stack", obj(&[("enabled", Bool)])),
                (
                    "distr",
                    obj(&[("alloc-size", Bool), ("realloc-jump", Bool)]),
                ),
                ("info", obj(&[("hidden", Bool)])),
                ("trace", obj(&[("enabled", Bool)])),
                (
                    "filter",
                    obj(&[
                        ("exe", Str),
                        ("childs", Bool),
                        ("enabled", Bool),
                        ("ranks", Str),
                    ]),
                ),
                (
                    "dump",
                    obj(&[
                        ("on-signal", Str),
                        ("after-seconds", U),
                        ("on-sys-full-at", Str),
                        ("on-app-using-rss", Str),
                        ("on-app-using-virt", Str),
                        ("on-app-using-req", Str),
                        ("on-thread-stack-using", Str),
                        ("on-alloc-count", Str),
                        ("watch-dog", Bool),
                    ]),
                ),
                ("tools", obj(&[("nm", Bool), ("nm-max-size", Str)])),
            ]),
        ),
        // Stacks.cpp
        (
            "stacks",
            obj(&[
                (
                    "stats",
                    arr(obj(&[
                        ("stack", arr(Addr)),
                        ("stackId", Addr),
                        (
                            "infos",
                            obj(&[
                                ("countZeros", U),
                                ("maxAliveReq", U),
                                ("aliveReq", U),
                                ("alloc", count_min_max_sum()),
                                ("free", count_min_max_sum()),
                                ("mmap", count_min_max_sum()),
                                ("munmap", count_min_max_sum()),
                                ("lifetime", count_min_max_sum()),
                                ("globalPeak", U),
                                ("reallocCount", U),
                                ("reallocSumDelta", I),
                            ]),
                        ),
                    ])),
                ),
                ("count", U),
            ]),
        ),
        // Sites.cpp
        (
            "sites",
            obj(&[
                (
                    "map",
                    arr(obj(&[
                        ("lower", Addr),
                        ("upper", Addr),
                        ("offset", Hex),
                        ("aslrOffset", U),
                        ("file", Str),
                    ])),
                ),
                ("strings", arr(Str)),
                (
                    "instr",
                    AddrMap(Box::new(obj(&[
                        ("?file", I),
                        ("?binary", I),
                        ("?function", I),
                        ("?line", I),
                    ]))),
                ),
            ]),
        ),
        // Timeline.cpp
        (
            "timeline",
            obj(&[
                ("memoryTimeline", timeline_infos()),
                ("systemTimeline", timeline_infos()),
                ("memoryBandwidth", timeline_infos()),
            ]),
        ),
        // Scatter.cpp
        (
            "scatter",
            obj(&[
                ("sizeOverTime", scatter_chart()),
                ("lifetimeOverSize", scatter_chart()),
            ]),
        ),
        // Threads.cpp
        (
            "threads",
            arr(obj(&[
                (
                    "stackMem",
                    obj(&[
                        ("size", U),
                        ("stack", arr(Addr)),
                        ("mem", arr(U)),
                        ("total", U),
                        (
                            "timeprofiler",
                            obj(&[
                                ("min", arr(U)),
                                ("max", arr(U)),
                                ("index", arr(U)),
                                ("timestamp", arr(U)),
                                ("peakTimesteamp", U),
                                ("peakMemory", U),
                                ("peakIndex", U),
                                ("linearIndex", Bool),
                                ("?location", arr(Addr)),
                            ]),
                        ),
                    ]),
                ),
                ("cntMemOps", U),
                (
                    "stats",
                    obj(&[
                        ("malloc", func_stats()),
                        ("posix_memalign", func_stats()),
                        ("aligned_alloc", func_stats()),
                        ("memalign", func_stats()),
                        ("valloc", func_stats()),
                        ("pvalloc", func_stats()),
                        ("free", func_stats()),
                        ("calloc", func_stats()),
                        ("realloc", func_stats()),
                    ]),
                ),
            ])),
        ),
        // MemStats.cpp
        (
            "memStats",
            obj(&[
                ("sizeMap", Map(Box::new(U))),
                (
                    "reallocJump",
                    arr(obj(&[("oldSize", U), ("newSize", U), ("count", U)])),
                ),
                (
                    "globalVariables",
                    Map(Box::new(arr(obj(&[
                        ("symbol", Str),
                        ("name", Str),
                        ("size", U),
                        ("usedSize", U),
                        ("tls", Bool),
                        ("binaryFile", Str),
                        ("offset", U),
                        ("secOffset", U),
                        ("?line", I),
                        ("?sourceFile", Str),
                    ])))),
                ),
            ]),
        ),
        // Globals.cpp
        (
            "globals",
            obj(&[
                ("ticksPerSecond", U),
                ("totalMemory", U),
                ("freeMemoryAtStart", U),
                ("cachedMemoryAtStart", U),
                ("maxThreadCount", U),
            ]),
        ),
        // Leaks.cpp
        (
            "leaks",
            arr(obj(&[("stack", arr(Addr)), ("count", U), ("memory", U)])),
        ),
        // Domains.cpp
        (
            "domains",
            obj(&[
                ("counters", domain_counters()),
                ("mem", domain_counters()),
                ("atGlobalPeak", domain_counters()),
                ("localPeak", domain_counters()),
            ]),
        ),
    ])
}

/// Whether `sscanf("%p")` (or `"PY-%p"`) reads `s` as MALT means it: hex
/// digits after `0x`.
fn is_addr(s: &str) -> bool {
    let hex = s
        .strip_prefix("PY-")
        .or_else(|| s.strip_prefix("PYPTR-"))
        .unwrap_or(s);
    hex.strip_prefix("0x")
        .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Every place in `v` where `t` is not met, as `path: problem`.
pub fn check(v: &Value, t: &T) -> Vec<String> {
    let mut errors = Vec::new();
    walk(v, t, "$", &mut errors);
    errors
}

fn walk(v: &Value, t: &T, path: &str, errors: &mut Vec<String>) {
    let mut fail = |what: &str| errors.push(format!("{path}: {what}, found {}", short(v)));
    match t {
        Str => {
            if !v.is_string() {
                fail("a string")
            }
        }
        // serde_json keeps integers written without `.`/`e` as i64/u64.
        U => {
            if !v.is_u64() {
                fail("a non-negative integer")
            }
        }
        I => {
            if !(v.is_u64() || v.is_i64()) {
                fail("an integer")
            }
        }
        Bool => {
            if !v.is_boolean() {
                fail("true or false")
            }
        }
        Addr => {
            if !v.as_str().is_some_and(is_addr) {
                fail("an address string \"0x...\"")
            }
        }
        Hex => {
            if !v.as_str().is_some_and(|s| {
                s.strip_prefix("0x")
                    .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
            }) {
                fail("a hex string \"0x...\"")
            }
        }
        Arr(item) => match v.as_array() {
            Some(items) => {
                for (i, x) in items.iter().enumerate() {
                    walk(x, item, &format!("{path}[{i}]"), errors);
                }
            }
            None => fail("an array"),
        },
        Obj(keys) => match v.as_object() {
            Some(map) => {
                for (key, kt) in keys {
                    let (optional, key) = match key.strip_prefix('?') {
                        Some(k) => (true, k),
                        None => (false, *key),
                    };
                    match map.get(key) {
                        Some(x) => walk(x, kt, &format!("{path}.{key}"), errors),
                        None if optional => {}
                        None => errors.push(format!("{path}: no key {key:?}")),
                    }
                }
            }
            None => fail("an object"),
        },
        Map(item) => match v.as_object() {
            Some(map) => {
                for (k, x) in map {
                    walk(x, item, &format!("{path}.{k}"), errors);
                }
            }
            None => fail("an object"),
        },
        AddrMap(item) => match v.as_object() {
            Some(map) => {
                for (k, x) in map {
                    if !is_addr(k) {
                        errors.push(format!("{path}: key {k:?} is no address"));
                    }
                    walk(x, item, &format!("{path}.{k}"), errors);
                }
            }
            None => fail("an object"),
        },
    }
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 60 {
        let mut cut = 60;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// The JSON paths of every `null` in `v`.
pub fn nulls(v: &Value) -> Vec<String> {
    fn go(v: &Value, path: String, out: &mut Vec<String>) {
        match v {
            Value::Null => out.push(path),
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    go(x, format!("{path}[{i}]"), out);
                }
            }
            Value::Object(map) => {
                for (k, x) in map {
                    go(x, format!("{path}.{k}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    go(v, "$".to_owned(), &mut out);
    out
}

/// What MALT's extractors index without looking (Extractor.cpp): the five
/// peaks of `memoryTimeline`, four values per `memoryBandwidth` point, and
/// `sites.instr`'s string indexes within `sites.strings`.
pub fn extractor_problems(v: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let peaks = v["timeline"]["memoryTimeline"]["peak"]
        .as_array()
        .map_or(0, Vec::len);
    if peaks < 5 {
        errors.push(format!(
            "timeline.memoryTimeline.peak has {peaks} values, not 5"
        ));
    }
    if let Some(points) = v["timeline"]["memoryBandwidth"]["values"].as_array() {
        for (i, p) in points.iter().enumerate() {
            if p.as_array().map_or(0, Vec::len) < 4 {
                errors.push(format!(
                    "timeline.memoryBandwidth.values[{i}]: fewer than 4"
                ));
            }
        }
    }
    let strings = v["sites"]["strings"].as_array().map_or(0, Vec::len) as u64;
    if let Some(instr) = v["sites"]["instr"].as_object() {
        for (addr, e) in instr {
            for key in ["file", "binary", "function"] {
                if e[key].as_u64().is_some_and(|i| i >= strings) {
                    errors.push(format!("sites.instr.{addr}.{key}: no such string"));
                }
            }
        }
    }
    errors
}

/// Everything above at once: nulls, keys and types, extractors' indexes.
pub fn problems(v: &Value) -> Vec<String> {
    let mut all: Vec<String> = nulls(v)
        .into_iter()
        .map(|p| format!("{p}: null (MALT's parser stops at it)"))
        .collect();
    all.extend(check(v, &profile()));
    all.extend(extractor_problems(v));
    all
}
