//! Code addresses as MALT writes them: hex strings such as `"0x563b06c6e181"`.
//!
//! MALT keys `sites.instr`, stack frames, timeline call sites and mapping bounds
//! by these strings. Keeping them as text would make every profile carry
//! millions of small heap strings, so [`Addr`] stores the number and only
//! formats it when written. MALT's Python mode adds a second address space
//! written `"PY-0x..."` (and `"PYPTR-0x..."`); it is kept apart so that a
//! Python frame id never collides with a native address.
//!
//! A stack frame address is a return address minus one (it points inside the
//! call instruction, so it symbolizes to the calling line); [`Addr`] does not
//! change it: it is whatever the recorder stored.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which address space an [`Addr`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum AddrSpace {
    /// A native code address in the profiled process (`"0x..."`).
    #[default]
    Native,
    /// A MALT Python frame id (`"PY-0x..."`), not a machine address.
    Python,
    /// A MALT Python translation pointer (`"PYPTR-0x..."`).
    PythonPtr,
}

impl AddrSpace {
    /// The text written before `0x`.
    pub const fn prefix(self) -> &'static str {
        match self {
            AddrSpace::Native => "",
            AddrSpace::Python => "PY-",
            AddrSpace::PythonPtr => "PYPTR-",
        }
    }
}

/// A code address (or MALT Python frame id), written as a `0x` hex string.
///
/// Packed (9 bytes, not 16): a profile of 500 000 stacks 46 frames deep
/// holds 20 million of them, 140 MB less so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(C, packed)]
pub struct Addr {
    space: AddrSpace,
    value: u64,
}

impl Addr {
    /// The null address, written `"0x0"` (MALT uses it for "no call site").
    pub const NULL: Addr = Addr::native(0);

    /// A native address.
    pub const fn native(value: u64) -> Addr {
        Addr {
            space: AddrSpace::Native,
            value,
        }
    }

    /// A MALT Python frame id (`"PY-0x..."`).
    pub const fn python(value: u64) -> Addr {
        Addr {
            space: AddrSpace::Python,
            value,
        }
    }

    /// The numeric value.
    pub const fn value(self) -> u64 {
        self.value
    }

    /// The address space.
    pub const fn space(self) -> AddrSpace {
        self.space
    }

    /// Whether this is the null native address.
    pub const fn is_null(self) -> bool {
        matches!(self.space, AddrSpace::Native) && self.value == 0
    }

    /// Writes the address into `buf` and returns the text, without allocating.
    /// Used on the write path, where profiles hold millions of addresses.
    pub fn format_into(self, buf: &mut [u8; 24]) -> &str {
        // Only ASCII bytes were written, so this cannot fail; fall back to an
        // empty string rather than panic.
        std::str::from_utf8(self.format_bytes(buf)).unwrap_or("")
    }

    /// [`Addr::format_into`]'s text as bytes (ASCII), from a table of digit
    /// pairs, with no loop and no prefix copy for native addresses: a
    /// profile with a million deep stacks writes twenty million of these.
    pub fn format_bytes(self, buf: &mut [u8; 24]) -> &[u8] {
        const PAIRS: [[u8; 2]; 256] = {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let mut t = [[0u8; 2]; 256];
            let mut i = 0;
            while i < 256 {
                t[i] = [HEX[i >> 4], HEX[i & 0xf]];
                i += 1;
            }
            t
        };
        let v = self.value;
        // All 16 digits at fixed places (no bounds checks, no loop), then
        // the text starts at the first significant one ("0x0" for 0).
        for k in 0..8 {
            let byte = (v >> (56 - 8 * k)) & 0xff;
            buf[8 + 2 * k..10 + 2 * k].copy_from_slice(&PAIRS[byte as usize]);
        }
        let digits = (67 - (v | 1).leading_zeros() as usize) / 4;
        let mut pos = buf.len() - digits;
        pos -= 2;
        buf[pos] = b'0';
        buf[pos + 1] = b'x';
        if self.space != AddrSpace::Native {
            let prefix = self.space.prefix().as_bytes();
            pos -= prefix.len();
            buf[pos..pos + prefix.len()].copy_from_slice(prefix);
        }
        &buf[pos..]
    }
}

