//! Global and thread-local variables of an ELF file (MALT's
//! `memStats.globalVariables`): every data and TLS symbol with its size,
//! from the symbol table (`object`), and, where the file has DWARF, the
//! source file and line that declare it (`gimli`: a variable's location is
//! its address, `DW_OP_addr`, or its offset in the TLS block,
//! `DW_OP_const*u` then `DW_OP_form_tls_address`).
//!
//! Written with these two crates rather than blazesym, which symbolizes
//! code addresses: it lists data symbols but not TLS ones, and reads no
//! declaration lines of variables.

use std::collections::HashMap;
use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

/// One variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalVar {
    /// The symbol as the file names it.
    pub symbol: String,
    /// Demangled.
    pub name: String,
    pub size: u64,
    pub tls: bool,
    /// Its offset in its section (in the TLS block for a TLS variable).
    pub offset: u64,
    /// Its section's offset in the file.
    pub section_offset: u64,
    /// Where it is declared, where DWARF says.
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// Files larger than this are not read for their variables.
const MAX_FILE: u64 = 1 << 30;
/// DWARF larger than this is not walked for the variables' lines.
const MAX_DEBUG_INFO: u64 = 64 << 20;

/// The variables of the ELF file at `path`; empty where it cannot be read.
/// (`heapledger` reads each file once per run and shares the list.)
pub fn read_globals(path: &Path) -> Vec<GlobalVar> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Vec::new();
    };
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Vec::new();
    }
    // Mapped, not read: only the pages parsed are brought in, and they are
    // the file's (a Python binary with its DWARF is tens of MB).
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    // SAFETY: the mapping is private and read-only; a file changed under
    // it while it is parsed gives wrong names or a parse error, which
    // `object` and `gimli` report as errors, not undefined behaviour of
    // ours (they read it as plain bytes).
    #[allow(unsafe_code)]
    let Ok(data) = (unsafe { memmap2::Mmap::map(&f) }) else {
        return Vec::new();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return Vec::new();
    };
    let decls = declarations(&file).unwrap_or_default();
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        let tls = sym.kind() == SymbolKind::Tls;
        if !(tls || sym.kind() == SymbolKind::Data) || sym.is_undefined() {
            continue;
        }
        let Ok(symbol) = sym.name() else { continue };
        if symbol.is_empty() || !seen.insert((symbol.to_owned(), sym.address())) {
            continue;
        }
        let section = sym
            .section_index()
            .and_then(|i| file.section_by_index(i).ok());
        let (section_addr, section_offset) = section
            .as_ref()
            .map(|s| (s.address(), s.file_range().map_or(0, |r| r.0)))
            .unwrap_or((0, 0));
        // A TLS symbol's value is its offset in the TLS block already.
        let offset = if tls {
            sym.address()
        } else {
            sym.address().wrapping_sub(section_addr)
        };
        let decl = decls.get(&(tls, sym.address()));
        out.push(GlobalVar {
            name: crate::demangle(symbol),
            symbol: symbol.to_owned(),
            size: sym.size(),
            tls,
            offset,
            section_offset,
            file: decl.map(|d| d.0.clone()),
            line: decl.map(|d| d.1),
        });
    }
    out.sort_by(|a, b| (b.size, &a.name).cmp(&(a.size, &b.name)));
    out
}

type Decls = HashMap<(bool, u64), (String, u32)>;

/// (TLS, address or TLS offset) -> (file, line) of every variable DWARF
/// places.
fn declarations(file: &object::File) -> Option<Decls> {
    use gimli::{AttributeValue, Operation, RunTimeEndian};
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    // Only files with debug information, and not too much of it (its units
    // are all walked); compressed sections are inflated by `object`.
    let info = file.section_by_name(".debug_info")?;
    if info.size() > MAX_DEBUG_INFO {
        return None;
    }
    let load = |id: gimli::SectionId| -> Result<std::borrow::Cow<[u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(std::borrow::Cow::Borrowed(&[][..])))
    };
    let owned = gimli::DwarfSections::load(load).ok()?;
    let dwarf = owned.borrow(|s| gimli::EndianSlice::new(s, endian));
    let mut out = Decls::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let lines = unit.line_program.as_ref().map(|p| p.header().clone());
        let file_name = |index: u64| -> Option<String> {
            let h = lines.as_ref()?;
            let f = h.file(index)?;
            let name = dwarf.attr_string(&unit, f.path_name()).ok()?;
            let name = name.to_string_lossy().into_owned();
            if name.starts_with('/') {
                return Some(name);
            }
            let dir = f
                .directory(h)
                .and_then(|d| dwarf.attr_string(&unit, d).ok())
                .map(|d| d.to_string_lossy().into_owned());
            Some(match dir {
                Some(d) if !d.is_empty() => format!("{d}/{name}"),
                _ => name,
            })
        };
        let mut entries = unit.entries();
        while let Ok(Some(e)) = entries.next_dfs() {
            if e.tag() != gimli::DW_TAG_variable {
                continue;
            }
            let Some(AttributeValue::Exprloc(expr)) = e.attr_value(gimli::DW_AT_location) else {
                continue;
            };
            let mut ops = expr.operations(unit.encoding());
            let (tls, at) = match ops.next() {
                Ok(Some(Operation::Address { address })) => (false, address),
                Ok(Some(Operation::UnsignedConstant { value })) => match ops.next() {
                    Ok(Some(Operation::TLS)) => (true, value),
                    _ => continue,
                },
                _ => continue,
            };
            let line = match e.attr_value(gimli::DW_AT_decl_line) {
                Some(v) => v.udata_value().unwrap_or(0) as u32,
                _ => continue,
            };
            let file = match e.attr_value(gimli::DW_AT_decl_file) {
                Some(AttributeValue::FileIndex(i)) => file_name(i),
                Some(v) => v.udata_value().and_then(file_name),
                _ => None,
            };
            if let Some(file) = file {
                out.entry((tls, at)).or_insert((file, line));
            }
        }
    }
    Some(out)
}
