//! `heapledger check`: a profile against memory budgets, for CI: exit 0
//! within every budget, 1 with one line per budget exceeded (2 when the
//! profile cannot be read).

use heapledger_analysis::summary::{format_bytes, Summary};

/// The budgets given; `None` is not checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Budgets {
    /// The peak of requested bytes.
    pub peak: Option<u64>,
    /// Bytes the program left allocated at exit (the C/C++ runtime's own
    /// blocks apart, as in the summary).
    pub leaked: Option<u64>,
    /// Allocation calls that gave a block.
    pub allocations: Option<u64>,
    /// Temporary allocations (`heapledger_analysis::temporary`).
    pub temporary: Option<u64>,
}

/// One budget's verdict.
pub struct Verdict {
    pub name: &'static str,
    pub option: &'static str,
    pub limit: u64,
    pub value: u64,
    pub bytes: bool,
}

impl Verdict {
    pub fn exceeded(&self) -> bool {
        self.value > self.limit
    }

    /// `peak 1.5 MiB (1572864 B) exceeds --max-peak 1.0 MiB (1048576 B)`.
    pub fn line(&self) -> String {
        let show = |v: u64| {
            if self.bytes {
                format_bytes(v)
            } else {
                v.to_string()
            }
        };
        format!(
            "{} {} {} {} {}",
            self.name,
            show(self.value),
            if self.exceeded() {
                "exceeds"
            } else {
                "is within"
            },
            self.option,
            show(self.limit)
        )
    }
}

/// The verdict on each budget given, in a fixed order.
pub fn verdicts(s: &Summary, b: &Budgets) -> Vec<Verdict> {
    let leaked = s.alive.bytes.saturating_sub(s.alive_runtime.bytes);
    let mut v = Vec::new();
    let mut add = |name, option, limit: Option<u64>, value, bytes| {
        if let Some(limit) = limit {
            v.push(Verdict {
                name,
                option,
                limit,
                value,
                bytes,
            });
        }
    };
    add(
        "peak",
        "--max-peak",
        b.peak,
        s.peak_requested.unwrap_or(0),
        true,
    );
    add("leaked", "--max-leaked", b.leaked, leaked, true);
    add(
        "allocations",
        "--max-allocations",
        b.allocations,
        s.alloc_calls,
        false,
    );
    add(
        "temporary allocations",
        "--max-temporary",
        b.temporary,
        s.temporary.total.unwrap_or(0),
        false,
    );
    v
}

/// The verdicts as JSON: `within_budget`, and per budget its `name`,
/// `limit`, `value` and `exceeded`.
pub fn to_json(v: &[Verdict]) -> serde_json::Value {
    serde_json::json!({
        "within_budget": v.iter().all(|x| !x.exceeded()),
        "budgets": v.iter().map(|x| serde_json::json!({
            "name": x.name,
            "limit": x.limit,
            "value": x.value,
            "exceeded": x.exceeded(),
        })).collect::<Vec<_>>(),
    })
}