impl From<u64> for Addr {
    fn from(value: u64) -> Addr {
        Addr::native(value)
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 24];
        f.write_str(self.format_into(&mut buf))
    }
}

/// Why a string is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an address (expected a hex string such as \"0x401000\")")]
pub struct ParseAddrError(pub String);

impl FromStr for Addr {
    type Err = ParseAddrError;

    /// Accepts `0x1a2b`, `0X1A2B`, `PY-0x1` and `(nil)` (glibc's `%p` for null).
    fn from_str(s: &str) -> Result<Addr, ParseAddrError> {
        let err = || ParseAddrError(s.to_owned());
        if s == "(nil)" {
            return Ok(Addr::NULL);
        }
        let (space, rest) = if let Some(rest) = s.strip_prefix("PY-") {
            (AddrSpace::Python, rest)
        } else if let Some(rest) = s.strip_prefix("PYPTR-") {
            (AddrSpace::PythonPtr, rest)
        } else {
            (AddrSpace::Native, s)
        };
        let digits = rest
            .strip_prefix("0x")
            .or_else(|| rest.strip_prefix("0X"))
            .ok_or_else(err)?;
        // `from_str_radix` alone would also take a leading `+`.
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err());
        }
        let value = u64::from_str_radix(digits, 16).map_err(|_| err())?;
        Ok(Addr { space, value })
    }
}

impl Serialize for Addr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 24];
        serializer.serialize_str(self.format_into(&mut buf))
    }
}

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Addr, D::Error> {
        struct AddrVisitor;
        impl Visitor<'_> for AddrVisitor {
            type Value = Addr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address as a hex string such as \"0x401000\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Addr, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(AddrVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_malt() {
        assert_eq!(Addr::native(0x563b06c6e181).to_string(), "0x563b06c6e181");
        assert_eq!(Addr::NULL.to_string(), "0x0");
        assert_eq!(Addr::python(7).to_string(), "PY-0x7");
        assert_eq!(Addr::native(u64::MAX).to_string(), "0xffffffffffffffff");
        assert_eq!(Addr::python(u64::MAX).to_string(), "PY-0xffffffffffffffff");
    }

    /// Every digit count, with and without the high digit of each pair.
    #[test]
    fn formats_every_length_like_std() {
        let mut values = vec![0u64, 1, 0xf, 0x10, 0xff, 0x100, u64::MAX];
        for shift in 0..64 {
            values.extend([1u64 << shift, (1u64 << shift) - 1, 0xa5u64 << (shift / 2)]);
        }
        let mut buf = [0u8; 24];
        for v in values {
            assert_eq!(Addr::native(v).format_into(&mut buf), format!("{v:#x}"));
            assert_eq!(Addr::python(v).format_into(&mut buf), format!("PY-{v:#x}"));
            let ptr = Addr {
                space: AddrSpace::PythonPtr,
                value: v,
            };
            assert_eq!(ptr.format_into(&mut buf), format!("PYPTR-{v:#x}"));
        }
    }

    #[test]
    fn parses_and_round_trips() {
        for s in [
            "0x0",
            "0x1",
            "0x563b06c6e181",
            "PY-0x7",
            "PYPTR-0x10",
            "0xffffffffffffffff",
        ] {
            let a: Addr = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
        }
        assert_eq!("0X1F".parse::<Addr>().unwrap(), Addr::native(0x1f));
        assert_eq!("(nil)".parse::<Addr>().unwrap(), Addr::NULL);
        assert_eq!(
            "0x00000000000000000001".parse::<Addr>().unwrap(),
            Addr::native(1)
        );
    }

    #[test]
    fn rejects_non_addresses() {
        for s in [
            "",
            "0x",
            "12",
            "0xg",
            "PY-",
            "0x10000000000000000",
            "-0x1",
            "0x-1",
            "0x+1",
        ] {
            assert!(s.parse::<Addr>().is_err(), "{s:?} parsed");
        }
    }
}
