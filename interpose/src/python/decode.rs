//! The cold part: names and line numbers of a code location, decoded in-process once per new
//! call site (names once per code object), with the same checks as the walk: every object's
//! type is verified before its fields are read, lengths are bounded. Reads go through a
//! [`Mem`]: direct for the calling thread's code objects, through the kernel for another
//! thread's (`mem::Remote`), where a read that fails gives no name or no line.

use syncspy_abi::python::{CodeText, FILE_MAX, NAME_MAX};

use super::layout::Python;
use super::mem::Mem;
use super::walk::plausible;

/// Line tables longer than this are not read (a real one is a few bytes per instruction).
const MAX_TABLE: usize = 1 << 20;
/// Characters decoded from a string at most.
const MAX_CHARS: usize = 512;

/// Identity of a code object for the code table: its address with its first line and the
/// addresses of its file and name strings, so a code object freed and another allocated at
/// the same address is, in practice, another key.
///
/// # Safety
/// For `Local`: `code` was accepted by the walk (a checked code object of this thread's live
/// frames). `Remote` has no requirement.
pub unsafe fn code_key<M: Mem>(py: &Python, m: &mut M, code: usize) -> u64 {
    let l = &py.layout;
    // SAFETY: the caller's contract; offsets inside the code object.
    let (first, file, name) = unsafe {
        (
            m.read::<i32>(code + l.code_firstlineno).unwrap_or(0),
            m.word(code, l.code_filename).unwrap_or(0),
            m.word(code, l.code_name).unwrap_or(0),
        )
    };
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for v in [code as u64, first as u64, file as u64, name as u64] {
        h = (h ^ v).wrapping_mul(0xbf58_476d_1ce4_e5b9).rotate_left(31);
    }
    h | 1
}

/// Fills `t` with the file name, qualified name and first line of `code`.
///
/// # Safety
/// As for `code_key`.
pub unsafe fn names<M: Mem>(py: &Python, m: &mut M, code: usize, t: &mut CodeText) {
    let l = &py.layout;
    let mut buf = [0u8; 4 * MAX_CHARS];
    // SAFETY: the caller's contract.
    let (file, name, first) = unsafe {
        (
            m.word(code, l.code_filename).unwrap_or(0),
            m.word(code, l.code_name).unwrap_or(0),
            m.read::<i32>(code + l.code_firstlineno).unwrap_or(0),
        )
    };
    // SAFETY: the string objects of a live code object, type-checked before use.
    if let Some(n) = unsafe { string(py, m, file, true, FILE_MAX, &mut buf) } {
        t.set_file(&buf[..n]);
    }
    // SAFETY: as above.
    if let Some(n) = unsafe { string(py, m, name, false, NAME_MAX, &mut buf) } {
        t.set_name(&buf[..n]);
    }
    t.first_line = first.max(0) as u32;
}

/// The UTF-8 of a compact `str` object into `out`: its last `max_chars` characters when `tail`,
/// else its first. `None` for anything else (not a `str`, a legacy non-compact string, an
/// implausible length, memory that cannot be read).
///
/// # Safety
/// `obj` is a field of a live object (it is type-checked here before being read further).
unsafe fn string<M: Mem>(
    py: &Python,
    m: &mut M,
    obj: usize,
    tail: bool,
    max_chars: usize,
    out: &mut [u8; 4 * MAX_CHARS],
) -> Option<usize> {
    let l = &py.layout;
    // SAFETY: checked before the header is read; then offsets inside a `str` object.
    if !plausible(obj) || unsafe { m.word(obj, l.ob_type) }? != py.unicode_type {
        return None;
    }
    // SAFETY: a `str` object (checked above).
    let (len, state) = unsafe {
        (
            m.word(obj, l.unicode_length)?,
            m.read::<u32>(obj + l.unicode_state)?,
        )
    };
    let kind = (state >> 2) & 7;
    let compact = state >> 5 & 1 == 1;
    let ascii = state >> 6 & 1 == 1;
    if !compact || len > MAX_TABLE || !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let data = obj
        + if ascii {
            l.unicode_ascii_size
        } else {
            l.unicode_compact_size
        };
    let width = kind as usize;
    let take = len.min(max_chars.min(MAX_CHARS));
    let from = if tail { len - take } else { 0 };
    let mut raw = [0u8; 4 * MAX_CHARS];
    let raw = &mut raw[..take * width];
    // SAFETY: `from + take <= len`: inside the string's character data of width `kind`.
    if !unsafe { m.bytes(data + from * width, raw) } {
        return None;
    }
    let mut n = 0;
    for ch in raw.chunks_exact(width) {
        let c = match width {
            1 => u32::from(ch[0]),
            2 => u32::from(u16::from_ne_bytes([ch[0], ch[1]])),
            _ => u32::from_ne_bytes([ch[0], ch[1], ch[2], ch[3]]),
        };
        let c = char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER);
        n += c.encode_utf8(&mut out[n..]).len();
    }
    Some(n)
}

