//! Column blocks: rows of unsigned integers stored column by column, each
//! value a LEB128 varint, the whole block compressed with zstd.
//!
//! Why by hand: SQLite stores a row of 28 integers per stack in about 60
//! bytes, and compresses nothing. Columns of one counter (most of them
//! zero, or equal to another column: a stack frees as many blocks as it
//! allocated) compress to a few bits per value. No crate does exactly
//! this (Arrow and Parquet would do it, at the cost of a second file
//! format beside SQLite and several megabytes of code); it is 100 lines.

use crate::StoreError;

/// Rows per block: a reader decompresses one block at a time (at most
/// `BLOCK_ROWS * columns * 10` bytes), and the index of blocks by first
/// row stays small.
pub const BLOCK_ROWS: usize = 16_384;

/// zstd's level for blocks: 3 is its default, fast and already within a
/// few percent of its best on these columns.
const LEVEL: i32 = 3;

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encodes `rows` rows of `columns` values (given column by column: value
/// `r` of column `c` is `data[c * rows + r]`) and compresses them.
pub fn encode_columns(data: &[u64], columns: usize) -> Result<Vec<u8>, StoreError> {
    let io = |e: std::io::Error| StoreError::Io(e.to_string());
    CODEC.with(|c| {
        let mut c = c.borrow_mut();
        let Codec { compressor, raw } = &mut *c;
        raw.clear();
        raw.reserve(data.len() * 2 + 8);
        put(raw, columns as u64);
        put(raw, data.len().checked_div(columns).unwrap_or(0) as u64);
        for &v in data {
            put(raw, v);
        }
        if compressor.is_none() {
            *compressor = Some(zstd::bulk::Compressor::new(LEVEL).map_err(io)?);
        }
        compressor
            .as_mut()
            .map_or(Ok(Vec::new()), |z| z.compress(raw).map_err(io))
    })
}

/// A thread's compression context and buffer, kept from block to block:
/// zstd's context is a few MB, and each block took and gave back its own
/// (and the raw bytes' buffer, up to 4 MB): 80 000 page faults of the
/// profile's writing, of Python compiling its library, where large blocks
/// come from the system and go back to it.
struct Codec {
    compressor: Option<zstd::bulk::Compressor<'static>>,
    raw: Vec<u8>,
}

thread_local! {
    static CODEC: std::cell::RefCell<Codec> = const {
        std::cell::RefCell::new(Codec {
            compressor: None,
            raw: Vec::new(),
        })
    };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decodes a block written by [`encode_columns`] with `columns` columns,
/// holding `rows` rows; the values come back column by column. A block
/// that does not decompress, or holds anything else, is an error, never a
/// panic, and never takes more memory than such a block can need.
pub fn decode_columns(blob: &[u8], columns: usize, rows: usize) -> Result<Vec<u64>, StoreError> {
    let bad = |why: &str| StoreError::Corrupt(format!("a block of {rows} rows {why}"));
    if rows > BLOCK_ROWS || columns == 0 || columns > 64 {
        return Err(bad("is larger than any block"));
    }
    let limit = 20 + rows * columns * 10;
    let raw = DECOMPRESSOR
        .with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = zstd::bulk::Decompressor::new().ok();
            }
            d.as_mut().map(|d| d.decompress(blob, limit))
        })
        .unwrap_or_else(|| zstd::bulk::decompress(blob, limit))
        .map_err(|_| bad("does not decompress"))?;
    let mut at = 0;
    let mut get = || -> Result<u64, StoreError> {
        let mut v: u64 = 0;
        let mut shift = 0;
        loop {
            let b = *raw.get(at).ok_or_else(|| bad("is cut short"))?;
            at += 1;
            if shift == 63 && b > 1 {
                return Err(bad("holds a number too large"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
        }
    };
    if get()? != columns as u64 || get()? != rows as u64 {
        return Err(bad("has another shape than its index says"));
    }
    let mut out = Vec::with_capacity(rows * columns);
    for _ in 0..rows * columns {
        out.push(get()?);
    }
    if at != raw.len() {
        return Err(bad("has bytes after its values"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_round_trip() {
        let data: Vec<u64> = (0..3000u64).map(|i| i * i * 7919 % 100_003).collect();
        let blob = encode_columns(&data, 3).unwrap();
        assert_eq!(decode_columns(&blob, 3, 1000).unwrap(), data);
        assert!(decode_columns(&blob, 2, 1500).is_err());
        assert!(decode_columns(&blob[..blob.len() / 2], 3, 1000).is_err());
        assert!(decode_columns(b"not zstd", 3, 1000).is_err());
    }

    #[test]
    fn zigzag_round_trips() {
        for v in [0, 1, -1, i64::MAX, i64::MIN, 12345, -98765] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
