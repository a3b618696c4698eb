//! Text and JSON output of call trees and flat profiles.
//!
//! Everything is written with loops over a [`Walk`](super::Walk), never by
//! recursion, so trees of any depth render. Give the writers a buffered writer.

use std::io::{self, Write};

use super::{CallTree, FlatProfile, RenderOptions, RoutineTable, Visit};

/// Routines are indented two spaces per level up to this level; deeper ones stay
/// at that indentation (the Level column still tells), so that output of a very
/// deep tree grows linearly with its depth.
const MAX_INDENT_LEVEL: u32 = 64;

const IN_OR_UNDER: &str = "In or Under";
const IN_ONLY: &str = "In Only";
const LEVEL: &str = "Level";
const ROUTINE: &str = "Routine";
const ROUTINE_RULE: &str = "-------";

/// Writes `tree` in the Puma manual's layout:
///
/// ```text
/// Call tree: top-down, full collapse, total samples 6
///
///     samples  samples
/// In or Under  In Only  Level  Routine
/// -----------  -------  -----  -------
///           6        0      1  main
///           6        3      2    r
///       1 (2)        3      3      s
///                           3      r...
/// ```
///
/// "In or Under" is the inclusive weight as `direct (indirect)`, just `direct`
/// when nothing arrived through a stub; "In Only" is the exclusive weight; a
/// stub `f...` shows no counts. `metric` names the unit of the weights.
///
/// # Errors
///
/// Any error of `out`.
///
/// # Panics
///
/// If `routines` is smaller than the table the tree was built with.
pub fn write_text<W: Write + ?Sized>(
    out: &mut W,
    tree: &CallTree,
    routines: &RoutineTable,
    metric: &str,
    options: &RenderOptions,
) -> io::Result<()> {
    struct Row {
        direct: u64,
        indirect: u64,
        excl: u64,
        level: u32,
        id: super::NodeId,
    }
    let rows: Vec<Row> = tree
        .walk(routines, options)
        .filter_map(|visit| match visit {
            Visit::Enter(id) => Some(id),
            Visit::Leave(_) => None,
        })
        .map(|id| {
            let node = &tree[id];
            Row {
                direct: node.incl_direct(),
                indirect: node.incl_indirect(),
                excl: node.excl(),
                level: node.level(),
                id,
            }
        })
        .collect();
    let in_or_under = |row: &Row| match row.indirect {
        0 => digits(row.direct),
        indirect => digits(row.direct) + digits(indirect) + 3,
    };
    let width = |headers: &[&str], column: &dyn Fn(&Row) -> usize| {
        rows.iter()
            .map(column)
            .chain(headers.iter().map(|header| header.len()))
            .max()
            .unwrap_or(0)
    };
    let w1 = width(&[IN_OR_UNDER, metric], &in_or_under);
    let w2 = width(&[IN_ONLY, metric], &|row| digits(row.excl));
    let w3 = width(&[LEVEL], &|row| digits(u64::from(row.level)));

    writeln!(
        out,
        "Call tree: {}, {} collapse, total {metric} {}",
        tree.direction(),
        tree.mode(),
        tree.total_weight()
    )?;
    writeln!(out)?;
    writeln!(out, "{metric:>w1$}  {metric:>w2$}")?;
    writeln!(
        out,
        "{IN_OR_UNDER:>w1$}  {IN_ONLY:>w2$}  {LEVEL:>w3$}  {ROUTINE}"
    )?;
    writeln!(
        out,
        "{:-<w1$}  {:-<w2$}  {:-<w3$}  {ROUTINE_RULE}",
        "", "", ""
    )?;
    for row in &rows {
        let node = &tree[row.id];
        if node.is_stub() {
            pad(out, w1 + 2 + w2 + 2)?;
        } else {
            pad(out, w1 - in_or_under(row))?;
            write!(out, "{}", row.direct)?;
            if row.indirect != 0 {
                write!(out, " ({})", row.indirect)?;
            }
            write!(out, "  {:>w2$}  ", row.excl)?;
        }
        write!(out, "{:>w3$}  ", row.level)?;
        pad(out, 2 * (row.level.min(MAX_INDENT_LEVEL) as usize - 1))?;
        out.write_all(routines.name(node.routine()).as_bytes())?;
        if node.is_stub() {
            out.write_all(b"...")?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// [`write_text`] into a string.
///
/// # Panics
///
/// If `routines` is smaller than the table the tree was built with.
pub fn to_text(
    tree: &CallTree,
    routines: &RoutineTable,
    metric: &str,
    options: &RenderOptions,
) -> String {
    into_string(|out| write_text(out, tree, routines, metric, options))
}

/// What a writer of this module writes, as a string.
fn into_string(write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
    let mut out = Vec::new();
    write(&mut out).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("the output is UTF-8")
}

/// Writes `tree` as one JSON object (compact, no whitespace):
///
/// ```json
/// {"mode":"full","direction":"top-down","metric":"samples","total":6,"roots":[
///   {"routine":"main","level":1,"incl_direct":6,"incl_indirect":0,"excl":0,"children":[
///     {"routine":"r","level":2,"incl_direct":6,"incl_indirect":0,"excl":3,"children":[
///       {"routine":"s","level":3,"incl_direct":1,"incl_indirect":2,"excl":3,"children":[]},
///       {"routine":"r","stub_to":2,"traversed":4}]}]}]}
/// ```
///
/// A stub is `{"routine", "stub_to": level of its target, "traversed"}`; its
/// target is the ancestor at that level. Children are in output order and
/// `options` filters as for text.
///
/// # Errors
///
/// Any error of `out`.
///
/// # Panics
///
/// If `routines` is smaller than the table the tree was built with.
pub fn write_json<W: Write + ?Sized>(
    out: &mut W,
    tree: &CallTree,
    routines: &RoutineTable,
    metric: &str,
    options: &RenderOptions,
) -> io::Result<()> {
    write!(
        out,
        r#"{{"mode":"{}","direction":"{}","metric":"#,
        tree.mode(),
        tree.direction()
    )?;
    write_json_string(out, metric)?;
    write!(out, r#","total":{},"roots":["#, tree.total_weight())?;
    // Whether the array being written already holds an element.
    let mut after_element = false;
    for visit in tree.walk(routines, options) {
        match visit {
            Visit::Enter(id) => {
                let node = &tree[id];
                if after_element {
                    out.write_all(b",")?;
                }
                out.write_all(br#"{"routine":"#)?;
                write_json_string(out, routines.name(node.routine()))?;
                if let Some(target) = node.stub_target() {
                    write!(
                        out,
                        r#","stub_to":{},"traversed":{}}}"#,
                        tree[target].level(),
                        node.traversed()
                    )?;
                    after_element = true;
                } else {
                    write!(
                        out,
                        r#","level":{},"incl_direct":{},"incl_indirect":{},"excl":{},"children":["#,
                        node.level(),
                        node.incl_direct(),
                        node.incl_indirect(),
                        node.excl()
                    )?;
                    after_element = false;
                }
            }
            Visit::Leave(id) => {
                if !tree[id].is_stub() {
                    out.write_all(b"]}")?;
                    after_element = true;
                }
            }
        }
    }
    out.write_all(b"]}")
}

/// [`write_json`] into a string.
///
/// # Panics
///
/// If `routines` is smaller than the table the tree was built with.
pub fn to_json(
    tree: &CallTree,
    routines: &RoutineTable,
    metric: &str,
    options: &RenderOptions,
) -> String {
    into_string(|out| write_json(out, tree, routines, metric, options))
}

/// Writes the flat table, routines by inclusive weight; rows whose inclusive
/// weight is under `options.limit_percent` of the total are hidden.
///
/// ```text
/// Flat profile, total samples 6
///
///   samples  samples
/// Inclusive     Self  Routine
/// ---------  -------  -------
///         6        3  r
/// ```
///
/// # Errors
///
/// Any error of `out`.
pub fn write_flat_text<W: Write + ?Sized>(
    out: &mut W,
    flat: &FlatProfile,
    routines: &RoutineTable,
    metric: &str,
    options: &RenderOptions,
) -> io::Result<()> {
    const INCLUSIVE: &str = "Inclusive";
    const SELF: &str = "Self";
    let total = flat.total_weight();
    let rows: Vec<_> = flat
        .rows(routines)
        .into_iter()
        .filter(|row| row.inclusive as f64 * 100.0 >= options.limit_percent * total as f64)
        .collect();
    let w1 = rows
        .iter()
        .map(|row| digits(row.inclusive))
        .chain([INCLUSIVE.len(), metric.len()])
        .max()
        .unwrap_or(0);
    let w2 = rows
        .iter()
        .map(|row| digits(row.exclusive))
        .chain([SELF.len(), metric.len()])
        .max()
        .unwrap_or(0);
    writeln!(out, "Flat profile, total {metric} {total}")?;
    writeln!(out)?;
    writeln!(out, "{metric:>w1$}  {metric:>w2$}")?;
    writeln!(out, "{INCLUSIVE:>w1$}  {SELF:>w2$}  {ROUTINE}")?;
    writeln!(out, "{:-<w1$}  {:-<w2$}  {ROUTINE_RULE}", "", "")?;
    for row in rows {
        writeln!(
            out,
            "{:>w1$}  {:>w2$}  {}",
            row.inclusive,
            row.exclusive,
            routines.name(row.routine)
        )?;
    }
    Ok(())
}

/// Writes the flat table as JSON:
/// `{"metric":"samples","total":6,"routines":[{"routine":"r","inclusive":6,"self":3}]}`,
/// every routine held by a sample, in the order of [`FlatProfile::rows`].
///
/// # Errors
///
/// Any error of `out`.
pub fn write_flat_json<W: Write + ?Sized>(
    out: &mut W,
    flat: &FlatProfile,
    routines: &RoutineTable,
    metric: &str,
) -> io::Result<()> {
    out.write_all(br#"{"metric":"#)?;
    write_json_string(out, metric)?;
    write!(out, r#","total":{},"routines":["#, flat.total_weight())?;
    for (index, row) in flat.rows(routines).into_iter().enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        out.write_all(br#"{"routine":"#)?;
        write_json_string(out, routines.name(row.routine))?;
        write!(
            out,
            r#","inclusive":{},"self":{}}}"#,
            row.inclusive, row.exclusive
        )?;
    }
    out.write_all(b"]}")
}

fn write_json_string<W: Write + ?Sized>(out: &mut W, text: &str) -> io::Result<()> {
    serde_json::to_writer(out, text).map_err(io::Error::from)
}

fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

fn pad<W: Write + ?Sized>(out: &mut W, mut count: usize) -> io::Result<()> {
    const SPACES: [u8; 64] = [b' '; 64];
    while count > 0 {
        let chunk = count.min(SPACES.len());
        out.write_all(&SPACES[..chunk])?;
        count -= chunk;
    }
    Ok(())
}