/// The source line of instruction `instr` (code units) of `code`; `None` when the line table
/// has none or cannot be read.
///
/// # Safety
/// As for `code_key`.
pub unsafe fn line<M: Mem>(py: &Python, m: &mut M, code: usize, instr: u32) -> Option<u32> {
    let l = &py.layout;
    // SAFETY: the caller's contract.
    let (table, first) = unsafe {
        (
            m.word(code, l.code_linetable)?,
            m.read::<i32>(code + l.code_firstlineno)?,
        )
    };
    // SAFETY: checked before the header is read.
    if !plausible(table) || unsafe { m.word(table, l.ob_type) }? != py.bytes_type {
        return None;
    }
    // SAFETY: a `bytes` object (checked above): its size, then that many bytes of data.
    let n = unsafe { m.word(table, l.ob_size) }?;
    if n > MAX_TABLE {
        return None;
    }
    let v311 = py.layout.code_adaptive.is_some();
    // SAFETY: as above.
    let line = unsafe {
        m.with_bytes(table + l.bytes_data, n, |bytes| {
            if v311 {
                line_311(bytes, first, instr)
            } else {
                line_310(bytes, first, instr)
            }
        })
    }??;
    u32::try_from(line).ok().filter(|l| *l > 0)
}

/// The 3.10 line table (`Objects/lnotab_notes.txt`): pairs of (bytecode bytes as u8, line
/// delta as i8); a line delta of -128 means "no line"; addresses are bytes.
pub fn line_310(t: &[u8], first: i32, instr: u32) -> Option<i64> {
    let addr = u64::from(instr) * 2;
    let (mut line, mut end) = (i64::from(first), 0u64);
    for pair in t.chunks_exact(2) {
        let start = end;
        end += u64::from(pair[0]);
        let delta = pair[1] as i8;
        let here = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if start <= addr && addr < end {
            return here;
        }
    }
    None
}

/// The 3.11+ location table (`InternalDocs/locations.md`): entries led by a byte with the top
/// bit set, `code` in bits 3–6 and the length in code units minus one in bits 0–2; codes 13
/// and 14 carry a signed varint line delta, 10–12 a delta of `code - 10`, 15 "no location",
/// the others the same line. Lines count from `co_firstlineno`.
pub fn line_311(t: &[u8], first: i32, instr: u32) -> Option<i64> {
    let target = u64::from(instr);
    let (mut line, mut addr, mut i) = (i64::from(first), 0u64, 0usize);
    while i < t.len() {
        let b = t[i];
        if b & 0x80 == 0 {
            return None;
        }
        let code = (b >> 3) & 15;
        let len = u64::from(b & 7) + 1;
        line += match code {
            13 | 14 => signed_varint(&t[i + 1..])?,
            10..=12 => i64::from(code - 10),
            _ => 0,
        };
        if addr <= target && target < addr + len {
            return (code != 15).then_some(line);
        }
        addr += len;
        i += 1;
        while i < t.len() && t[i] & 0x80 == 0 {
            i += 1;
        }
    }
    None
}

/// 6-bit chunks, least significant first, bit 6 set on all but the last; the lowest bit of
/// the result is the sign.
fn signed_varint(t: &[u8]) -> Option<i64> {
    let mut v = 0u64;
    for (k, b) in t.iter().take(6).enumerate() {
        v |= u64::from(b & 63) << (6 * k);
        if b & 64 == 0 {
            let m = (v >> 1) as i64;
            return Some(if v & 1 == 1 { -m } else { m });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_table_lines() {
        // def at line 10: [RESUME: code 10 (no delta... one-line form 0)], then a long form
        // +3, a no-columns form -1, "no location", a short form (same line).
        let t = [
            0x80 | 10 << 3, // 1 unit, line +0 (one-line form), 2 column bytes follow
            5,
            9,
            0x80 | 14 << 3 | 1, // 2 units, long form: line +3, end, col, end col
            6,
            0,
            1,
            2,
            0x80 | 13 << 3, // 1 unit, no columns: line -1
            3,
            0x80 | 15 << 3 | 2, // 3 units, no location
            0x80 | 2 << 3,      // 1 unit, short form: same line
            7,
        ];
        let got: Vec<_> = (0..9).map(|i| line_311(&t, 10, i)).collect();
        assert_eq!(
            got,
            [
                Some(10),
                Some(13),
                Some(13),
                Some(12),
                None,
                None,
                None,
                Some(12),
                None
            ]
        );
        assert_eq!(line_311(&[0x05], 1, 0), None, "an entry needs its top bit");
        assert_eq!(signed_varint(&[0x40 | 1, 2]), Some(-(((2 << 6) | 1) >> 1)));
    }

    #[test]
    fn lnotab_lines() {
        // 4 bytes at +1, 0 bytes at +2 (a line with no code), 6 bytes at -1, 2 bytes no line.
        let t = [4, 1, 0, 2, 6, (-1i8) as u8, 2, (-128i8) as u8];
        let got: Vec<_> = (0..7).map(|i| line_310(&t, 20, i)).collect();
        assert_eq!(
            got,
            [Some(21), Some(21), Some(22), Some(22), Some(22), None, None]
        );
    }
}
