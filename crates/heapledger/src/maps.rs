//! Lines of `/proc/PID/maps`.

/// One mapping: `start-end perms offset dev inode path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapsLine<'a> {
    pub start: u64,
    pub end: u64,
    pub perms: &'a str,
    pub offset: u64,
    /// The rest of the line: a file path (which may hold spaces), a name
    /// such as `[heap]`, or empty for an anonymous mapping.
    pub path: &'a str,
}

impl MapsLine<'_> {
    pub fn executable(&self) -> bool {
        self.perms.contains('x')
    }
}

/// Parses one line; `None` for a line that is not a mapping.
pub fn parse_line(line: &str) -> Option<MapsLine<'_>> {
    let mut rest = line;
    let mut field = || {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (f, r) = rest.split_at(end);
        rest = r;
        (!f.is_empty()).then_some(f)
    };
    let (range, perms, offset) = (field()?, field()?, field()?);
    let (_dev, _inode) = (field()?, field()?);
    let (lo, hi) = range.split_once('-')?;
    Some(MapsLine {
        start: u64::from_str_radix(lo, 16).ok()?,
        end: u64::from_str_radix(hi, 16).ok()?,
        perms,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: rest.trim(),
    })
}

/// Every mapping of a maps text.
pub fn parse(text: &str) -> impl Iterator<Item = MapsLine<'_>> {
    text.lines().filter_map(parse_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_and_without_paths() {
        let m = parse_line("7f00-7f80 r-xp 00001000 08:01 1234   /usr/lib/my lib.so").unwrap();
        assert_eq!((m.start, m.end, m.offset), (0x7f00, 0x7f80, 0x1000));
        assert_eq!(m.path, "/usr/lib/my lib.so");
        assert!(m.executable());
        let anon = parse_line("1000-2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(anon.path, "");
        assert!(!anon.executable());
        assert_eq!(parse_line("not a mapping"), None);
        assert_eq!(parse("").count(), 0);
    }
}
