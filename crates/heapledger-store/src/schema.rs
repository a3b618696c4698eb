//! The tables, and the columns of each kind of block.

/// `meta.format`: what the file is.
pub const FORMAT: &str = "heapledger-profile";
/// `meta.version`: bumped on any change a reader must know of.
pub const VERSION: u32 = 3;

pub const SCHEMA: &str = "
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE process(
    pid INTEGER PRIMARY KEY,
    ppid INTEGER NOT NULL,
    is_main INTEGER NOT NULL,      -- the process `heapledger run` started
    forked_from INTEGER,           -- a forked child's parent
    exe TEXT NOT NULL,
    command TEXT NOT NULL,
    exit_code INTEGER,
    exit_signal INTEGER,
    complete INTEGER NOT NULL,     -- 0: killed, the profile stops at a checkpoint
    checkpoint_seq INTEGER,
    checkpoint_seconds REAL,       -- when that checkpoint was taken
    allocations INTEGER NOT NULL,
    allocated_bytes INTEGER NOT NULL,
    peak_bytes INTEGER NOT NULL,
    leaked_bytes INTEGER NOT NULL,
    stacks INTEGER NOT NULL,
    nodes INTEGER NOT NULL
);
-- Snapshots taken while a process ran (heapledger_snapshot, heapledger ctl):
-- each a whole profile kept under its key (2^31 and up) in the tables below.
CREATE TABLE snapshot(
    key INTEGER PRIMARY KEY,
    pid INTEGER NOT NULL,          -- the process it was taken of
    seq INTEGER NOT NULL,
    label TEXT NOT NULL,
    seconds REAL NOT NULL,         -- after the process started
    allocations INTEGER NOT NULL,
    allocated_bytes INTEGER NOT NULL,
    peak_bytes INTEGER NOT NULL,
    alive_bytes INTEGER NOT NULL,
    stacks INTEGER NOT NULL
);
CREATE TABLE section(pid INTEGER NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY(pid, name)) WITHOUT ROWID;
CREATE TABLE string(pid INTEGER NOT NULL, id INTEGER NOT NULL, text TEXT NOT NULL,
    PRIMARY KEY(pid, id)) WITHOUT ROWID;
-- Every distinct address of the stacks; function, file and binary are
-- string ids, NULL where the address was not resolved.
CREATE TABLE frame(pid INTEGER NOT NULL, id INTEGER NOT NULL, address INTEGER NOT NULL,
    space INTEGER NOT NULL, function INTEGER, file INTEGER, line INTEGER, binary INTEGER,
    PRIMARY KEY(pid, id)) WITHOUT ROWID;
CREATE TABLE block(pid INTEGER NOT NULL, kind TEXT NOT NULL, first INTEGER NOT NULL,
    rows INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY(pid, kind, first)) WITHOUT ROWID;
-- Global and thread-local variables, one row per binary (version 3; see
-- `globals.rs`); the section `variablesOf` lists a process's rows.
CREATE TABLE variables(id INTEGER PRIMARY KEY, binary TEXT NOT NULL, data BLOB NOT NULL);
CREATE VIEW frames AS
    SELECT f.pid, f.id, printf('0x%x', f.address) AS address, fn.text AS function,
           fl.text AS file, f.line, b.text AS binary
    FROM frame f
    LEFT JOIN string fn ON fn.pid = f.pid AND fn.id = f.function
    LEFT JOIN string fl ON fl.pid = f.pid AND fl.id = f.file
    LEFT JOIN string b ON b.pid = f.pid AND b.id = f.binary;
";

/// `node` blocks: per node, in depth-first order (node 0 is the root,
/// above every stack's outermost frame, and not stored), how many levels
/// up from the node before its parent stands (0: the node before is its
/// parent), and its frame (a row of `frame`).
pub const NODE_COLUMNS: usize = 2;

/// `stack` blocks: per stack, in the order of their nodes, its leaf node
/// (the difference from the stack before, zigzagged), then MALT's
/// counters; a free count or sum is stored as its difference from the
/// allocation's, which is mostly 0 (see `write::stack_row`); last, the
/// temporary blocks (version 2: version 1 has 26 columns, and is read
/// with none).
pub const STACK_COLUMNS: usize = 28;

/// `leak` blocks: per stack with blocks alive at the end, its node (the
/// difference from the leak before, zigzagged), the blocks and the bytes.
pub const LEAK_COLUMNS: usize = 3;

/// `leak_block` blocks: per block alive at exit (at most 2^20 of them,
/// the section `leakBlocksOmitted` counting the rest), its leak (a row of
/// the `leak` blocks, from 0) and its address, each the difference from
/// the block before (zigzagged), and its size; by leak, then address.
pub const LEAK_BLOCK_COLUMNS: usize = 3;

/// `series` blocks: the checkpoint series (`Profile::series`), one row per
/// stack that changed at a point, by point then stack: the point (an index
/// into the section `series`, the list of their times; the difference from
/// the row before), the stack (its row in the `stack` blocks, the
/// difference from the row before, zigzagged), its allocations and bytes
/// allocated, and its frees and bytes freed each as the difference from
/// the allocations' (zigzagged: mostly small).
pub const SERIES_COLUMNS: usize = 6;

/// `thread_stack` blocks: what each thread allocated at each stack
/// (`Profile::thread_stacks`), by thread then stack: the thread (its index
/// in the section `threads`; the difference from the row before), the
/// stack (its row in the `stack` blocks; the difference from the row
/// before, zigzagged), the allocations and their bytes. The section
/// `threadStacks` lists the threads that have rows.
pub const THREAD_STACK_COLUMNS: usize = 4;
